"""Statistics for result tables: seed summaries and a paired bootstrap over evaluation pairs.

The bootstrap answers "is method A better than baseline B on these test sets, given our seeds?".
Each model's score is the mean over its seeds of the task-averaged Spearman x100 (the number in
the tables); the evaluation pairs are resampled with replacement within each task, with the same
resample for A, B and every seed, and the score difference is recomputed per resample.

A resample is represented by its counts (how often each original pair was drawn), so no
resampled array is ever sorted: the average rank of a value in the resample is "number of drawn
values below it + (number of drawn values equal to it + 1) / 2", computed from counts along the
array's sort order (one ``argsort`` per array, not per resample); Spearman of the resample is then
the count-weighted Pearson of these ranks over the original pairs. This equals
``scipy.stats.spearmanr`` on the explicitly resampled arrays, ties included.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from scipy.stats import pearsonr, spearmanr

#: Cells (pairs x resamples) per block of resamples: bounds memory to a few 8 MB arrays.
_BLOCK_CELLS = 1_000_000


def seed_summary(values: Sequence[float]) -> dict:
    """``{"mean", "std", "n"}`` of per-seed values; ``std`` is the sample std (ddof=1), None for n=1."""
    v = np.asarray(list(values), dtype=np.float64)
    if v.size == 0:
        raise ValueError("seed_summary needs at least one value")
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else None, "n": int(v.size)}


def pearson_rows(x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Row-wise Pearson correlation of 2-D ``x`` and ``y`` (same shape), optionally weighted per cell.

    Weighted by integer counts, this is the Pearson of the rows with each value repeated ``count``
    times. Rows with zero variance give NaN.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    w = np.ones_like(x) if weights is None else np.asarray(weights, dtype=np.float64)
    total = w.sum(axis=1, keepdims=True)
    dx = x - (w * x).sum(axis=1, keepdims=True) / total
    dy = y - (w * y).sum(axis=1, keepdims=True) / total
    with np.errstate(invalid="ignore", divide="ignore"):
        return (w * dx * dy).sum(axis=1) / np.sqrt((w * dx * dx).sum(axis=1) * (w * dy * dy).sum(axis=1))


class _Ranker:
    """Ranks (rankdata "average" method) of ``values`` inside resamples given by counts.

    Internal layout: ``counts`` is (pairs x resamples), so the cumulative sums run down
    contiguous rows (about twice as fast as along the last axis).
    """

    def __init__(self, values: np.ndarray) -> None:
        self.n = len(values)
        self.order = np.argsort(values, kind="stable")
        ordered = values[self.order]
        new_group = np.r_[True, ordered[1:] != ordered[:-1]]
        self.starts = np.flatnonzero(new_group)  # first sorted position of each tie group
        self.ties = len(self.starts) < self.n
        self.group = np.empty(self.n, dtype=np.intp)
        self.group[self.order] = np.cumsum(new_group) - 1  # tie group of each original pair

    def centered(self, counts: np.ndarray) -> np.ndarray:
        """(pairs x resamples) integer counts -> 2 * rank - (n + 1) of each original pair in each
        resample (the count-weighted mean of the ranks is always (n + 1) / 2)."""
        per_group = counts[self.order]
        if self.ties:
            per_group = np.add.reduceat(per_group, self.starts, axis=0)
        # rank = (drawn below) + (drawn equal + 1) / 2 = cumsum - (per_group - 1) / 2
        twice = 2 * np.cumsum(per_group, axis=0) - per_group - self.n
        return twice[self.group].astype(np.float64)


def spearman_counts(x: np.ndarray, y: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Spearman of ``(np.repeat(x, c), np.repeat(y, c))`` for each row ``c`` of ``counts``
    (resamples x pairs), without materialising the repeated arrays."""
    c = np.atleast_2d(np.asarray(counts, dtype=np.int64)).T
    return pearson_rows(_Ranker(np.asarray(x)).centered(c).T, _Ranker(np.asarray(y)).centered(c).T, c.T)


def _check(gold: dict, preds: list[dict], name: str) -> None:
    """Every seed has every task, with one finite prediction per gold score."""
    if not preds:
        raise ValueError(f"{name}: no seeds (empty list of predictions)")
    for i, p in enumerate(preds):
        if set(p) != set(gold):
            raise ValueError(f"{name}[{i}] has tasks {sorted(p)}, gold has {sorted(gold)}")
        for t, g in gold.items():
            if np.shape(p[t]) != np.shape(g):
                raise ValueError(f"{name}[{i}][{t!r}] has shape {np.shape(p[t])}, gold has {np.shape(g)}")
            if not np.isfinite(p[t]).all() or np.ptp(p[t]) == 0:
                raise ValueError(f"{name}[{i}][{t!r}] has non-finite or constant predictions "
                                 "(correlation undefined)")


def _centered(values: np.ndarray, metric: str):
    """(pairs x resamples) counts -> the values the correlation is computed on (ranks for
    Spearman), minus their count-weighted mean in each resample."""
    if metric == "spearman":
        return _Ranker(values).centered

    def center(counts: np.ndarray) -> np.ndarray:
        return values[:, None] - values @ counts / counts.sum(axis=0)
    return center


def paired_bootstrap(gold: dict[str, np.ndarray], pred_a: list[dict[str, np.ndarray]],
                     pred_b: list[dict[str, np.ndarray]], n_boot: int = 1000, seed: int = 0,
                     confidence: float = 0.95, metric: str = "spearman", average: bool = True) -> dict:
    """Paired bootstrap of score(A) - score(B) over evaluation pairs.

    ``gold``: task -> gold scores; ``pred_a`` / ``pred_b``: one dict task -> predicted similarity
    per seed (seed lists may differ in length and are not paired with each other). score(model) =
    mean over its seeds of the mean over tasks of ``metric`` ("spearman" or "pearson") x100
    (``average=False`` requires a single task). Each resample draws every task's pairs with
    replacement, the same draw for A, B and all seeds.

    Returns ``diff`` (on the original data), the percentile CI ``ci_low`` / ``ci_high`` at
    ``confidence``, ``p_value``, ``n_boot`` (resamples used: one whose correlation is undefined,
    e.g. constant predictions in a tiny task, is dropped), ``confidence`` and ``significant`` (the
    CI excludes 0). ``p_value`` is the percentile-bootstrap approximation: twice the fraction of
    resampled differences on the other side of 0 from ``diff`` (0 counted as the other side),
    capped at 1; 0 means below 1 / n_boot. Deterministic for a given ``seed``.
    """
    if metric == "accuracy":
        return _paired_bootstrap_accuracy(gold, pred_a, pred_b, n_boot, seed, confidence, average)
    if metric not in ("spearman", "pearson"):
        raise ValueError(f"metric must be 'spearman', 'pearson' or 'accuracy', not {metric!r}")
    if not gold:
        raise ValueError("gold has no tasks")
    if not average and len(gold) != 1:
        raise ValueError(f"average=False scores a single task, got {len(gold)}: {sorted(gold)}")
    if n_boot < 1 or not 0 < confidence < 1:
        raise ValueError("need n_boot >= 1 and 0 < confidence < 1")
    for t, g in gold.items():
        if np.ndim(g) != 1 or len(g) < 3 or not np.isfinite(g).all() or np.ptp(g) == 0:
            raise ValueError(f"gold[{t!r}] must be a 1-D array of at least 3 finite, not all equal scores")
    _check(gold, pred_a, "pred_a")
    _check(gold, pred_b, "pred_b")
    gold = {t: np.asarray(g, dtype=np.float64) for t, g in gold.items()}
    models = [[{t: np.asarray(p[t], dtype=np.float64) for t in gold} for p in preds] for preds in (pred_a, pred_b)]
    corr = spearmanr if metric == "spearman" else pearsonr
    score_a, score_b = (100 * np.mean([np.mean([corr(p[t], g)[0] for t, g in gold.items()]) for p in preds])
                        for preds in models)

    rng = np.random.default_rng(seed)
    sums = np.zeros((2, n_boot))  # per model: sum over (seed, task) of the resampled correlation
    for t, g in gold.items():
        n = len(g)
        gold_centered = _centered(g, metric)
        pred_centered = [[_centered(p[t], metric) for p in preds] for preds in models]
        block = max(1, _BLOCK_CELLS // n)
        for lo in range(0, n_boot, block):
            m = min(n_boot, lo + block) - lo
            idx = rng.integers(0, n, size=(m, n))  # row r: the pairs drawn in resample lo + r
            counts = np.bincount((idx + n * np.arange(m)[:, None]).ravel(), minlength=m * n)
            counts = np.ascontiguousarray(counts.reshape(m, n).T)  # (pairs x resamples)
            dg = gold_centered(counts)
            cdg = counts * dg
            sgg = np.einsum("ij,ij->j", cdg, dg)
            for k, fns in enumerate(pred_centered):
                for fn in fns:
                    dx = fn(counts)
                    with np.errstate(invalid="ignore", divide="ignore"):
                        r = np.einsum("ij,ij->j", cdg, dx) / np.sqrt(np.einsum("ij,ij,ij->j", counts, dx, dx) * sgg)
                    sums[k, lo:lo + m] += r
    boot_a, boot_b = (100 * sums[k] / (len(models[k]) * len(gold)) for k in (0, 1))
    return _summary(float(score_a - score_b), boot_a - boot_b, confidence)


def _paired_bootstrap_accuracy(gold, pred_a, pred_b, n_boot, seed, confidence, average) -> dict:
    """:func:`paired_bootstrap` for classification: ``gold`` and predictions are labels, a
    model's score is its accuracy x100 (averaged over tasks and seeds), items are resampled
    within each task."""
    if not gold or (not average and len(gold) != 1):
        raise ValueError(f"need one task, or average=True; got {sorted(gold)}")
    if n_boot < 1 or not 0 < confidence < 1:
        raise ValueError("need n_boot >= 1 and 0 < confidence < 1")
    correct = []
    for preds, name in ((pred_a, "pred_a"), (pred_b, "pred_b")):
        if not preds:
            raise ValueError(f"{name}: no seeds (empty list of predictions)")
        for i, p in enumerate(preds):
            if set(p) != set(gold) or any(np.shape(p[t]) != np.shape(g) for t, g in gold.items()):
                raise ValueError(f"{name}[{i}] does not match gold's tasks and sizes")
        correct.append({t: np.mean([np.asarray(p[t]) == np.asarray(g) for p in preds], axis=0)
                        for t, g in gold.items()})
    rng = np.random.default_rng(seed)
    diffs = {t: correct[0][t] - correct[1][t] for t in gold}  # per item: mean over seeds of A minus B
    boot = np.zeros(n_boot)
    for t, d in diffs.items():
        n = len(d)
        block = max(1, _BLOCK_CELLS // n)
        for lo in range(0, n_boot, block):
            m = min(n_boot, lo + block) - lo
            idx = rng.integers(0, n, size=(m, n))
            boot[lo:lo + m] += d[idx].mean(axis=1)
    boot = 100 * boot / len(diffs)
    diff = 100 * float(np.mean([d.mean() for d in diffs.values()]))
    return _summary(diff, boot, confidence)


def _summary(diff: float, boot: np.ndarray, confidence: float) -> dict:
    boot = boot[np.isfinite(boot)]
    if boot.size == 0:
        raise ValueError("every bootstrap resample had an undefined correlation (constant values)")
    alpha = (1 - confidence) / 2
    ci_low, ci_high = (float(q) for q in np.quantile(boot, [alpha, 1 - alpha]))
    if diff > 0:
        p_value = 2 * float(np.mean(boot <= 0))
    elif diff < 0:
        p_value = 2 * float(np.mean(boot >= 0))
    else:
        p_value = 1.0
    return {"diff": diff, "ci_low": ci_low, "ci_high": ci_high, "p_value": min(1.0, p_value),
            "n_boot": int(boot.size), "confidence": confidence, "significant": ci_low > 0 or ci_high < 0}


def save_pairs(path: str | Path, pairs: dict[str, tuple]) -> None:
    """Per-item gold and predictions (``<column>.gold`` / ``<column>.pred``), the bootstrap's input."""
    from cselab.io import open_atomic

    arrays = {f"{col}.{k}": np.asarray(v) for col, (gold, pred) in pairs.items()
              for k, v in (("gold", gold), ("pred", pred))}
    with open_atomic(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)


def load_pairs(path: str | Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    with np.load(path) as z:
        cols = dict.fromkeys(k.rsplit(".", 1)[0] for k in z.files)
        return {c: (z[f"{c}.gold"], z[f"{c}.pred"]) for c in cols}
