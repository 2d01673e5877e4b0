"""The seed planner: variance components against direct computations, detectable differences
and seeds needed consistent with each other, and its written outputs."""

import numpy as np
import pytest
from scipy.stats import norm, spearmanr

from cselab.reporting import power


def simulated_runs(seeds: int, shift: float, seed: int, n: int = 300, tasks=("A", "B")):
    """Per seed ``{task: (gold, pred)}``: predictions = gold + a seed-specific noise (training
    randomness) + ``shift`` times item noise."""
    rng = np.random.default_rng(seed)
    gold = {t: rng.normal(size=n) for t in tasks}
    return [{t: (g, g + rng.normal(scale=0.8 + 0.2 * s, size=n) + shift) for t, g in gold.items()}
            for s in range(seeds)]


def test_components_match_direct_computation():
    runs = simulated_runs(4, 0.0, seed=1)
    base = [{t: (g, g + np.random.default_rng(9 + s).normal(scale=1.5, size=len(g))) for t, (g, _) in run.items()}
            for s, run in enumerate(runs)]
    c = power.components(runs, base, "spearman", n_boot=400)
    scores = [100 * np.mean([spearmanr(p, g)[0] for g, p in run.values()]) for run in runs]
    assert c["n_seeds"] == 4 and c["mean"] == pytest.approx(np.mean(scores))
    assert c["seed_var"] == pytest.approx(np.var(scores, ddof=1))
    base_scores = [100 * np.mean([spearmanr(p, g)[0] for g, p in run.values()]) for run in base]
    assert c["seed_var_baseline"] == pytest.approx(np.var(base_scores, ddof=1))
    assert 0 < c["item_var_diff"] and 0 < c["item_var"]
    own = power.components(runs, runs, "spearman", n_boot=400)  # the baseline's row: two of its own runs
    assert own["seed_var_baseline"] == own["seed_var"] and own["item_var_diff"] > 0


def test_detectable_difference_and_seeds_needed_agree():
    c = {"seed_var": 0.5, "seed_var_baseline": 0.3, "item_var_diff": 0.01}
    z = norm.ppf(0.975) + norm.ppf(0.8)
    assert power.detectable(c, 4) == pytest.approx(z * np.sqrt(0.8 / 4 + 0.01))
    mdes = [power.detectable(c, n) for n in range(1, 30)]
    assert all(a > b for a, b in zip(mdes, mdes[1:]))  # more seeds, smaller differences
    for d in (0.5, 1.0, 2.0):
        n = power.seeds_needed(c, d)
        assert power.detectable(c, n) <= d and (n == 1 or power.detectable(c, n - 1) > d)
    # the item component alone is larger than the difference: no number of seeds detects it
    assert power.seeds_needed({**c, "item_var_diff": 1.0}, 0.5) is None


def test_plan_rows_and_outputs(tmp_path):
    experiments = {"simcse": {"STS avg": simulated_runs(3, 0.0, seed=2)},
                   "comp": {"STS avg": simulated_runs(3, 0.1, seed=3)},
                   "one-seed": {"STS avg": simulated_runs(1, 0.0, seed=4)}}
    rows = power.plan(experiments, "simcse", ["STS avg", "STS-B dev"], max_seeds=10, n_boot=200)
    assert [(r["experiment"], r["metric"]) for r in rows] == [("simcse", "STS avg"), ("comp", "STS avg")]
    for r in rows:
        assert r["mde_1"] > r["mde_10"] > 0 and "seeds_for_0.5" in r and "seeds_for_1" in r
    power.write_seed_power(rows, tmp_path / "p.csv", tmp_path / "p.md", tmp_path / "p.png")
    md = (tmp_path / "p.md").read_text()
    assert "| comp | STS avg | 3 |" in md and (tmp_path / "p.png").stat().st_size > 1000
    import pandas as pd

    assert list(pd.read_csv(tmp_path / "p.csv")["experiment"]) == ["simcse", "comp"]
