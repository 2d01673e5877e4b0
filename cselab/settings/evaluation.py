"""``evaluation``: how every checkpoint is encoded and scored, and the reports built on the
scores; defaults the paper config's."""

from typing import ClassVar, Literal

from cselab.settings.base import setting, settings

POSITIVE = {"minimum": 1}
#: a name of the config (a table, an experiment, a BEIR dataset)
NAME = {"pattern": "^[A-Za-z0-9][A-Za-z0-9._-]*$"}
TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
BEIR_DATASETS = ["trec-covid", "nfcorpus", "nq", "hotpotqa", "fiqa", "arguana", "webis-touche2020", "cqadupstack",
                 "quora", "dbpedia-entity", "scidocs", "fever", "climate-fever", "scifact"]


@settings
class Transfer:
    """The 7 SentEval transfer tasks."""

    mode: Literal["test", "fast"] = setting("test", doc='SentEval "test" (10-fold) or "fast" (5-fold)')
    seed: int = setting(1111, minimum=0)
    tasks: list[Literal[TRANSFER_TASKS]] = setting(list(TRANSFER_TASKS), minItems=1)
    classifier: Literal["senteval", "sklearn"] = setting(
        "senteval", doc="senteval: SentEval's PyTorch logistic regression (the papers'); sklearn: scikit-learn's")
    max_items: int | None = setting(None, minimum=100,
                                    doc="at most this many items in each split of each task, a seeded random subset "
                                        "(a smoke-scale bound on the cost; null: every item, as the papers)")


@settings
class BeirResources:
    """One BEIR dataset's resources over the size-based estimate (absent: the estimate)."""

    mem_mb: int = setting(None, fill=False, **POSITIVE)
    disk_mb: int = setting(None, fill=False, **POSITIVE)
    prepare_disk_mb: int = setting(None, fill=False, **POSITIVE)


@settings
class Beir:
    """InfoCSE Table 3 (zero-shot retrieval, nDCG@10)."""

    datasets: list[str] = setting(BEIR_DATASETS, items=NAME)
    k: int = setting(100, **POSITIVE, doc="documents retrieved per query")
    chunk_size: int = setting(50000, **POSITIVE, doc="corpus documents encoded and scored per block (bounds memory)")
    score: Literal["cos", "dot"] = setting("cos")
    max_len: int = setting(512, minimum=4)
    precision: Literal["auto", "fp32", "fp16"] = setting(
        "auto", doc="score matrix: auto = fp16 on a GPU (the 2k best re-scored in fp32), fp32 on the CPU")
    query_block: int = setting(1024, **POSITIVE, doc="queries scored at once (block x chunk scores in memory)")
    corpus_cache: bool = setting(False, doc="keep the corpus embeddings (fp16) in the embedding cache")
    shared_corpora: dict[str, list[str]] = setting({"fever": ["fever", "climate-fever"]},
                                                   additionalProperties={"minItems": 2, "items": NAME},
                                                   doc="datasets whose corpora are encoded together, once (one job "
                                                       "per checkpoint)")
    resources: dict[str, BeirResources] = setting({}, doc="per dataset {mem_mb, disk_mb, prepare_disk_mb} over the "
                                                          "size-based estimate")


@settings
class Geometry:
    """Alignment / uniformity on STS-B (positives: gold > threshold)."""

    split: Literal["train", "dev", "test"] = setting("test", doc="DiffCSE Table 11 uses the test split (CompCSE "
                                                                 "Figure 2: dev)")
    threshold: float = setting(4.0)


@settings
class Bootstrap:
    DOC: ClassVar[str] = "paired bootstrap of each method against SimCSE over the evaluation pairs"

    n_boot: int = setting(1000, **POSITIVE)
    confidence: float = setting(0.95, exclusiveMinimum=0, exclusiveMaximum=1)
    seed: int = setting(0, minimum=0)


@settings
class Leakage:
    DOC: ClassVar[str] = ("the leakage audit (results/table_leakage.csv): each evaluation set's sentences found in "
                          "the training corpora")

    ngram: int = setting(8, minimum=2, doc="word n-gram length of the overlap test (8)")


@settings
class SeedPower:
    DOC: ClassVar[str] = "the seed planner (results/seed_power.csv, cselab/reporting/power.py)"

    table: str = setting("table_methods", **NAME, doc="the table whose runs (>= 2 seeds) are measured")
    baseline: str | None = setting(None, doc="an experiment of the table (null: its first trained one)")
    metrics: list[Literal["STS avg", "STS-B dev", "transfer avg"]] = setting(
        ["STS avg", "STS-B dev", "transfer avg"], minItems=1, uniqueItems=True)
    max_seeds: int = setting(10, minimum=1, maximum=100, doc="detectable differences for 1..max_seeds seeds per "
                                                              "method")
    differences: list[float] = setting([0.5, 1.0], minItems=1, items={"exclusiveMinimum": 0},
                                       doc="the seeds needed to detect these (points)")
    power: float = setting(0.8, exclusiveMinimum=0, exclusiveMaximum=1, doc="of a two-sided test at 5%")


@settings
class Protocols:
    DOC: ClassVar[str] = ("the protocol-sensitivity table (results/table_protocols.csv, "
                          "cselab/evaluation/protocols.py)")

    table: str = setting("table1", **NAME, doc="every seed of its experiments")
    truncation: int = setting(32, minimum=4, doc="evaluation truncation compared with none (SimCSE's training "
                                                 "length)")


@settings
class Evaluation:
    batch_size: int = setting(128, **POSITIVE)
    max_len: int = setting(512, minimum=4)
    pooler: Literal["cls", "avg"] = setting("cls", doc="evaluation uses [CLS] without the training MLP")
    cache: bool = setting(True, doc="embeddings cached per (checkpoint, dataset) under results/cache")
    transfer: Transfer = setting(Transfer)
    beir: Beir = setting(Beir)
    geometry: Geometry = setting(Geometry)
    bootstrap: Bootstrap = setting(Bootstrap)
    max_tokens: int | None = setting(None, fill=False, **POSITIVE,
                                     doc="at most this many padded tokens per encoding batch (batch size chosen by "
                                         "tokens; evaluation.batch_size caps the rows); unset: 16384")
    leakage: Leakage = setting(Leakage)
    seed_power: SeedPower = setting(SeedPower)
    protocols: Protocols = setting(Protocols)
