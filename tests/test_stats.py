"""Seed summaries and the paired bootstrap, against scipy on explicit resamples."""

import copy

import numpy as np
import pytest
from scipy.stats import pearsonr, rankdata, spearmanr

from cselab.reporting import stats
from cselab.reporting.stats import paired_bootstrap, pearson_rows, seed_summary, spearman_counts


def test_seed_summary():
    assert seed_summary([70.0, 72.0, 74.0]) == {"mean": 72.0, "std": 2.0, "n": 3}
    assert seed_summary([75.5]) == {"mean": 75.5, "std": None, "n": 1}
    with pytest.raises(ValueError):
        seed_summary([])


def test_pearson_rows_weighted_equals_repeated():
    rng = np.random.default_rng(0)
    x, y, w = rng.normal(size=(4, 30)), rng.normal(size=(4, 30)), rng.integers(0, 4, size=(4, 30))
    got = pearson_rows(x, y, w)
    for i in range(4):
        assert got[i] == pytest.approx(pearsonr(np.repeat(x[i], w[i]), np.repeat(y[i], w[i]))[0], abs=1e-12)
    assert pearson_rows(x, y) == pytest.approx([pearsonr(a, b)[0] for a, b in zip(x, y)], abs=1e-12)


def test_spearman_counts_matches_scipy_with_ties():
    rng = np.random.default_rng(1)
    n = 200
    x = np.round(rng.uniform(0, 5, n) * 2) / 2  # gold-like: many ties
    y = x + rng.normal(0, 1, n)
    y[:40] = np.round(y[:40])  # some ties in the predictions too
    idx = rng.integers(0, n, size=(25, n))
    counts = np.stack([np.bincount(row, minlength=n) for row in idx])
    got = spearman_counts(y, x, counts)
    want = [spearmanr(y[row], x[row])[0] for row in idx]
    np.testing.assert_allclose(got, want, atol=1e-12)
    # the rankdata route the bootstrap replaces
    naive = pearson_rows(rankdata(y[idx], axis=1), rankdata(x[idx], axis=1))
    np.testing.assert_allclose(got, naive, atol=1e-12)


def _tasks(rng, sizes=(300, 200, 250)):
    return {f"T{i}": np.round(rng.uniform(0, 5, n) * 5) / 5 for i, n in enumerate(sizes)}


def _noisy(gold, rng, noise):
    return {t: g + rng.normal(0, noise, len(g)) for t, g in gold.items()}


def test_identical_predictions_give_zero():
    rng = np.random.default_rng(2)
    gold = _tasks(rng)
    preds = [_noisy(gold, rng, 2.0) for _ in range(2)]
    res = paired_bootstrap(gold, preds, [dict(p) for p in preds], n_boot=200)
    assert res["diff"] == 0.0
    assert res["ci_low"] <= 0.0 <= res["ci_high"]
    assert not res["significant"] and res["p_value"] == 1.0
    assert res["n_boot"] == 200 and res["confidence"] == 0.95


def test_better_model_is_significant_and_swap_negates():
    rng = np.random.default_rng(3)
    gold = _tasks(rng)
    good = [_noisy(gold, rng, 0.3) for _ in range(3)]
    rand = [{t: rng.normal(size=len(g)) for t, g in gold.items()} for _ in range(3)]
    res = paired_bootstrap(gold, good, rand, n_boot=300, seed=5, paired_seeds=True)
    assert res["interval"] == "seeds+items" and res["diff"] > 50 and res["ci_low"] > 0 and res["significant"]
    assert res["p_value"] < 0.01
    assert res["ci_low"] <= res["diff"] <= res["ci_high"]
    swapped = paired_bootstrap(gold, rand, good, n_boot=300, seed=5, paired_seeds=True)
    assert swapped["diff"] == pytest.approx(-res["diff"], abs=1e-10)
    assert swapped["ci_low"] == pytest.approx(-res["ci_high"], abs=1e-10)
    assert swapped["ci_high"] == pytest.approx(-res["ci_low"], abs=1e-10)
    assert swapped["significant"] and swapped["p_value"] == res["p_value"]


def test_small_difference_not_significant():
    rng = np.random.default_rng(4)
    gold = _tasks(rng, (80,))
    a, b = [_noisy(gold, rng, 1.5)], [_noisy(gold, rng, 1.5)]
    res = paired_bootstrap(gold, a, b, n_boot=500, average=False)
    assert 0 < res["p_value"] <= 1
    assert res["significant"] == (res["ci_low"] > 0 or res["ci_high"] < 0)


def test_deterministic_for_a_seed():
    rng = np.random.default_rng(5)
    gold = _tasks(rng)
    a, b = [_noisy(gold, rng, 1.0)], [_noisy(gold, rng, 1.2)]
    first = paired_bootstrap(gold, a, b, n_boot=100, seed=7)
    assert paired_bootstrap(gold, a, b, n_boot=100, seed=7) == first
    assert paired_bootstrap(gold, a, b, n_boot=100, seed=8)["ci_low"] != first["ci_low"]


def test_point_estimate_is_mean_over_seeds_and_tasks_with_uneven_seeds():
    rng = np.random.default_rng(6)
    gold = _tasks(rng, (120, 90, 60, 150))
    a = [_noisy(gold, rng, 0.8) for _ in range(3)]
    b = [_noisy(gold, rng, 1.0) for _ in range(2)]
    for p in a + b:  # ties in the predictions, like rounded cosines
        p["T0"] = np.round(p["T0"], 1)

    def score(preds):
        return np.mean([np.mean([100 * spearmanr(p[t], g)[0] for t, g in gold.items()]) for p in preds])

    res = paired_bootstrap(gold, a, b, n_boot=50)
    assert res["diff"] == pytest.approx(score(a) - score(b), abs=1e-10)
    single = {"T2": gold["T2"]}
    res = paired_bootstrap(single, [{"T2": p["T2"]} for p in a], [{"T2": b[0]["T2"]}], n_boot=50, average=False)
    assert res["diff"] == pytest.approx(np.mean([100 * spearmanr(p["T2"], gold["T2"])[0] for p in a])
                                        - 100 * spearmanr(b[0]["T2"], gold["T2"])[0], abs=1e-10)
    pearson = paired_bootstrap(gold, a, b, n_boot=50, metric="pearson")
    want = (np.mean([np.mean([100 * pearsonr(p[t], g)[0] for t, g in gold.items()]) for p in a])
            - np.mean([np.mean([100 * pearsonr(p[t], g)[0] for t, g in gold.items()]) for p in b]))
    assert pearson["diff"] == pytest.approx(want, abs=1e-10)


def test_bootstrap_distribution_matches_explicit_resampling():
    """Same draws as the implementation (rng.integers per task, in order), scored with spearmanr."""
    rng = np.random.default_rng(7)
    gold = _tasks(rng, (60, 40))
    a, b = [_noisy(gold, rng, 1.0) for _ in range(2)], [_noisy(gold, rng, 1.3)]
    n_boot = 40
    res = paired_bootstrap(gold, a, b, n_boot=n_boot, seed=3, confidence=0.9)
    draw = np.random.default_rng(3)
    idx = {t: draw.integers(0, len(g), size=(n_boot, len(g))) for t, g in gold.items()}

    def score(preds, r):
        return np.mean([np.mean([100 * spearmanr(p[t][idx[t][r]], g[idx[t][r]])[0] for t, g in gold.items()])
                        for p in preds])

    boot = np.array([score(a, r) - score(b, r) for r in range(n_boot)])
    assert res["ci_low"] == pytest.approx(np.quantile(boot, 0.05), abs=1e-9)
    assert res["ci_high"] == pytest.approx(np.quantile(boot, 0.95), abs=1e-9)


def test_input_errors():
    rng = np.random.default_rng(8)
    gold = _tasks(rng, (50, 50))
    a = [_noisy(gold, rng, 1.0)]
    with pytest.raises(ValueError, match="tasks"):
        paired_bootstrap(gold, [{"T0": a[0]["T0"]}], a)
    with pytest.raises(ValueError, match="shape"):
        paired_bootstrap(gold, [{"T0": a[0]["T0"][:10], "T1": a[0]["T1"]}], a)
    with pytest.raises(ValueError, match="single task"):
        paired_bootstrap(gold, a, a, average=False)
    with pytest.raises(ValueError, match="no seeds"):
        paired_bootstrap(gold, [], a)
    with pytest.raises(ValueError, match="metric"):
        paired_bootstrap(gold, a, a, metric="kendall")
    with pytest.raises(ValueError, match="constant"):
        paired_bootstrap(gold, [{t: np.ones(len(g)) for t, g in gold.items()}], a)
    with pytest.raises(ValueError, match="gold"):
        paired_bootstrap({"T0": np.ones(50)}, [{"T0": a[0]["T0"]}], [{"T0": a[0]["T0"]}])


def test_paired_bootstrap_accuracy_against_explicit_resamples():
    """Transfer items: accuracy difference, items resampled within each task, seeds averaged."""
    rng = np.random.default_rng(3)
    gold = {"MR": rng.integers(0, 2, 200), "TREC": rng.integers(0, 6, 120)}
    flip = lambda g, p: np.where(rng.random(len(g)) < p, (g + 1) % (g.max() + 1), g)  # noqa: E731
    a = [{t: flip(g, 0.2) for t, g in gold.items()} for _ in range(2)]
    b = [{t: flip(g, 0.3) for t, g in gold.items()}]
    res = paired_bootstrap(gold, a, b, n_boot=300, seed=5, metric="accuracy")
    acc = lambda preds, idx: np.mean([np.mean([np.mean(p[t][idx[t]] == gold[t][idx[t]])  # noqa: E731
                                               for t in gold]) for p in preds])
    full = {t: np.arange(len(g)) for t, g in gold.items()}
    assert res["diff"] == pytest.approx(100 * (acc(a, full) - acc(b, full)), abs=1e-9)
    draws = np.random.default_rng(5)
    explicit = []
    boots = {t: draws.integers(0, len(g), size=(300, len(g))) for t, g in gold.items()}
    for r in range(300):
        idx = {t: boots[t][r] for t in gold}
        explicit.append(100 * (acc(a, idx) - acc(b, idx)))
    lo, hi = np.quantile(explicit, [0.025, 0.975])
    assert (res["ci_low"], res["ci_high"]) == pytest.approx((lo, hi), abs=1e-9)
    assert res["diff"] > 0 and res["significant"] == (res["ci_low"] > 0)


# -- one baseline, several models: shared resamples, the same numbers as one bootstrap per model --

def _comparison_inputs(metric):
    """A baseline with 3 seeds and four models against it (3 seeds paired, 3 unpaired, 2, 1), on
    three tasks (gold with ties; a prediction with ties); labels for accuracy."""
    rng = np.random.default_rng(12)
    if metric == "accuracy":
        gold = {"MR": rng.integers(0, 2, 300), "TREC": rng.integers(0, 6, 200), "CR": rng.integers(0, 2, 45)}

        def model(noise):
            return {t: np.where(rng.random(len(g)) < noise / 4, (g + 1) % (g.max() + 1), g) for t, g in gold.items()}
    else:
        gold = _tasks(rng, (300, 200, 45))

        def model(noise):
            return _noisy(gold, rng, noise)
    models = [[model(noise) for _ in range(seeds)] for noise, seeds in ((1.0, 3), (1.2, 3), (0.9, 2), (1.5, 1))]
    if metric != "accuracy":
        models[1][0]["T0"] = np.round(models[1][0]["T0"], 1)  # ties in a prediction
    return gold, models, [model(1.1) for _ in range(3)], [True, False, False, False]


def _reference_resamples(gold, models, n_boot, seed, metric, block_cells):
    """The computation before comparisons shared their resamples, kept as it was: per task and
    block of draws, every seed of every model centered on (pairs x resamples) counts and
    correlated with gold by einsum (accuracy: correct items times counts). Returns the observed
    scores, the item resamples and the generator after the draws."""
    rng = np.random.default_rng(seed)
    if metric == "accuracy":
        correct = [[{t: (p[t] == g).astype(np.float64) for t, g in gold.items()} for p in preds] for preds in models]
        observed = [np.array([100 * np.mean([c[t].mean() for t in gold]) for c in seeds]) for seeds in correct]
    else:
        corr = spearmanr if metric == "spearman" else pearsonr
        observed = [np.array([100 * np.mean([corr(p[t], g)[0] for t, g in gold.items()]) for p in preds])
                    for preds in models]
    sums = [np.zeros((len(preds), n_boot)) for preds in models]
    for t, g in gold.items():
        n = len(g)
        block = max(1, block_cells // n)
        for lo in range(0, n_boot, block):
            m = min(n_boot, lo + block) - lo
            idx = rng.integers(0, n, size=(m, n))
            counts = np.bincount((idx + n * np.arange(m)[:, None]).ravel(), minlength=m * n)
            counts = np.ascontiguousarray(counts.reshape(m, n).T)
            if metric == "accuracy":
                for k, seeds in enumerate(correct):
                    for s, c in enumerate(seeds):
                        sums[k][s, lo:lo + m] += c[t] @ counts / n
                continue
            dg = stats._centered(g, metric)(counts)
            cdg = counts * dg
            sgg = np.einsum("ij,ij->j", cdg, dg)
            for k, preds in enumerate(models):
                for s, p in enumerate(preds):
                    dx = stats._centered(p[t], metric)(counts)
                    r = np.einsum("ij,ij->j", cdg, dx) / np.sqrt(np.einsum("ij,ij,ij->j", counts, dx, dx) * sgg)
                    sums[k][s, lo:lo + m] += r
    return observed, [100 * x / len(gold) for x in sums], rng


#: (diff, ci_low, ci_high, p_value) of each model of :func:`_comparison_inputs` against the
#: baseline (n_boot 250, seed 4, blocks of 20,000 cells), recorded from one paired_bootstrap per
#: model before the comparisons shared their resamples (commit 6b8d225)
_RECORDED = {
    "spearman": [(1.2408132870951647, -3.915811141033392, 6.397437715223721, 0.630813927962532),
                 (-3.633277865298453, -10.240716440610804, 2.974160710013897, 0.2454610356046001),
                 (3.7014936551990445, -4.596200824198588, 11.999188134596677, 0.2991526841996566),
                 (-10.22330559943461, -17.637417991097532, -3.7193634331074334, 0.0)],
    "pearson": [(1.562665179194127, -1.6035471450054364, 4.72887750339369, 0.3327726900994398),
                (-2.9582890385279796, -7.645976190441864, 1.7293981133859049, 0.20074832976657403),
                (3.950260858029239, -2.5076478501175155, 10.408169566175992, 0.1797270842650209),
                (-11.054299621547457, -16.30505343366173, -6.487153451178242, 0.0)],
    "accuracy": [(5.376543209876544, -9.977724856991339, 20.730811276744426, 0.36180144408736375),
                 (-2.364197530864203, -12.297780442698494, 7.569385380970088, 0.59437482611509),
                 (6.4135802469135825, -2.3342562941661438, 15.161416787993309, 0.13083746277336225),
                 (-6.401234567901227, -12.7111111111111, -0.8229938271604949, 0.048)],
}


@pytest.mark.parametrize("metric", ["spearman", "pearson", "accuracy"])
def test_shared_resamples_equal_one_bootstrap_per_model_bit_for_bit(monkeypatch, metric):
    """paired_bootstraps (the baseline's and gold's resamples computed once, several blocks of
    draws per task) gives exactly the reference's item resamples and intervals, and the numbers
    recorded before the sharing."""
    monkeypatch.setattr(stats, "_BLOCK_CELLS", 20_000)
    gold, models, base, paired = _comparison_inputs(metric)
    results = stats.paired_bootstraps(gold, models, base, n_boot=250, seed=4, metric=metric, paired_seeds=paired)
    observed, boot, after = _reference_resamples(gold, [*models, base], 250, 4, metric, 20_000)
    for k, res in enumerate(results):
        want = stats._interval([observed[k], observed[-1]], [boot[k], boot[-1]], 0.95, paired[k], copy.deepcopy(after))
        assert res == want
        # the recorded figures to the last few bits: another CPU's BLAS may round the last one differently
        assert (res["diff"], res["ci_low"], res["ci_high"], res["p_value"]) == pytest.approx(
            _RECORDED[metric][k], rel=1e-12, abs=1e-12)
        alone = paired_bootstrap(gold, models[k], base, n_boot=250, seed=4, metric=metric, paired_seeds=paired[k])
        assert alone == res
    got_observed, got_boot = stats.score_resamples(gold, models[1], base, n_boot=250, seed=4, metric=metric)
    for got, want in zip(got_observed + got_boot, [observed[1], observed[-1], boot[1], boot[-1]]):
        assert np.array_equal(got, want)
    if metric == "spearman":  # the integer route and the float one (beyond _EXACT_PAIRS) agree exactly
        monkeypatch.setattr(stats, "_EXACT_PAIRS", 0)
        assert stats.paired_bootstraps(gold, models, base, n_boot=250, seed=4, paired_seeds=paired) == results


def test_shared_resamples_score_each_seed_once(monkeypatch):
    """One gold block per task (one block of draws each) and one scoring per seed of each model,
    the baseline's included: not once per comparison."""
    gold, models, base, paired = _comparison_inputs("spearman")
    blocks, scored = [], []
    init, correlations = stats._SpearmanBlock.__init__, stats._SpearmanBlock.correlations

    def counted_init(self, counts, gold_ranker):
        blocks.append(gold_ranker)
        init(self, counts, gold_ranker)

    def counted_correlations(self, pred):
        scored.append(pred)
        return correlations(self, pred)

    monkeypatch.setattr(stats._SpearmanBlock, "__init__", counted_init)
    monkeypatch.setattr(stats._SpearmanBlock, "correlations", counted_correlations)
    stats.paired_bootstraps(gold, models, base, n_boot=100, paired_seeds=paired)
    seeds = sum(len(m) for m in models) + len(base)
    assert len(blocks) == len(gold) and len(scored) == seeds * len(gold)
    assert len({id(pred) for pred in scored}) == len(scored)  # no prediction scored twice
    with pytest.raises(ValueError, match="paired_seeds has 2 flags for 4 models"):
        stats.paired_bootstraps(gold, models, base, n_boot=10, paired_seeds=[True, False])


# -- intervals that count training randomness: a simulation with known seed and item variance --

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(20)


def _pearson_of(spearman):
    """A bivariate normal's Pearson correlation from its population Spearman (Pearson, 1907)."""
    return 2 * np.sin(np.pi * spearman / 6)


def _expected_score(spearman, seed_sd, n_items):
    """E[sample Spearman] x100 of n items (Moran, 1948), averaged over seeds whose population
    Spearman is ``spearman + seed_sd * N(0, 1)``: the true score of a method."""
    r = _pearson_of(spearman + seed_sd * _NODES)
    expected = 6 / (np.pi * (n_items + 1)) * (np.arcsin(r) + (n_items - 2) * np.arcsin(r / 2))
    return 100 * np.sum(_WEIGHTS * expected) / np.sum(_WEIGHTS)


def _study(rng, n_seeds, n_items, methods, seed_sd, own_noise):
    """One study: gold scores, and per method and seed, predictions whose population Spearman
    with gold is the method's plus the seed's deviation; the errors are shared by the methods on
    each item (hard items are hard for both) up to a per-seed share ``own_noise``."""
    gold, shared = rng.normal(size=n_items), rng.normal(size=n_items)
    preds = []
    for spearman in methods:
        seeds = []
        for _ in range(n_seeds):
            scale = np.sqrt(1 / _pearson_of(spearman + seed_sd * rng.normal()) ** 2 - 1)
            noise = np.sqrt(1 - own_noise) * shared + np.sqrt(own_noise) * rng.normal(size=n_items)
            seeds.append({"STS": gold + scale * noise})
        preds.append(seeds)
    return {"STS": gold}, preds


@pytest.mark.parametrize("n_seeds", [3, 5])
def test_two_level_intervals_cover_the_true_difference(n_seeds):
    """1,000 simulated studies, seed variance dominating (a seed moves a method's score by 2
    points, the shared items move the difference far less): the seeds+items 95% intervals
    cover the true difference in at least 92% of the studies; the item-only ones do not."""
    methods, seed_sd, n_items = (0.70, 0.68), 0.02, 500
    truth = _expected_score(methods[0], seed_sd, n_items) - _expected_score(methods[1], seed_sd, n_items)
    rng, covered, items_covered = np.random.default_rng(0), 0, 0
    for study in range(1000):
        gold, (a, b) = _study(rng, n_seeds, n_items, methods, seed_sd, own_noise=0.1)
        res = paired_bootstrap(gold, a, b, n_boot=200, seed=study, paired_seeds=True, average=False)
        assert res["interval"] == "seeds+items"
        covered += res["ci_low"] <= truth <= res["ci_high"]
        items_covered += res["item_ci_low"] <= truth <= res["item_ci_high"]
    assert covered >= 920, f"{covered / 10:.1f}% of the 95% intervals cover the true difference {truth:.2f}"
    assert items_covered < 700, f"item-only intervals cover {items_covered / 10:.1f}%"


def test_one_seed_keeps_the_item_interval_and_unpaired_seeds_count_both_spreads():
    rng = np.random.default_rng(11)
    gold, (a, b) = _study(rng, 3, 300, (0.7, 0.68), 0.02, 0.1)
    single = paired_bootstrap(gold, a[:1], b, n_boot=200, average=False)
    assert single["interval"] == "items" and "item_ci_low" not in single
    unpaired = paired_bootstrap(gold, a, b[:2], n_boot=200, average=False)
    assert unpaired["interval"] == "seeds+items" and unpaired["dof"] >= 1
    assert unpaired["ci_high"] - unpaired["ci_low"] > unpaired["item_ci_high"] - unpaired["item_ci_low"]
    with pytest.raises(ValueError, match="paired seeds need as many seeds"):
        paired_bootstrap(gold, a, b[:2], n_boot=50, paired_seeds=True, average=False)
