"""The seed planner (``results/seed_power.csv``): how many training seeds a comparison needs.

From the runs done (each method with >= 2 seeds), per metric (STS average, STS-B dev, transfer
average):

- the **seed component** ``seed_var``: the variance of a method's score over its seeds (every seed
  is scored on the same items, so this is training randomness alone), ddof 1;
- the **item component** ``item_var``: the variance of one run's score over resamples of the
  evaluation items (the paired bootstrap's, :func:`cselab.reporting.stats.score_resamples`), and
  ``item_var_diff``: that of the difference between one run of the method and one run of the
  baseline on the same resampled items (for the baseline itself: between two of its own runs),
  averaged over the runs. More seeds do not shrink it: every seed is scored on the same items.

With ``n`` seeds per method, the difference of the two mean scores has variance
``(seed_var + seed_var_baseline) / n + item_var_diff``; the minimum detectable difference of a
two-sided test at level ``alpha`` with ``power`` is ``(z(1 - alpha/2) + z(power))`` times its
square root (the normal approximation: the variances are taken as known from the runs done; the
tables' Student-t interval at 2-3 seeds is a little wider). The seeds needed for a difference
``d`` are the smallest ``n`` whose detectable difference is at most ``d``; none when the item
component alone exceeds it.
"""

from __future__ import annotations

from itertools import combinations
from typing import Sequence

import numpy as np

#: metric -> (the per-item predictions' result, the bootstrap metric, the tasks it averages)
METRICS = {"STS avg": ("sts_pairs", "spearman"), "STS-B dev": ("stsb_dev_pairs", "spearman"),
           "transfer avg": ("transfer_pairs", "accuracy")}


def components(runs: list[dict], baseline: list[dict], metric: str, n_boot: int = 1000, seed: int = 0) -> dict:
    """Variance components of a method (``runs``: one ``{column: (gold, pred)}`` per seed) against
    ``baseline`` (the same; pass ``runs`` itself for the baseline's own row)."""
    from cselab.reporting.stats import score_resamples  # scipy: not when the workflow reads METRICS to plan

    gold = {c: g for c, (g, _) in runs[0].items()}
    preds = [{c: p for c, (_, p) in run.items()} for run in runs]
    base = [{c: p for c, (_, p) in run.items()} for run in baseline]
    (observed, base_observed), (boot, base_boot) = score_resamples(gold, preds, base, n_boot, seed, metric)
    keep = np.isfinite(boot).all(axis=0) & np.isfinite(base_boot).all(axis=0)
    boot, base_boot = boot[:, keep], base_boot[:, keep]
    if baseline is runs:  # two different runs of the same method
        diffs = [np.var(boot[i] - boot[j], ddof=1) for i, j in combinations(range(len(runs)), 2)]
    else:
        diffs = [np.var(a - b, ddof=1) for a, b in zip(boot, base_boot)]
    return {"n_seeds": len(runs), "mean": float(observed.mean()), "seed_var": float(np.var(observed, ddof=1)),
            "seed_var_baseline": float(np.var(base_observed, ddof=1)),
            "item_var": float(np.mean(np.var(boot, axis=1, ddof=1))), "item_var_diff": float(np.mean(diffs))}


def _z(alpha: float, power: float) -> float:
    """``z(1 - alpha/2) + z(power)``, the standard normal's quantiles."""
    from scipy.stats import norm

    return norm.ppf(1 - alpha / 2) + norm.ppf(power)


def detectable(c: dict, seeds: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """Minimum detectable difference with ``seeds`` seeds per method (module docstring)."""
    z = _z(alpha, power)
    return float(z * np.sqrt((c["seed_var"] + c["seed_var_baseline"]) / seeds + c["item_var_diff"]))


def seeds_needed(c: dict, difference: float, alpha: float = 0.05, power: float = 0.8,
                 limit: int = 1000) -> int | None:
    """The fewest seeds per method that detect ``difference``; None if not within ``limit``
    (the item component alone is too large)."""
    z = _z(alpha, power)
    room = (difference / z) ** 2 - c["item_var_diff"]
    seed_var = c["seed_var"] + c["seed_var_baseline"]
    if room <= 0:
        return None
    n = max(1, int(np.ceil(seed_var / room - 1e-12)))
    return n if n <= limit else None


def plan(experiments: dict[str, list[dict]], baseline: str, metrics: Sequence[str], max_seeds: int = 10,
         differences: Sequence[float] = (0.5, 1.0), alpha: float = 0.05, power: float = 0.8,
         n_boot: int = 1000, seed: int = 0) -> list[dict]:
    """One row per (experiment, metric) from ``experiments``: name -> metric -> per-seed
    ``{column: (gold, pred)}``; experiments with fewer than 2 seeds are skipped (no seed
    variance to estimate)."""
    rows = []
    for name, by_metric in experiments.items():
        for metric in metrics:
            runs, base = by_metric.get(metric), experiments[baseline].get(metric)
            if not runs or not base or len(runs) < 2 or len(base) < 2:
                continue
            c = components(runs, runs if name == baseline else base, METRICS[metric][1], n_boot, seed)
            row = {"experiment": name, "baseline": baseline, "metric": metric, **c,
                   "seed_std": float(np.sqrt(c["seed_var"])), "item_se": float(np.sqrt(c["item_var"]))}
            row.update({f"mde_{n}": detectable(c, n, alpha, power) for n in range(1, max_seeds + 1)})
            row.update({f"seeds_for_{d:g}": seeds_needed(c, d, alpha, power) for d in differences})
            rows.append(row)
    return rows


def write_seed_power(rows: list[dict], csv_path, md_path, png_path, max_seeds: int = 10,
                     differences: Sequence[float] = (0.5, 1.0), power: float = 0.8) -> None:
    """The planner's rows as CSV, markdown and a figure (detectable difference against seeds,
    one panel per metric, the target differences dashed)."""
    import pandas as pd
    from matplotlib.figure import Figure

    from cselab.io import open_atomic, write_text

    df = pd.DataFrame(rows)
    with open_atomic(csv_path) as fh:
        df.to_csv(fh, index=False)
    seeds = [f"mde_{n}" for n in range(1, max_seeds + 1)]
    needed = [f"seeds_for_{d:g}" for d in differences]
    head = ["experiment", "metric", "seeds run", "mean", "seed std", "item se", "item se (diff)",
            *[f"MDE {n}" for n in (1, 3, 5, max_seeds)], *[f"seeds for +{d:g}" for d in differences]]
    lines = [f"# Seed planner: minimum detectable difference (power {power:g}, two-sided 5%) against the baseline",
             "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in df.to_dict("records"):
        count = [("never" if pd.isna(r[k]) else str(int(r[k]))) for k in needed]
        cells = [r["experiment"], r["metric"], str(r["n_seeds"]), f"{r['mean']:.2f}", f"{r['seed_std']:.2f}",
                 f"{r['item_se']:.2f}", f"{np.sqrt(r['item_var_diff']):.2f}",
                 *[f"{r[f'mde_{n}']:.2f}" for n in (1, 3, 5, max_seeds)], *count]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Seed std: the score's spread over the seeds run (training randomness). Item se: one run's "
              "score over resampled evaluation items; item se (diff): one run's difference from one baseline run "
              "on the same items (the baseline's own row: two of its runs), which more seeds do not shrink. MDE n: "
              "the smallest difference a test detects with that power when both methods run n seeds (normal "
              "approximation). 'never': the item component alone is larger than the difference."]
    write_text(md_path, "\n".join(lines) + "\n")
    metrics = list(dict.fromkeys(df["metric"])) if len(df) else []
    fig = Figure(figsize=(4.2 * max(1, len(metrics)), 3.6))
    for k, metric in enumerate(metrics):
        ax = fig.add_subplot(1, max(1, len(metrics)), k + 1)
        for r in df[df["metric"] == metric].to_dict("records"):
            ax.plot(range(1, max_seeds + 1), [r[c] for c in seeds], "o-", ms=3, label=r["experiment"])
        for d in differences:
            ax.axhline(d, color="0.4", ls="--", lw=0.8)
        ax.set_xlabel("seeds per method")
        ax.set_ylabel("minimum detectable difference (points)")
        ax.set_title(metric, fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    with open_atomic(png_path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=150, bbox_inches="tight")
