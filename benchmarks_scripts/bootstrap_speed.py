"""Speed of cselab.reporting.stats.paired_bootstrap on STS-sized inputs, and a check against the naive way.

Synthetic data shaped like the 7 STS tasks (STS12..SICK-R test sizes), gold on SentEval's
0-5 grid (many ties), 3 seeds per model, 1000 resamples. The naive reference resamples the
arrays explicitly and ranks them with ``scipy.stats.rankdata(x[idx], axis=1)``; it is timed on
100 resamples and extrapolated, and both must give the same differences on the same draws.

    python benchmarks_scripts/bootstrap_speed.py [N_BOOT]

``table`` mode times one table's comparisons instead
(:func:`cselab.reporting.tables.add_comparisons`, what the ``table`` rule runs): METHODS methods
(the first is SimCSE, the baseline of the others) x SEEDS seeds (the same seeds, so paired) x the
7 STS tasks, predictions continuous (cosine-like), gold with ties; the median of REPEATS runs:

    python benchmarks_scripts/bootstrap_speed.py table [--methods 10] [--seeds 5] [--n-boot 1000] [--repeats 3]
"""

import sys
import time

import numpy as np
from scipy.stats import rankdata

from cselab.reporting.stats import paired_bootstrap, pearson_rows, spearman_counts

SIZES = {"STS12": 3108, "STS13": 1500, "STS14": 3750, "STS15": 3000, "STS16": 1186, "STS-B": 1379, "SICK-R": 4927}


def synthetic(seed: int = 0):
    rng = np.random.default_rng(seed)
    gold = {t: np.round(rng.uniform(0, 5, n) * 5) / 5 for t, n in SIZES.items()}

    def model(noise, s):
        r = np.random.default_rng(s)
        return {t: g / 5 + r.normal(0, noise, len(g)) for t, g in gold.items()}

    return gold, [model(0.30, s) for s in range(3)], [model(0.32, 10 + s) for s in range(3)]


def naive_block(gold, preds, n_boot, seed=1):
    """Explicit resampling + rankdata: mean Spearman x100 of each model, per resample."""
    rng = np.random.default_rng(seed)
    out = []
    for t, g in gold.items():
        idx = rng.integers(0, len(g), size=(n_boot, len(g)))
        rg = rankdata(g[idx], axis=1)
        out.append([[pearson_rows(rankdata(p[t][idx], axis=1), rg) for p in model] for model in preds])
    return 100 * np.asarray(out).mean(axis=(0, 2))  # (models, n_boot)


def main(n_boot: int = 1000) -> None:
    gold, a, b = synthetic()
    n_pairs = sum(SIZES.values())
    paired_bootstrap(gold, a, b, n_boot=10)  # warm-up
    wall, cpu = [], []
    for _ in range(3):
        tic, tic_cpu = time.perf_counter(), time.process_time()
        res = paired_bootstrap(gold, a, b, n_boot=n_boot, seed=0)
        wall.append(time.perf_counter() - tic)
        cpu.append(time.process_time() - tic_cpu)
    print(f"{len(SIZES)} tasks, {n_pairs} pairs, 3 + 3 seeds, {n_boot} resamples")
    print(f"paired_bootstrap: wall best {min(wall):.2f} s, median {np.median(wall):.2f} s; "
          f"CPU best {min(cpu):.2f} s (3 runs)")
    print("result:", {k: round(v, 4) if isinstance(v, float) else v for k, v in res.items()})

    m = 100
    tic = time.perf_counter()
    naive = naive_block(gold, [a, b], m)
    t_naive = time.perf_counter() - tic
    print(f"naive rankdata resampling: {t_naive:.2f} s for {m} resamples "
          f"= ~{t_naive * n_boot / m:.1f} s for {n_boot}")

    # Same draws through the counts formulation: identical per-resample scores.
    rng = np.random.default_rng(1)
    fast = np.zeros_like(naive)
    for t, g in gold.items():
        idx = rng.integers(0, len(g), size=(m, len(g)))
        counts = np.stack([np.bincount(row, minlength=len(g)) for row in idx])
        for k, model in enumerate([a, b]):
            fast[k] += sum(spearman_counts(p[t], g, counts) for p in model)
    fast *= 100 / (len(SIZES) * 3)
    print(f"max |counts - rankdata| over {m} resamples: {np.abs(fast - naive).max():.2e}")


def table_rows(methods: int, seeds: int, seed: int = 0) -> list[dict]:
    """Rows as :func:`cselab.reporting.tables.add_comparisons` reads them: ``methods`` experiments
    on one PLM (the first SimCSE), each with ``seeds`` seeds of per-item STS predictions."""
    gold, _, _ = synthetic(seed)
    rng = np.random.default_rng(seed + 1)
    rows = []
    for m in range(methods):
        objective = "simcse" if m == 0 else f"method{m}"
        noise = 0.30 + 0.01 * m
        for s in range(1, seeds + 1):
            pairs = {t: (g, np.tanh(g / 5 + rng.normal(0, noise, len(g)))) for t, g in gold.items()}
            rows.append({"name": f"{objective}-bert-base", "plm": "bert-base", "objective": objective, "seed": s,
                         "pairs": pairs})
    return rows


def table_main(argv: list[str]) -> None:
    """Time the comparisons of one STS table (module docstring, ``table`` mode)."""
    import argparse
    import shlex

    import pandas as pd

    from cselab.reporting.tables import Comparison, add_comparisons

    ap = argparse.ArgumentParser(prog="bootstrap_speed.py table")
    ap.add_argument("--methods", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    rows = table_rows(args.methods, args.seeds)
    df = pd.DataFrame({"experiment": list(dict.fromkeys(r["name"] for r in rows))})
    comparisons = [Comparison("", tuple(SIZES))]
    walls, out = [], None
    for _ in range(args.repeats):
        tic = time.perf_counter()
        out = add_comparisons(df, rows, comparisons, n_boot=args.n_boot, confidence=0.95, seed=0)
        walls.append(time.perf_counter() - tic)
    print("command: python benchmarks_scripts/bootstrap_speed.py table " + shlex.join(argv))
    print(f"{args.methods} methods ({args.methods - 1} comparisons with SimCSE) x {args.seeds} seeds x "
          f"{len(SIZES)} tasks ({sum(SIZES.values())} pairs), {args.n_boot} resamples")
    print(f"table bootstrap: median {np.median(walls):.2f} s, runs " + ", ".join(f"{w:.2f}" for w in walls) + " s")
    cols = ["experiment", "diff", "diff_ci_low", "diff_ci_high", "p_value", "ci_counts"]
    print(out[cols].to_string(index=False))


if __name__ == "__main__":
    if sys.argv[1:2] == ["table"]:
        table_main(sys.argv[2:])
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
