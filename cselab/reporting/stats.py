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

A table compares several methods with one baseline on the same resamples
(:func:`paired_bootstraps`): the item draws, the gold's resampled ranks and the baseline's
resampled scores are computed once per task and shared by every comparison. For Spearman the
per-seed work is one pass in the prediction's sort order (:class:`_SpearmanBlock`): with
``w = count * centered gold rank`` and ``C`` the cumulative counts in that order,
``sum(count * gold rank * pred rank) = 2 * sum(w * C) - sum(w * count)`` (per tie group), and the
sum of squared centered prediction ranks is ``(n^3 - sum(group count^3)) / 3``. Every term is an
integer below 2^53 (n^3 bounds them), so the result is bit-for-bit the count-weighted Pearson above
whatever the order of summation.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy.stats import pearsonr, spearmanr
from scipy.stats import t as student_t

#: Cells (pairs x resamples) per block of resamples: bounds memory to a few 8 MB arrays.
_BLOCK_CELLS = 1_000_000
#: Spearman's integer route (:class:`_SpearmanBlock`) is exact while n^3 stays below 2^53.
_EXACT_PAIRS = 208_063
#: Bits of a packed (weight, count) cell that hold the count (counts <= n < 2^20, see _EXACT_PAIRS).
_COUNT_BITS = 20


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

    def centered_rows(self, counts: np.ndarray) -> np.ndarray:
        """:meth:`centered` for (resamples x pairs) counts, in that layout, as int64."""
        per_group = np.take(counts, self.order, axis=1)
        if self.ties:
            per_group = np.add.reduceat(per_group, self.starts, axis=1)
        twice = 2 * np.cumsum(per_group, axis=1) - per_group - self.n
        return np.take(twice, self.group, axis=1)

    def in_order(self, rows: np.ndarray) -> np.ndarray:
        """(resamples x pairs) -> the same in this array's sort order, tie groups summed
        (resamples x groups)."""
        ordered = np.take(rows, self.order, axis=1)
        return np.add.reduceat(ordered, self.starts, axis=1) if self.ties else ordered


class _SpearmanBlock:
    """One block of a task's item resamples for Spearman: the counts (resamples x pairs) and the
    gold's resampled statistics, computed once and shared by every model and seed scored on them
    (module docstring: the integer route, equal to :meth:`_GenericBlock.correlations`)."""

    def __init__(self, counts: np.ndarray, gold: _Ranker) -> None:
        self.n = counts.shape[1]
        dg = gold.centered_rows(counts)
        weighted = counts * dg  # count * centered gold rank: sums to 0 in every resample
        self.sgg = np.einsum("ij,ij->i", weighted, dg).astype(np.float64)
        self.cross = np.einsum("ij,ij->i", weighted, counts)  # sum(w * count) without prediction ties
        self.sxx = self._squares(counts)
        # weight * 2^20 + count in one int64 (|weight| <= n^2): one gather per prediction, not two;
        # sums over tie groups stay unpackable (their counts too are <= n)
        self.packed = (weighted << _COUNT_BITS) | counts

    def _squares(self, group_counts: np.ndarray) -> np.ndarray:
        """Sum of squared centered (doubled) ranks per resample: (n^3 - sum(t^3)) / 3 over tie groups."""
        return (self.n ** 3 - np.einsum("ij,ij,ij->i", group_counts, group_counts, group_counts)) // 3

    def correlations(self, pred: _Ranker) -> np.ndarray:
        """Spearman of ``pred``'s values with gold in each resample of the block."""
        packed = pred.in_order(self.packed)
        counts, weighted = packed & ((1 << _COUNT_BITS) - 1), packed >> _COUNT_BITS
        if pred.ties:
            cross, sxx = np.einsum("ij,ij->i", weighted, counts), self._squares(counts)
        else:
            cross, sxx = self.cross, self.sxx
        sxy = 2 * np.einsum("ij,ij->i", weighted, np.cumsum(counts, axis=1)) - cross
        with np.errstate(invalid="ignore", divide="ignore"):
            return sxy / np.sqrt(sxx * self.sgg)


class _GenericBlock:
    """:class:`_SpearmanBlock` for any correlation (and for Spearman beyond :data:`_EXACT_PAIRS`):
    the gold's centered values per resample, shared; each prediction centered per resample."""

    def __init__(self, counts: np.ndarray, gold) -> None:
        self.counts = np.ascontiguousarray(counts.T)  # pairs x resamples
        dg = gold(self.counts)
        self.cdg = self.counts * dg
        self.sgg = np.einsum("ij,ij->j", self.cdg, dg)

    def correlations(self, pred) -> np.ndarray:
        """The correlation of ``pred`` (:func:`_centered`) with gold in each resample of the block."""
        dx = pred(self.counts)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (np.einsum("ij,ij->j", self.cdg, dx)
                    / np.sqrt(np.einsum("ij,ij,ij->j", self.counts, dx, dx) * self.sgg))


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
    return paired_bootstraps(gold, [pred_a], pred_b, n_boot, seed, confidence, metric, average, paired_seeds)[0]


def paired_bootstraps(gold: dict[str, np.ndarray], preds: Sequence[list[dict[str, np.ndarray]]],
                      pred_b: list[dict[str, np.ndarray]], n_boot: int = 1000, seed: int = 0,
                      confidence: float = 0.95, metric: str = "spearman", average: bool = True,
                      paired_seeds: bool | Sequence[bool] = False) -> list[dict]:
    """:func:`paired_bootstrap` of each model of ``preds`` against the one baseline ``pred_b``
    (``paired_seeds``: one flag for all, or one per model), equal to calling it per model: the
    item draws, the gold's resampled statistics and the baseline's item resamples are computed
    once and shared; each comparison's seed draws start from the generator's state after the
    item draws, as a lone call's do."""
    if metric not in ("spearman", "pearson", "accuracy"):
        raise ValueError(f"metric must be 'spearman', 'pearson' or 'accuracy', not {metric!r}")
    if not gold or (not average and len(gold) != 1):
        raise ValueError(f"average=False scores a single task, got {len(gold)}: {sorted(gold)}")
    if n_boot < 1 or not 0 < confidence < 1:
        raise ValueError("need n_boot >= 1 and 0 < confidence < 1")
    paired = list(paired_seeds) if isinstance(paired_seeds, (list, tuple)) else [paired_seeds] * len(preds)
    if len(paired) != len(preds):
        raise ValueError(f"paired_seeds has {len(paired)} flags for {len(preds)} models")
    rng = np.random.default_rng(seed)
    observed, boot = _resamples(gold, [*preds, pred_b], n_boot, rng, metric)
    results = []
    for k, pair in enumerate(paired):
        if pair and len(observed[k]) != len(observed[-1]):
            raise ValueError(f"paired seeds need as many seeds for A as for B, got {len(observed[k])} and "
                             f"{len(observed[-1])}")
        results.append(_interval([observed[k], observed[-1]], [boot[k], boot[-1]], confidence, pair,
                                 copy.deepcopy(rng)))
    return results


def score_resamples(gold: dict[str, np.ndarray], pred_a: list[dict], pred_b: list[dict], n_boot: int = 1000,
                    seed: int = 0, metric: str = "spearman") -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each model's per-seed scores ``(seeds,)`` and their item resamples ``(seeds, n_boot)``,
    the same item draws for both models and every seed (what :func:`paired_bootstrap` builds its
    intervals from; the seed planner's variance components, :mod:`cselab.reporting.power`)."""
    return _resamples(gold, [pred_a, pred_b], n_boot, np.random.default_rng(seed), metric)


def _resamples(gold, models: list[list[dict]], n_boot: int, rng, metric: str):
    """Per model (a list of seeds, each task -> predictions): each seed's score and its item
    resamples, ``(seeds,)`` and ``(seeds, n_boot)``, on one set of item draws from ``rng``. The
    last model is the baseline, named ``pred_b`` in errors; the others ``pred_a``."""
    names = ["pred_a"] * (len(models) - 1) + ["pred_b"]
    if metric == "accuracy":
        return _accuracy_resamples(gold, models, names, n_boot, rng)
    return _correlation_resamples(gold, models, names, n_boot, rng, metric)


def _correlation_resamples(gold, models, names, n_boot, rng, metric):
    """Per model: each seed's score (mean over tasks of the correlation x100) and its item
    resamples, ``(seeds,)`` and ``(seeds, n_boot)``; each task's draws and gold statistics are
    computed once per block of resamples (:class:`_SpearmanBlock`, :class:`_GenericBlock`) and
    every model's seeds scored on them."""
    for t, g in gold.items():
        if np.ndim(g) != 1 or len(g) < 3 or not np.isfinite(g).all() or np.ptp(g) == 0:
            raise ValueError(f"gold[{t!r}] must be a 1-D array of at least 3 finite, not all equal scores")
    for preds, name in zip(models, names):
        _check(gold, preds, name)
    gold = {t: np.asarray(g, dtype=np.float64) for t, g in gold.items()}
    models = [[{t: np.asarray(p[t], dtype=np.float64) for t in gold} for p in preds] for preds in models]
    corr = spearmanr if metric == "spearman" else pearsonr
    observed = [np.array([100 * np.mean([corr(p[t], g)[0] for t, g in gold.items()]) for p in preds])
                for preds in models]
    sums = [np.zeros((len(preds), n_boot)) for preds in models]  # per model and seed: sum over tasks
    for t, g in gold.items():
        exact = metric == "spearman" and len(g) <= _EXACT_PAIRS
        prepare = _Ranker if exact else (lambda values: _centered(values, metric))
        gold_prepared = prepare(g)
        prepared = [[prepare(p[t]) for p in preds] for preds in models]
        for lo, m, counts in _item_draws(rng, len(g), n_boot):
            block = _SpearmanBlock(counts, gold_prepared) if exact else _GenericBlock(counts, gold_prepared)
            for k, seeds in enumerate(prepared):
                for s, pred in enumerate(seeds):
                    sums[k][s, lo:lo + m] += block.correlations(pred)
    return observed, [100 * x / len(gold) for x in sums]


def _item_draws(rng, n: int, n_boot: int):
    """Blocks of item resamples of one task: ``(first resample, count, (resamples x items) counts)``."""
    block = max(1, _BLOCK_CELLS // n)
    for lo in range(0, n_boot, block):
        m = min(n_boot, lo + block) - lo
        idx = rng.integers(0, n, size=(m, n))  # row r: the items drawn in resample lo + r
        counts = np.bincount((idx + n * np.arange(m)[:, None]).ravel(), minlength=m * n)
        yield lo, m, counts.reshape(m, n)


def _accuracy_resamples(gold, models, names, n_boot, rng):
    """:func:`_correlation_resamples` for classification: accuracy x100 per seed, items
    resampled within each task; every seed of every model scored by one product per block
    (exact: integer counts of correct items)."""
    correct = []
    for preds, name in zip(models, names):
        if not preds:
            raise ValueError(f"{name}: no seeds (empty list of predictions)")
        for i, p in enumerate(preds):
            if set(p) != set(gold) or any(np.shape(p[t]) != np.shape(g) for t, g in gold.items()):
                raise ValueError(f"{name}[{i}] does not match gold's tasks and sizes")
        correct.append([{t: (np.asarray(p[t]) == np.asarray(g)).astype(np.float64) for t, g in gold.items()}
                        for p in preds])
    observed = [np.array([100 * np.mean([c[t].mean() for t in gold]) for c in seeds]) for seeds in correct]
    sums = [np.zeros((len(seeds), n_boot)) for seeds in correct]
    bounds = np.cumsum([0] + [len(seeds) for seeds in correct])
    for t, g in gold.items():
        stacked = np.stack([c[t] for seeds in correct for c in seeds])  # (all seeds x items)
        for lo, m, counts in _item_draws(rng, len(g), n_boot):
            scores = stacked @ counts.T.astype(np.float64) / len(g)
            for k, s in enumerate(sums):
                s[:, lo:lo + m] += scores[bounds[k]:bounds[k + 1]]
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
    """Per-item gold and predictions (:func:`save_pairs`); a damaged file is one
    :class:`~cselab.errors.DataError` naming it (:mod:`cselab.evaluation.records`)."""
    from cselab.evaluation.records import damaged_error, result_problem
    from cselab.io import reason_of, unreadable_errors

    problem = result_problem(path)
    if problem is None:
        try:
            with np.load(path) as z:
                cols = dict.fromkeys(k.rsplit(".", 1)[0] for k in z.files)
                return {c: (z[f"{c}.gold"], z[f"{c}.pred"]) for c in cols}
        except unreadable_errors() as e:
            problem = reason_of(e)
    raise damaged_error(path, problem)
