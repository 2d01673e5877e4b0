"""Where every output lives: the one source of truth for the rules (their ``input:``/``output:``
patterns) and the library (the files a table or figure reads; what each kind reads is declared
with the kind, :mod:`cselab.reporting`).

Patterns use Snakemake's wildcard syntax (``{exp}``, ``{plm}``, ...); :func:`path` fills them.
"""

from __future__ import annotations

from collections.abc import Mapping

from cselab.evaluation.kinds import result_files

# Data (rule prepare_* / segment_corpus / subsample / resolve_plm)
CORPUS = "resources/corpus/corpus.txt"
CORPUS_MANIFEST = "resources/corpus/manifest.json"
SENTEVAL_MANIFEST = "resources/senteval/manifest.json"
SENTEVAL_TREE = "resources/senteval/tree"
SENTEVAL_READS = "resources/senteval/reads/{reads}.json"  # the files jobs read, by name (rule senteval_reads)
DOWNLOADS = "resources/downloads"
BEIR_MANIFEST = "resources/beir/{dataset}/manifest.json"
BEIR_DATA = "resources/beir/{dataset}/data"
STSB_RETRIEVAL_MANIFEST = "resources/stsb_retrieval/manifest.json"
STSB_RETRIEVAL_DATA = "resources/stsb_retrieval/data"
SPANS = "resources/spans/spans.jsonl"
SPANS_STATS = "resources/spans/stats.json"
# one shard of the segmentation ({shard}: "03-of-16"), temporary: its spans and its record
SPANS_SHARD = "resources/spans/shards/{shard}.jsonl"
SPANS_SHARD_RECORD = "resources/spans/shards/{shard}.json"
SUBSAMPLED = "resources/subsample/{strategy}.txt"
SUBSAMPLED_STATS = "resources/subsample/{strategy}.json"
PLM = "resources/plms/{plm}.json"

# Pretraining stages (rule pretrain): one folder per (stage, PLM)
PRETRAINED_DIR = "resources/pretrained/{stage}/{plm}"
PRETRAINED = PRETRAINED_DIR + "/model"
PRETRAINED_CURVE = PRETRAINED_DIR + "/curve.csv"
PRETRAINED_PLOT = PRETRAINED_CURVE.removesuffix(".csv") + ".png"
PRETRAINED_SUMMARY = PRETRAINED_DIR + "/summary.json"

# Experiments (rule train and the evaluate_* rules)
EXPERIMENT_DIR = "results/experiments/{exp}"
MODEL = EXPERIMENT_DIR + "/model"
CURVE = EXPERIMENT_DIR + "/curve.csv"
TRAIN_SUMMARY = EXPERIMENT_DIR + "/train_summary.json"


class _Results(Mapping):
    """Result name -> its file pattern, from the evaluation kinds' declarations
    (:mod:`cselab.evaluation.kinds`, plugins included: read at each lookup)."""

    def __getitem__(self, name: str) -> str:
        return f"{EXPERIMENT_DIR}/{result_files()[name]}"

    def __iter__(self):
        return iter(result_files())

    def __len__(self) -> int:
        return len(result_files())


#: the evaluation results of an experiment (``sts``, ``sts_pairs``, ``beir`` with ``{dataset}``, ...)
RESULT: Mapping[str, str] = _Results()

EMBEDDING_CACHE = "results/cache/embeddings"
TOKEN_CACHE = "results/cache/tokens"  # tokenised training corpora, shared by experiments and seeds
COMPILE_CACHE = "results/cache/compile"  # inductor's compiled steps, shared by a workflow's training jobs

# Reporting
TABLE_CSV = "results/{table}.csv"
TABLE_MD = "results/{table}.md"
LEAKAGE_CSV = "results/table_leakage.csv"  # the leakage audit (rule leakage_audit)
LEAKAGE_MD = "results/table_leakage.md"
SEED_POWER_CSV = "results/seed_power.csv"  # the seed planner (rule seed_power)
SEED_POWER_MD = "results/seed_power.md"
SEED_POWER_PNG = "results/seed_power.png"
PROTOCOLS_CSV = "results/table_protocols.csv"  # protocol sensitivity (rule protocol_table)
PROTOCOLS_MD = "results/table_protocols.md"
COST_PLAN_CSV = "results/cost_plan.csv"  # GPU-hours, disk, RAM, wall time of cost_plan.targets (rule cost_plan)
COST_PLAN_MD = "results/cost_plan.md"
FIGURE_PNG = "results/{figure}.png"
# A sweep's report (rule sweep, config sweeps.<s>): its table, figure and the selected point's entry
SWEEP_CSV = "results/sweep_{sweep}.csv"
SWEEP_MD = "results/sweep_{sweep}.md"
SWEEP_PNG = "results/sweep_{sweep}.png"
SWEEP_BEST = "results/sweep_{sweep}.best.yaml"
# Sharing (target `exports`): MTEB result files, MTEB's evaluator beside ours, the model card,
# ONNX, the export folder (sentence-transformers files + README.md card + onnx/model.onnx), push
MTEB_DIR = "results/mteb/{exp}"
MTEB_CHECK_CSV = "results/mteb_check.csv"
MTEB_CHECK_MD = "results/mteb_check.md"
CARD = "results/cards/{exp}.md"
ONNX = "results/onnx/{exp}/model.onnx"
ONNX_CHECK = "results/onnx/{exp}/check.json"
EXPORT = "results/export/{exp}"
PUSH_RECEIPT = "results/hub/{exp}.json"
SWEEP_PUSH_RECEIPT = "results/hub/sweeps/{sweep}.json"  # a sweep's winner pushed (rule push_sweep)
FIGURE_CSV = "results/{figure}.csv"
MLFLOW_STORE = "sqlite:///results/mlflow.db"

# Jobs: each rule's log and benchmark (time and memory) files, one per job


def job_log(folder: str, name: str | None = None) -> str:
    """``logs/<folder>.log``, or ``logs/<folder>/<name>.log`` for a rule with wildcards."""
    return f"logs/{folder}/{name}.log" if name else f"logs/{folder}.log"


def job_benchmark(folder: str, name: str | None = None) -> str:
    """``benchmarks/<folder>.tsv``, or ``benchmarks/<folder>/<name>.tsv``."""
    return f"benchmarks/{folder}/{name}.tsv" if name else f"benchmarks/{folder}.tsv"


def path(pattern: str, **wildcards) -> str:
    return pattern.format(**wildcards)


# The corpus split for held-out statistics (rule split_corpus): {fraction} held out
CORPUS_TRAIN_SPLIT = "resources/corpus/split/train-{fraction}.txt"
CORPUS_HELDOUT_SPLIT = "resources/corpus/split/heldout-{fraction}.txt"


def is_result_file(path: str) -> bool:
    """Whether ``path`` is an evaluation's result file (:data:`RESULT`)."""
    import re

    return any(re.fullmatch(re.sub(r"\\\{(\w+)\\\}", "[^/]+", re.escape(pattern)), str(path))
               for pattern in RESULT.values())
