"""An experiment's evaluation results as MTEB result files (Muennighoff et al., 2023, "MTEB:
Massive Text Embedding Benchmark"), the format the MTEB leaderboard and ``mteb``'s result
loader read.

One ``<TaskName>.json`` per task (MTEB's ``TaskResult``: ``task_name``, ``dataset_revision``,
``mteb_version``, ``evaluation_time``, ``scores: {split: [{main_score, hf_subset, languages,
...}]}``) plus ``model_meta.json`` (name and revision), the layout of one model revision in
MTEB's results repository. Scores are fractions, as MTEB writes them (our tables: x100).

- STS: MTEB's task names (``STS12`` ... ``STS16``, ``STSBenchmark``, ``SICK-R``), split
  ``test``, keys ``cosine_spearman`` (the main score), ``cosine_pearson``, ``spearman``,
  ``pearson`` (the model's similarity is the cosine). Ours is SentEval's "all" setting, one
  Spearman over a year's subsets concatenated: MTEB's STS12-16 datasets are those
  concatenations, so the numbers mean the same thing.
- BEIR: MTEB's retrieval task names (``SciFact``, ``TRECCOVID``, ...), split ``test``, keys
  ``ndcg_at_10`` (main), ``recall_at_100``, ``map_at_10``, ``precision_at_10``, ...
- Transfer: MTEB has no SentEval transfer task, so these keep SentEval's names with a
  ``SentEval`` prefix (``SentEvalMR``), split ``test``, key ``accuracy`` (main).

``dataset_revision`` is :func:`data_revision` of the data manifest the scores came from.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from cselab.errors import DataError
from cselab.io import write_json

#: our STS column -> MTEB task name
STS_TASKS = {"STS12": "STS12", "STS13": "STS13", "STS14": "STS14", "STS15": "STS15", "STS16": "STS16",
             "STS-B": "STSBenchmark", "SICK-R": "SICK-R"}
#: our BEIR dataset name -> MTEB task name
BEIR_TASKS = {"trec-covid": "TRECCOVID", "nfcorpus": "NFCorpus", "nq": "NQ", "hotpotqa": "HotpotQA",
              "fiqa": "FiQA2018", "arguana": "ArguAna", "webis-touche2020": "Touche2020",
              "cqadupstack": "CQADupstackRetrieval", "quora": "QuoraRetrieval", "dbpedia-entity": "DBPedia",
              "scidocs": "SCIDOCS", "fever": "FEVER", "climate-fever": "ClimateFEVER", "scifact": "SciFact"}
TRANSFER_PREFIX = "SentEval"
LANGUAGES = ["eng-Latn"]
LOCATION_KEYS = ("source", "root", "archive", "out", "path")  # where the data lies, not what it is


def data_revision(manifest: dict) -> str:
    """sha256 of a data manifest's content (its files' hashes and counts), without the keys
    that say where the data lies on this machine: the same data gives the same revision
    everywhere."""
    content = {k: v for k, v in manifest.items() if k not in LOCATION_KEYS}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def mteb_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mteb")
    except PackageNotFoundError as e:
        raise DataError("MTEB result files record the mteb version: pip install mteb "
                        "(it is in the test extra and envs/evaluate.yaml)") from e


def task_result(task: str, scores: dict, main: str, revision: str, seconds: float | None) -> dict:
    """One MTEB ``TaskResult`` document: ``scores`` (fractions) on split ``test``, subset
    ``default``, main score ``scores[main]``."""
    entry = {**scores, "main_score": scores[main], "hf_subset": "default", "languages": LANGUAGES}
    return {"dataset_revision": revision, "task_name": task, "mteb_version": mteb_version(),
            "scores": {"test": [entry]}, "evaluation_time": seconds, "kg_co2_emissions": None}


def sts_results(sts: dict, revision: str) -> list[dict]:
    """The STS evaluation (``sts.json``) as one result per MTEB STS task."""
    seconds = sts.get("wall_seconds")
    out = []
    for column, detail in _by_column(sts).items():
        sp, pe = detail["spearman_all"] / 100, detail["pearson_all"] / 100
        scores = {"cosine_spearman": sp, "cosine_pearson": pe, "spearman": sp, "pearson": pe}
        out.append(task_result(STS_TASKS[column], scores, "cosine_spearman", revision, seconds))
    return out


def _by_column(sts: dict) -> dict:
    from cselab.evaluation.sts import COLUMN_NAMES

    return {COLUMN_NAMES[task]: detail for task, detail in sts["tasks"].items()}


def transfer_results(transfer: dict, revision: str) -> list[dict]:
    """The transfer evaluation (``transfer.json``): accuracy per SentEval task."""
    seconds = transfer.get("wall_seconds")
    return [task_result(TRANSFER_PREFIX + task, {"accuracy": acc / 100}, "accuracy", revision, seconds)
            for task, acc in transfer["scores"].items()]


def beir_result(beir: dict, revision: str) -> dict:
    """One BEIR dataset's retrieval result (``beir/<dataset>.json``) under MTEB's name and keys
    (``ndcg@10`` -> ``ndcg_at_10``)."""
    name = beir["dataset"]
    scores = {metric.replace("@", "_at_"): value for metric, value in beir["metrics"].items()}
    return task_result(BEIR_TASKS.get(name, name), scores, "ndcg_at_10", revision, beir.get("wall_seconds"))


def write_mteb_results(out_dir: Path, experiment: str, revision: str,
                       evaluations: list[tuple[str, dict, dict]]) -> list[list[Path]]:
    """Write every result of one experiment into ``out_dir``. ``evaluations``: (kind --
    ``sts``, ``transfer`` or ``beir`` --, its result as read from its JSON, the data manifest it
    was computed on); ``revision``: the checkpoint's fingerprint (the model revision). Returns
    the files written for each evaluation, in order."""
    out_dir = Path(out_dir)
    written = []
    for kind, result, manifest in evaluations:
        data_rev = data_revision(manifest)
        documents = (sts_results(result, data_rev) if kind == "sts" else
                     transfer_results(result, data_rev) if kind == "transfer" else [beir_result(result, data_rev)])
        written.append([out_dir / f"{doc['task_name']}.json" for doc in documents])
        for path, doc in zip(written[-1], documents):
            write_json(path, doc)
    write_json(out_dir / "model_meta.json", model_meta(experiment, revision))
    return written


def model_meta(experiment: str, revision: str) -> dict:
    """``model_meta.json``: what MTEB's result cache reads a folder's model and revision from."""
    return {"name": f"cselab/{experiment}", "revision": revision, "languages": LANGUAGES,
            "similarity_fn_name": "cosine", "framework": ["Sentence Transformers", "PyTorch"],
            "open_weights": True, "reference": None, "release_date": None}


def read_main_scores(out_dir: Path) -> dict[str, float]:
    """Read the folder back with MTEB's own loader (``mteb.TaskResult.from_disk``): task ->
    main score on ``test``."""
    from mteb import TaskResult

    return {res.task_name: res.scores["test"][0]["main_score"]
            for res in (TaskResult.from_disk(p) for p in sorted(Path(out_dir).glob("*.json"))
                        if p.name != "model_meta.json")}
