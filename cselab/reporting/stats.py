"""Statistics for result tables: seed summaries and a paired bootstrap over evaluation items
and seeds.

The bootstrap answers "is method A better than baseline B, counting both the test sets and the
training randomness?". Each model's score is the mean over its seeds of the task-averaged
Spearman x100 (the number in the tables); the evaluation pairs are resampled with replacement
within each task, with the same resample for A, B and every seed, and the score difference is
recomputed per resample; with >= 2 seeds per model the seeds are resampled inside each item
resample too (a two-level bootstrap, :func:`paired_bootstrap`).

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
from scipy.stats import t as student_t

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
                     confidence: float = 0.95, metric: str = "spearman", average: bool = True,
                     paired_seeds: bool = False) -> dict:
    """Paired bootstrap of score(A) - score(B) over evaluation items and, with >= 2 seeds per
    model, over seeds too.

    ``gold``: task -> gold scores (or labels for ``metric="accuracy"``); ``pred_a`` / ``pred_b``:
    one dict task -> predicted similarity (or label) per seed. score(model) = mean over its seeds
    of the mean over tasks of ``metric`` ("spearman", "pearson", "accuracy") x100
    (``average=False`` requires a single task). Each resample draws every task's items with
    replacement, the same draw for A, B and all seeds. ``paired_seeds``: seed i of A and seed i of
    B share their seed (the same data order), so seeds are resampled as pairs.

    With one seed for either model the interval counts the evaluation items only: the percentile
    interval of the item resamples (``interval: "items"``). With >= 2 seeds each, it counts
    training randomness as well (``interval: "seeds+items"``, :func:`_two_level`): each item
    resample also draws the seeds with replacement (the same draw for both models when paired);
    the interval is ``diff +- t * se``, with ``se`` the standard deviation of these two-level
    resamples and ``t`` Student's quantile at Satterthwaite's degrees of freedom (the small-sample
    correction: a percentile interval over 3 seeds under-covers). ``item_ci_low`` /
    ``item_ci_high`` keep the item-only interval.

    Returns ``diff``, ``ci_low`` / ``ci_high`` at ``confidence``, ``p_value`` (items: twice the
    share of resampled differences across 0, capped at 1, 0 meaning below 1 / n_boot; seeds+items:
    Student's two-sided p at ``diff / se``), ``significant`` (the interval excludes 0),
    ``n_boot`` (resamples with a defined correlation), ``confidence`` and ``interval``.
    Deterministic for a given ``seed``.
    """
    if metric not in ("spearman", "pearson", "accuracy"):
        raise ValueError(f"metric must be 'spearman', 'pearson' or 'accuracy', not {metric!r}")
    if not gold or (not average and len(gold) != 1):
        raise ValueError(f"average=False scores a single task, got {len(gold)}: {sorted(gold)}")
    if n_boot < 1 or not 0 < confidence < 1:
        raise ValueError("need n_boot >= 1 and 0 < confidence < 1")
    rng = np.random.default_rng(seed)
    if metric == "accuracy":
        observed, boot = _accuracy_resamples(gold, pred_a, pred_b, n_boot, rng)
    else:
        observed, boot = _correlation_resamples(gold, pred_a, pred_b, n_boot, rng, metric)
    if paired_seeds and len(observed[0]) != len(observed[1]):
        raise ValueError(f"paired seeds need as many seeds for A as for B, got {len(observed[0])} and "
                         f"{len(observed[1])}")
    return _interval(observed, boot, confidence, paired_seeds, rng)


def score_resamples(gold: dict[str, np.ndarray], pred_a: list[dict], pred_b: list[dict], n_boot: int = 1000,
                    seed: int = 0, metric: str = "spearman") -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each model's per-seed scores ``(seeds,)`` and their item resamples ``(seeds, n_boot)``,
    the same item draws for both models and every seed (what :func:`paired_bootstrap` builds its
    intervals from; the seed planner's variance components, :mod:`cselab.reporting.power`)."""
    rng = np.random.default_rng(seed)
    if metric == "accuracy":
        return _accuracy_resamples(gold, pred_a, pred_b, n_boot, rng)
    return _correlation_resamples(gold, pred_a, pred_b, n_boot, rng, metric)


def _correlation_resamples(gold, pred_a, pred_b, n_boot, rng, metric):
    """Per model: each seed's score (mean over tasks of the correlation x100) and its item
    resamples, ``(seeds,)`` and ``(seeds, n_boot)``."""
    for t, g in gold.items():
        if np.ndim(g) != 1 or len(g) < 3 or not np.isfinite(g).all() or np.ptp(g) == 0:
            raise ValueError(f"gold[{t!r}] must be a 1-D array of at least 3 finite, not all equal scores")
    _check(gold, pred_a, "pred_a")
    _check(gold, pred_b, "pred_b")
    gold = {t: np.asarray(g, dtype=np.float64) for t, g in gold.items()}
    models = [[{t: np.asarray(p[t], dtype=np.float64) for t in gold} for p in preds] for preds in (pred_a, pred_b)]
    corr = spearmanr if metric == "spearman" else pearsonr
    observed = [np.array([100 * np.mean([corr(p[t], g)[0] for t, g in gold.items()]) for p in preds])
                for preds in models]
    sums = [np.zeros((len(preds), n_boot)) for preds in models]  # per model and seed: sum over tasks
    for t, g in gold.items():
        gold_centered = _centered(g, metric)
        pred_centered = [[_centered(p[t], metric) for p in preds] for preds in models]
        for lo, m, counts in _item_draws(rng, len(g), n_boot):
            dg = gold_centered(counts)
            cdg = counts * dg
            sgg = np.einsum("ij,ij->j", cdg, dg)
            for k, fns in enumerate(pred_centered):
                for s, fn in enumerate(fns):
                    dx = fn(counts)
                    with np.errstate(invalid="ignore", divide="ignore"):
                        r = np.einsum("ij,ij->j", cdg, dx) / np.sqrt(np.einsum("ij,ij,ij->j", counts, dx, dx) * sgg)
                    sums[k][s, lo:lo + m] += r
    return observed, [100 * x / len(gold) for x in sums]


def _item_draws(rng, n: int, n_boot: int):
    """Blocks of item resamples of one task: ``(first resample, count, (items x resamples) counts)``."""
    block = max(1, _BLOCK_CELLS // n)
    for lo in range(0, n_boot, block):
        m = min(n_boot, lo + block) - lo
        idx = rng.integers(0, n, size=(m, n))  # row r: the items drawn in resample lo + r
        counts = np.bincount((idx + n * np.arange(m)[:, None]).ravel(), minlength=m * n)
        yield lo, m, np.ascontiguousarray(counts.reshape(m, n).T)


def _accuracy_resamples(gold, pred_a, pred_b, n_boot, rng):
    """:func:`_correlation_resamples` for classification: accuracy x100 per seed, items
    resampled within each task."""
    correct = []
    for preds, name in ((pred_a, "pred_a"), (pred_b, "pred_b")):
        if not preds:
            raise ValueError(f"{name}: no seeds (empty list of predictions)")
        for i, p in enumerate(preds):
            if set(p) != set(gold) or any(np.shape(p[t]) != np.shape(g) for t, g in gold.items()):
                raise ValueError(f"{name}[{i}] does not match gold's tasks and sizes")
        correct.append([{t: (np.asarray(p[t]) == np.asarray(g)).astype(np.float64) for t, g in gold.items()}
                        for p in preds])
    observed = [np.array([100 * np.mean([c[t].mean() for t in gold]) for c in seeds]) for seeds in correct]
    sums = [np.zeros((len(seeds), n_boot)) for seeds in correct]
    for t, g in gold.items():
        for lo, m, counts in _item_draws(rng, len(g), n_boot):
            for k, seeds in enumerate(correct):
                for s, c in enumerate(seeds):
                    sums[k][s, lo:lo + m] += c[t] @ counts / len(g)
    return observed, [100 * x / len(gold) for x in sums]


def _interval(observed: list[np.ndarray], boot: list[np.ndarray], confidence: float, paired: bool, rng) -> dict:
    """The summary of :func:`paired_bootstrap` from each model's per-seed scores and item resamples."""
    keep = np.isfinite(boot[0]).all(axis=0) & np.isfinite(boot[1]).all(axis=0)
    if not keep.any():
        raise ValueError("every bootstrap resample had an undefined correlation (constant values)")
    boot = [b[:, keep] for b in boot]
    diff = float(observed[0].mean() - observed[1].mean())
    items = _summary(diff, boot[0].mean(axis=0) - boot[1].mean(axis=0), confidence)
    if min(len(observed[0]), len(observed[1])) < 2:
        return {**items, "interval": "items"}
    draws, seed_var, dof = _two_level(observed, boot, paired, rng)
    se = float(np.std(draws, ddof=1))
    # Satterthwaite from the components (the seeds' from the observed scores, the items' from the
    # item resamples), not from se: at 2 degrees of freedom the quantile is too steep for noise
    total = sum(seed_var) + float(np.var(boot[0].mean(axis=0) - boot[1].mean(axis=0), ddof=1))
    nu = total ** 2 / sum(v ** 2 / d for v, d in zip(seed_var, dof)) if any(seed_var) else np.inf
    if se == 0:
        low = high = diff
        p_value = 1.0 if diff == 0 else 0.0
    else:
        half = float(student_t.ppf(0.5 + confidence / 2, nu)) * se
        low, high = diff - half, diff + half
        p_value = float(2 * student_t.sf(abs(diff) / se, nu))
    return {"diff": diff, "ci_low": low, "ci_high": high, "p_value": min(1.0, p_value), "n_boot": int(keep.sum()),
            "confidence": confidence, "significant": low > 0 or high < 0, "interval": "seeds+items",
            "se": se, "dof": float(nu), "item_ci_low": items["ci_low"], "item_ci_high": items["ci_high"]}


def _two_level(observed, boot, paired: bool, rng) -> tuple[np.ndarray, list[float], list[int]]:
    """The two-level resamples of the difference (seeds drawn with replacement inside each item
    resample; a model's seed deviations inflated by sqrt(n / (n - 1)), so their variance is the
    unbiased one), and the seed variance components of the mean difference with their degrees of
    freedom (Satterthwaite's inputs; the item component has infinitely many)."""
    if paired:
        n = len(observed[0])
        return (_seed_resample(boot[0] - boot[1], rng),
                [float(np.var(observed[0] - observed[1], ddof=1)) / n], [n - 1])
    draws = _seed_resample(boot[0], rng) - _seed_resample(boot[1], rng)
    return draws, [float(np.var(o, ddof=1)) / len(o) for o in observed], [len(o) - 1 for o in observed]


def _seed_resample(x: np.ndarray, rng) -> np.ndarray:
    """``(seeds, resamples)`` -> per resample, the mean over a with-replacement draw of seeds."""
    n = x.shape[0]
    centre = x.mean(axis=0)
    inflated = centre + np.sqrt(n / (n - 1)) * (x - centre)
    return np.take_along_axis(inflated, rng.integers(0, n, size=x.shape), axis=0).mean(axis=0)


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
