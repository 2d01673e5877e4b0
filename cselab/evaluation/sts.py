"""The SentEval STS protocol as used by SimCSE (Gao et al., 2021, appendix B) and the papers after it.

``root`` is always the SentEval ``downstream/`` directory (the one holding ``STS/`` and
``SICK/``). Every task is scored the same way: cosine similarity of the two sentence
embeddings, Spearman correlation with the gold scores, x100. For STS12-16 the reported number
is SentEval's "all" setting (one Spearman over the concatenation of a year's subsets); STS-B
and SICK-R are scored unsupervised on their test split (no regressor). Sentences are what
SentEval + SimCSE feed the encoder: the file text re-joined on single spaces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from cselab.data.senteval import STS_TASKS
from cselab.data.tasks import Subset, load_sts_task, stsb_dev
from cselab.errors import ConfigError
from cselab.evaluation.encoding import Embeddings, encode_unique

Encoder = Callable[[list[str]], np.ndarray]

#: Internal name -> column name used in result tables.
COLUMN_NAMES = {
    "STS12": "STS12", "STS13": "STS13", "STS14": "STS14", "STS15": "STS15", "STS16": "STS16",
    "STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R",
}
#: Table columns, in the papers' order.
STS_COLUMNS = list(COLUMN_NAMES.values())


def _unit_rows(embedded: Embeddings, sentences: list[str]) -> np.ndarray:
    rows = embedded(sentences).astype(np.float64)
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


def _cosines(embedded: Embeddings, subset: Subset) -> np.ndarray:
    """Cosine similarity of each pair of ``subset``."""
    return np.einsum("ij,ij->i", _unit_rows(embedded, subset.sent1), _unit_rows(embedded, subset.sent2))


def correlations(pred: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    """(Spearman, Pearson) x100."""
    from scipy.stats import pearsonr, spearmanr  # not with the module: the workflow reads STS_COLUMNS to plan

    return 100 * float(spearmanr(pred, gold)[0]), 100 * float(pearsonr(pred, gold)[0])


def evaluate_sts(encode: Encoder, root: str | Path, tasks: Sequence[str] = STS_TASKS) -> dict:
    """Score ``encode`` on the STS tasks with one ``encode`` call over all unique sentences.

    Per task the reported number is SentEval's "all" Spearman: predictions and gold of all
    subsets concatenated, one Spearman over the concatenation (x100); per-subset Spearman and
    Pearson, their unweighted "mean" and size-weighted "wmean" are kept for the record.
    Returns ``{"tasks": {task: {...}}, "scores": {column: spearman_all}, "avg": mean of the
    scores, "n_sentences": number of unique sentences encoded, "pairs": {column: (gold, pred)}}``;
    ``pairs`` (numpy arrays in the "all" concatenation order) feed the paired bootstrap.
    """
    tasks = list(tasks)
    if not tasks:
        raise ConfigError(f"no STS tasks requested; choose from {STS_TASKS}")
    data = {task: load_sts_task(root, task) for task in tasks}
    embedded = encode_unique(encode, (s for subs in data.values() for sub in subs for s in (*sub.sent1, *sub.sent2)),
                             allow_nan=True)
    out, pairs = {}, {}
    for task, subs in data.items():
        preds = [_cosines(embedded, sub) for sub in subs]
        pairs[COLUMN_NAMES[task]] = (np.concatenate([s.gold for s in subs]), np.concatenate(preds))
        per = {}
        for sub, pred in zip(subs, preds):
            sp, pe = correlations(pred, sub.gold)
            per[sub.name] = {"spearman": sp, "pearson": pe, "n_pairs": len(sub)}
        sp_all, pe_all = correlations(np.concatenate(preds), np.concatenate([s.gold for s in subs]))
        sizes = np.array([len(s) for s in subs], dtype=np.float64)
        sps = np.array([v["spearman"] for v in per.values()])
        out[task] = {
            "spearman_all": sp_all,
            "pearson_all": pe_all,
            "mean_spearman": float(sps.mean()),
            "wmean_spearman": float((sps * sizes).sum() / sizes.sum()),
            "n_pairs": int(sizes.sum()),
            "subsets": per,
        }
    scores = {COLUMN_NAMES[t]: out[t]["spearman_all"] for t in tasks}
    return {"tasks": out, "scores": scores, "avg": float(np.mean(list(scores.values()))),
            "n_sentences": len(embedded), "pairs": pairs}


def predict_subset(encode: Encoder, subset: Subset) -> np.ndarray:
    """Cosine similarity of every pair of ``subset`` (unique sentences encoded once)."""
    return _cosines(encode_unique(encode, [*subset.sent1, *subset.sent2], allow_nan=True), subset)


def spearman_on_subset(encode: Encoder, subset: Subset) -> float:
    """Cosine Spearman x100 on one subset (the STS-B dev metric), encoding its unique
    sentences once."""
    return correlations(predict_subset(encode, subset), subset.gold)[0]


def dev_metrics(encode: Encoder, subset: Subset) -> dict:
    """STS-B dev Spearman x100, alignment and uniformity (CompCSE Figure 2), anisotropy and
    effective rank (the training diagnostics' probe set: the dev sentences) from one encoding
    pass over ``subset``: the training loop's checkpoint-selection metrics."""
    from cselab.evaluation.geometry import align_uniform, anisotropy, effective_rank

    embedded = encode_unique(encode, [*subset.sent1, *subset.sent2], allow_nan=True)
    geometry = align_uniform(embedded, subset)
    return {"stsb_dev_spearman": spearman_on_subset(embedded, subset), "alignment": geometry["alignment"],
            "uniformity": geometry["uniformity"], "anisotropy": anisotropy(embedded.vectors),
            "effective_rank": effective_rank(embedded.vectors)}


def evaluate_stsb_dev(encode: Encoder, root: str | Path) -> dict:
    """STS-B dev Spearman x100 of a finished model (CompCSE Tables 2-6), with per-pair predictions."""
    subset = stsb_dev(root)
    pred = predict_subset(encode, subset)
    gold = np.asarray(subset.gold, dtype=np.float64)
    spearman, pearson = correlations(pred, gold)
    return {"scores": {"STS-B dev": spearman}, "pearson": pearson, "n_pairs": len(gold),
            "pairs": {"STS-B dev": (gold, pred)}}
