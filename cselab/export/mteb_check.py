"""MTEB's evaluator on our checkpoints: an independent implementation of the STS protocol.

``mteb`` (Muennighoff et al., 2023) runs offline on the local SentEval STS files: its own STS
task classes (``STS12`` ... ``SICK-R``) with their data replaced by the pairs this project
scores (:func:`cselab.data.tasks.load_sts_task`; STS12-16 as one concatenation of a year's
subsets, SentEval's "all" setting), no hub. The model is encoded by sentence-transformers (a
``Transformer`` + ``Pooling`` stack with our evaluation's pooler and maximum length), not by our
encoder: tokenisation, pooling, cosine and Spearman are all theirs. Its cosine Spearman must
equal ours (``sts.json``) per task within a tolerance.
"""

from __future__ import annotations

import logging
from pathlib import Path

from cselab.errors import ConfigError
from cselab.settings import Evaluation, evaluation_settings

log = logging.getLogger(__name__)

POOLING = {"cls": "cls", "avg": "mean"}  # our evaluation pooler -> sentence-transformers' Pooling mode


def local_sts_tasks(root: Path, columns: list[str]) -> list:
    """MTEB's STS tasks for our columns (``STS12``, ``STS-B``, ...), their test split read from
    the SentEval tree at ``root`` instead of the hub."""
    import mteb
    from datasets import Dataset, DatasetDict

    from cselab.data.tasks import load_sts_task
    from cselab.evaluation.sts import COLUMN_NAMES
    from cselab.export.mteb_results import STS_TASKS

    ours = {column: task for task, column in COLUMN_NAMES.items()}
    tasks = []
    for column in columns:
        task = mteb.get_task(STS_TASKS[column])
        subsets = load_sts_task(root, ours[column])
        rows = {"sentence1": [s for sub in subsets for s in sub.sent1],
                "sentence2": [s for sub in subsets for s in sub.sent2],
                "score": [float(g) for sub in subsets for g in sub.gold]}
        task.dataset = DatasetDict({"test": Dataset.from_dict(rows)})
        task.data_loaded = True
        tasks.append(task)
    return tasks


def sentence_transformer(model_dir: Path, pooler: str, max_len: int):
    """The checkpoint as a sentence-transformers model with our evaluation's pooler."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Pooling, Transformer

    if pooler not in POOLING:
        raise ConfigError(f"evaluation.pooler {pooler!r} has no sentence-transformers pooling; choose from {sorted(POOLING)}")
    transformer = Transformer(str(model_dir), max_seq_length=max_len)
    pooling = Pooling(transformer.get_word_embedding_dimension(), pooling_mode=POOLING[pooler])
    return SentenceTransformer(modules=[transformer, pooling], device="cpu")


def mteb_sts_scores(model_dir: Path, root: Path, pooler: str, max_len: int, columns: list[str]) -> dict[str, float]:
    """MTEB's cosine Spearman (x100, as our tables) of the checkpoint per STS column."""
    import mteb

    from cselab.export.mteb_results import STS_TASKS

    tasks = local_sts_tasks(root, columns)
    model = sentence_transformer(model_dir, pooler, max_len)
    result = mteb.evaluate(model, tasks=tasks, cache=None, show_progress_bar=False, overwrite_strategy="always")
    by_task = {r.task_name: r.scores["test"][0]["cosine_spearman"] for r in result.task_results}
    return {column: 100 * by_task[STS_TASKS[column]] for column in columns}


def compare(experiment: str, ours: dict[str, float], theirs: dict[str, float], tolerance: float) -> list[dict]:
    """One row per task: our score, MTEB's, their difference and whether it is within ``tolerance``."""
    rows = []
    for column, score in ours.items():
        diff = theirs[column] - score
        rows.append({"experiment": experiment, "task": column, "cselab": score, "mteb": theirs[column],
                     "diff": diff, "tolerance": tolerance, "agree": abs(diff) <= tolerance})
    return rows


def check_experiment(experiment: str, model_dir: Path, sts: dict, root: Path, settings: dict | Evaluation,
                     tolerance: float) -> list[dict]:
    """MTEB's evaluator vs our ``sts.json`` for one checkpoint; ``settings``: the encoder settings."""
    settings = settings if isinstance(settings, Evaluation) else evaluation_settings(settings)
    ours = dict(sts["scores"])
    theirs = mteb_sts_scores(model_dir, root, settings.pooler, settings.max_len, list(ours))
    rows = compare(experiment, ours, theirs, tolerance)
    worst = max(abs(r["diff"]) for r in rows)
    log.info("%s: MTEB vs cselab, largest |diff| %.5f over %d tasks", experiment, worst, len(rows))
    return rows


def write_check(rows: list[dict], csv_path: Path, md_path: Path) -> None:
    """``results/mteb_check.csv`` and its Markdown twin, with a note on the verdict."""
    import pandas as pd

    from cselab.export.mteb_results import mteb_version
    from cselab.io import markdown_table, write_text

    df = pd.DataFrame(rows)
    write_text(csv_path, df.to_csv(index=False, float_format="%.6f"))
    bad = df[~df["agree"]]
    verdict = ("every task agrees" if bad.empty else
               f"{len(bad)} task(s) differ by more than the tolerance: " +
               ", ".join(f"{r.experiment}/{r.task} ({r.diff:+.4f})" for r in bad.itertuples()))
    note = (f"\n\nMTEB {mteb_version()} (its STS task classes on the local SentEval files, the model encoded by "
            f"sentence-transformers) against cselab's STS evaluation: cosine Spearman x100, tolerance "
            f"{df['tolerance'].iloc[0]}. Largest |diff| {df['diff'].abs().max():.6f}; {verdict}.\n")
    table = markdown_table(["experiment", "task", "cselab", "MTEB", "diff", "agree"],
                           [[r.experiment, r.task, f"{r.cselab:.4f}", f"{r.mteb:.4f}", f"{r.diff:+.6f}",
                             "yes" if r.agree else "NO"] for r in df.itertuples()])
    write_text(md_path, "# MTEB's evaluator vs cselab's on the local SentEval STS files\n\n" + table + note)

