"""Where every output lives and what each table kind reads: the one source of truth for the
rules (their ``input:``/``output:`` patterns) and the library (the files a table needs).

Patterns use Snakemake's wildcard syntax (``{exp}``, ``{plm}``, ...); :func:`path` fills them.
"""

from __future__ import annotations

from dataclasses import dataclass

# Data (rule prepare_* / segment_corpus / subsample / resolve_plm)
CORPUS = "resources/corpus/corpus.txt"
CORPUS_MANIFEST = "resources/corpus/manifest.json"
SENTEVAL_MANIFEST = "resources/senteval/manifest.json"
SENTEVAL_TREE = "resources/senteval/tree"
DOWNLOADS = "resources/downloads"
BEIR_MANIFEST = "resources/beir/{dataset}/manifest.json"
BEIR_DATA = "resources/beir/{dataset}/data"
STSB_RETRIEVAL_MANIFEST = "resources/stsb_retrieval/manifest.json"
STSB_RETRIEVAL_DATA = "resources/stsb_retrieval/data"
SPANS = "resources/spans/spans.jsonl"
SPANS_STATS = "resources/spans/stats.json"
SUBSAMPLED = "resources/subsample/{strategy}.txt"
SUBSAMPLED_STATS = "resources/subsample/{strategy}.json"
PLM = "resources/plms/{plm}.json"

# Pretraining stages (rule pretrain): one folder per (stage, PLM)
PRETRAINED_DIR = "resources/pretrained/{stage}/{plm}"
PRETRAINED = PRETRAINED_DIR + "/model"
PRETRAINED_CURVE = PRETRAINED_DIR + "/curve.csv"
PRETRAINED_PLOT = PRETRAINED_CURVE.removesuffix(".csv") + ".png"
PRETRAINED_SUMMARY = PRETRAINED_DIR + "/summary.json"
PRETRAINED_RESUME = PRETRAINED_DIR + "/resume"

# Experiments (rule train and the evaluate_* rules)
EXPERIMENT_DIR = "results/experiments/{exp}"
MODEL = EXPERIMENT_DIR + "/model"
CURVE = EXPERIMENT_DIR + "/curve.csv"
TRAIN_SUMMARY = EXPERIMENT_DIR + "/train_summary.json"
RESUME = EXPERIMENT_DIR + "/resume"
RESULT = {
    "sts": EXPERIMENT_DIR + "/sts.json",
    "sts_pairs": EXPERIMENT_DIR + "/sts_pairs.npz",
    "stsb_dev": EXPERIMENT_DIR + "/stsb_dev.json",
    "stsb_dev_pairs": EXPERIMENT_DIR + "/stsb_dev_pairs.npz",
    "transfer": EXPERIMENT_DIR + "/transfer.json",
    "transfer_pairs": EXPERIMENT_DIR + "/transfer_pairs.npz",
    # the transfer tasks' development accuracies under SentEval's dev protocol ("fast" parameters)
    "transfer_dev": EXPERIMENT_DIR + "/transfer_dev.json",
    "beir": EXPERIMENT_DIR + "/beir/{dataset}.json",
    "stsb_retrieval": EXPERIMENT_DIR + "/stsb_retrieval.json",
    "geometry": EXPERIMENT_DIR + "/geometry.json",
    # STS-B dev through the training head (SimCSE's "cls" pooler; InfoCSE Table 9)
    "stsb_dev_head": EXPERIMENT_DIR + "/stsb_dev_head.json",
}
EMBEDDING_CACHE = "results/cache/embeddings"
TOKEN_CACHE = "results/cache/tokens"  # tokenised training corpora, shared by experiments and seeds

# Reporting
TABLE_CSV = "results/{table}.csv"
TABLE_MD = "results/{table}.md"
FIGURE_PNG = "results/{figure}.png"
FIGURE_CSV = "results/{figure}.csv"
MLFLOW_STORE = "sqlite:///results/mlflow.db"

# Jobs
LOG = "logs/{rule}/{name}.log"
BENCHMARK = "benchmarks/{rule}/{name}.tsv"


def path(pattern: str, **wildcards) -> str:
    return pattern.format(**wildcards)


@dataclass(frozen=True)
class TableKind:
    """What a table kind reads per experiment and how it is shown.

    ``results``: keys of :data:`RESULT` (a score file, then optional per-pair predictions for
    the paired bootstrap); ``columns``: fixed columns, or None when the config decides (the STS
    tasks, the transfer tasks, the BEIR datasets); ``average``: report the mean of the columns;
    ``digits``: decimals shown.
    """

    results: tuple[str, ...]
    columns: tuple[str, ...] | None = None
    average: bool = False
    digits: int = 2


TABLE_KINDS: dict[str, TableKind] = {
    "sts": TableKind(("sts", "sts_pairs"), average=True),
    "stsb_dev": TableKind(("stsb_dev", "stsb_dev_pairs"), ("STS-B dev",)),
    "transfer": TableKind(("transfer", "transfer_pairs"), average=True),
    "beir": TableKind(("beir",), average=True, digits=4),
    "retrieval": TableKind(("stsb_retrieval",), ("R@1", "R@5", "R@10")),
    "geometry": TableKind(("geometry",), ("alignment", "uniformity"), digits=3),
    # every configured method on one PLM and budget: STS, STS-B dev and the transfer average
    "methods": TableKind(("sts", "sts_pairs", "stsb_dev", "stsb_dev_pairs", "transfer", "transfer_pairs")),
    # STS-B dev with ("cls") and without ("cls_before_pooler") the training head: trained experiments only
    "pooler": TableKind(("stsb_dev_head", "stsb_dev"), ("cls", "cls_before_pooler")),
}


#: columns any table may add after its kind's own (``tables.<t>.extra_columns``): the result each reads
EXTRA_COLUMNS: dict[str, str] = {"STS-B dev": "stsb_dev", "transfer avg (dev)": "transfer_dev"}


@dataclass(frozen=True)
class FigureKind:
    """What a figure kind reads per experiment: ``curve`` (the training curve), ``model`` (the
    checkpoint, or the resolved PLM of an untrained experiment), ``stsb_dev`` (the STS-B dev
    result) or nothing (a simulation); ``trained``: only trained experiments make sense;
    ``heldout``: it also reads the held-out slice of the corpus the experiments did not train on."""

    reads: str | None
    trained: bool = False
    heldout: bool = False


FIGURE_KINDS: dict[str, FigureKind] = {
    # CompCSE Figures 2-5
    "alignment_uniformity": FigureKind("curve", trained=True),
    "dev_curve": FigureKind("curve", trained=True),
    "similarity_heatmap": FigureKind("model"),
    "umap": FigureKind("model"),
    # the gradient paradigm's Figures 2-4 (simulations), 6 (a sweep), 8, 5 and 7, and 9 (training scalars)
    "gradient_dissipation": FigureKind(None),
    "gradient_weight": FigureKind(None),
    "gradient_ratio": FigureKind(None),
    "component_sweep": FigureKind("stsb_dev", trained=True),
    # Figure 8 reads the checkpoint (panel (a) on the held-out slice) and the training curve beside
    # it (panels (b), (c)): one input per experiment, so the curve is derived from the model path
    # (CURVE and MODEL share EXPERIMENT_DIR; rule train writes both)
    "training_ratio": FigureKind("model", trained=True, heldout=True),
    "heldout_statistics": FigureKind("model", heldout=True),
    "angle_statistics": FigureKind("curve", trained=True),
    # DiffCSE Figure 2 (cosine by human rating, STS-B test) and Table 9 (retrieval examples)
    "similarity_by_rating": FigureKind("model"),
    "retrieval_examples": FigureKind("model"),
}

# The corpus split for held-out statistics (rule split_corpus): {fraction} held out
CORPUS_TRAIN_SPLIT = "resources/corpus/split/train-{fraction}.txt"
CORPUS_HELDOUT_SPLIT = "resources/corpus/split/heldout-{fraction}.txt"
