"""The sweep report (``results/sweep_<name>.csv``, ``.md``, ``.png``, ``.best.yaml``): a config's
``sweeps.<name>`` grid, one row per point, and whether the selected point is really better.

Per point (its grid values): the selection metric's mean and standard deviation over the sweep's
seeds (the STS-B dev Spearman x100 by default, the development split, never a test set), its
training steps and cost (the training summaries' wall seconds, summed over seeds; GPU-hours when a
summary names its device). The **selected** point has the best mean (the first in grid order on a
tie). It is compared with **every other point** (its runners-up), one at a time, by the tables'
paired bootstrap (:func:`cselab.reporting.stats.paired_bootstraps`: the evaluation items
resampled, and with >= 2 seeds the seeds as well, paired, since every point ran the same seeds;
the same item draws for every comparison): ``best_minus`` is selected minus this point with its
interval; the verdict is "distinguishable" when the interval excludes 0, else "not
distinguishable at these seeds". ``seeds_needed`` is the seed planner's answer
(:func:`cselab.reporting.power.components` and :func:`~cselab.reporting.power.seeds_needed`) for the
observed difference: how many seeds per point a test at the interval's level with the planner's
power needs to detect it (empty: no number of seeds does, the evaluation items alone are too noisy
for so small a difference, or fewer than 2 seeds ran).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Metric:
    """A selection metric: its score result and per-item predictions (:mod:`cselab.pipeline.outputs`
    ``RESULT``), its words, the bootstrap's per-item metric. The score is the mean of the score
    file's values over the prediction file's columns (one column for STS-B dev)."""

    score: str
    pairs: str | None
    column: str
    label: str
    bootstrap: str = "spearman"


#: the selection metrics a sweep may name (``sweeps.<s>.metric``)
METRICS: dict[str, Metric] = {
    "stsb_dev": Metric("stsb_dev", "stsb_dev_pairs", "STS-B dev", "STS-B dev Spearman x100"),
    "sts": Metric("sts", "sts_pairs", "STS avg", "the STS average (Spearman x100)"),
    "transfer": Metric("transfer", "transfer_pairs", "transfer avg", "the transfer tasks' average accuracy",
                       "accuracy"),
}

#: a row's comparison with the selected point (:func:`compare`), its columns in order
COMPARED = ("best_minus", "best_minus_ci_low", "best_minus_ci_high", "p_value", "ci_counts", "n_boot", "verdict",
            "seeds_needed")
#: the verdicts of a compared point
DISTINGUISHABLE, NOT_DISTINGUISHABLE, SELECTED = "distinguishable", "not distinguishable at these seeds", "selected"
NO_PAIRS = "not compared: no per-item predictions"


def metric_of(name: str) -> Metric:
    """A named metric of :data:`METRICS`, else any result an evaluation kind writes as one JSON
    file: the mean of its scores (higher taken as better), compared with the bootstrap when the
    kind also writes ``<name>_pairs``."""
    from cselab.evaluation.kinds import result_files

    if name in METRICS:
        return METRICS[name]
    files = result_files()
    if name not in files or not files[name].endswith(".json") or "{dataset}" in files[name]:
        raise ValueError(f"unknown sweep metric {name!r}: a result written as one JSON file per run")
    pairs = f"{name}_pairs" if f"{name}_pairs" in files else None
    return Metric(name, pairs, name, f"the mean of {name}'s scores", "spearman")


def load_run(seed: int, score: str | Path, pairs: str | Path | None, summary: str | Path) -> dict:
    """One seed of a point, loaded: ``{"seed", "scores", "pairs", "summary"}`` (``pairs`` None
    for a metric without per-item predictions)."""
    from cselab.evaluation.records import read_result
    from cselab.reporting.stats import load_pairs

    return {"seed": int(seed), "scores": read_result(score)["scores"],
            "pairs": None if pairs is None else load_pairs(pairs), "summary": json.loads(Path(summary).read_text())}


def run_score(run: dict) -> float:
    """A run's metric: its scores averaged over its predictions' columns (without predictions:
    over every score)."""
    columns = run["pairs"] if run["pairs"] is not None else run["scores"]
    return float(np.mean([run["scores"][c] for c in columns]))


def run_cost(summary: dict) -> tuple[float, float | None]:
    """(wall seconds, GPU-hours or None) of one training job from its summary: the job's total
    (``job_seconds.total``, else ``train_seconds``); GPU-hours when the summary names a CUDA
    ``device``, times its ``world_size`` (default 1)."""
    seconds = float((summary.get("job_seconds") or {}).get("total") or summary.get("train_seconds") or 0.0)
    device = str(summary.get("device") or "")
    gpus = int(summary.get("world_size") or 1)
    return seconds, (seconds * gpus / 3600 if device.startswith(("cuda", "gpu")) else None)


def point_summary(point: dict, keys: Sequence[str]) -> dict:
    """A point's row before the comparisons: experiment, grid values, seeds, mean, std, steps, cost."""
    from cselab.reporting.stats import seed_summary

    runs = point["runs"]
    spread = seed_summary([run_score(r) for r in runs])
    costs = [run_cost(r["summary"]) for r in runs]
    gpu = [g for _, g in costs if g is not None]
    steps = sorted({int(r["summary"]["steps"]) for r in runs if r["summary"].get("steps") is not None})
    return {"experiment": point["experiment"], **{k: point["values"].get(k) for k in keys},
            "seeds": " ".join(str(r["seed"]) for r in runs), "n_seeds": spread["n"],
            "mean": round(spread["mean"], 2), "std": None if spread["std"] is None else round(spread["std"], 2),
            "steps": "/".join(map(str, steps)), "wall_s": round(sum(s for s, _ in costs), 1),
            "gpu_hours": round(sum(gpu), 3) if len(gpu) == len(costs) else None}


def _preds(runs: list[dict]) -> list[dict]:
    return [{c: p for c, (_, p) in r["pairs"].items()} for r in runs]


def compare(best: dict, others: list[dict], metric: Metric, n_boot: int = 1000, confidence: float = 0.95,
            seed: int = 0, power: float = 0.8) -> list[dict]:
    """The selected point against each of ``others`` (points with loaded runs): per other point the
    interval of selected minus it (one :func:`~cselab.reporting.stats.paired_bootstraps` call, the
    selected point as the shared side, each result turned around), its verdict and the seeds needed."""
    from cselab.reporting.power import components, seeds_needed
    from cselab.reporting.stats import paired_bootstraps

    if not others:
        return []
    if any(r["pairs"] is None for p in [best, *others] for r in p["runs"]):
        return [{"verdict": NO_PAIRS} for _ in others]
    gold = {c: g for c, (g, _) in best["runs"][0]["pairs"].items()}
    seeds = [r["seed"] for r in best["runs"]]
    results = paired_bootstraps(gold, [_preds(p["runs"]) for p in others], _preds(best["runs"]), n_boot, seed,
                                confidence, metric.bootstrap,
                                paired_seeds=[[r["seed"] for r in p["runs"]] == seeds for p in others])
    out = []
    for p, res in zip(others, results):
        diff = -res["diff"]  # the bootstrap measured (other - selected)
        needed = None
        if len(best["runs"]) > 1 and len(p["runs"]) > 1 and diff != 0:
            c = components([r["pairs"] for r in best["runs"]], [r["pairs"] for r in p["runs"]], metric.bootstrap,
                           n_boot, seed)
            needed = seeds_needed(c, abs(diff), alpha=1 - confidence, power=power)
        out.append({"best_minus": round(diff, 2), "best_minus_ci_low": round(-res["ci_high"], 2),
                    "best_minus_ci_high": round(-res["ci_low"], 2), "p_value": round(res["p_value"], 4),
                    "ci_counts": res["interval"], "n_boot": res["n_boot"],
                    "verdict": DISTINGUISHABLE if res["significant"] else NOT_DISTINGUISHABLE,
                    "seeds_needed": needed})
    return out


def sweep_table(points: list[dict], grid: dict[str, list], metric: str = "stsb_dev", n_boot: int = 1000,
                confidence: float = 0.95, seed: int = 0, power: float = 0.8,
                runners_up: int | None = None):
    """The sweep's table (a DataFrame, points in grid order) from ``points``: ``{"experiment",
    "values": {grid key: value}, "runs": [load_run(...) per seed]}``. The selected point is the best
    mean; it is compared with every other point, or with the ``runners_up`` next best only (the
    rest: no comparison)."""
    import pandas as pd

    m = metric_of(metric)
    if not points:
        raise ValueError("a sweep needs at least one point")
    rows = [point_summary(p, list(grid)) for p in points]
    order = sorted(range(len(rows)), key=lambda i: (-float(np.mean([run_score(r) for r in points[i]["runs"]])), i))
    best = order[0]
    compared = order[1:] if runners_up is None else order[1:1 + runners_up]
    results = dict(zip(compared, compare(points[best], [points[i] for i in compared], m, n_boot, confidence, seed,
                                         power)))
    for rank, i in enumerate(order, 1):
        rows[i].update(rank=rank, selected=i == best,
                       **{**dict.fromkeys(COMPARED), "verdict": SELECTED if i == best else "not compared"})
        rows[i].update(results.get(i, {}))
    df = pd.DataFrame(rows)
    df["seeds_needed"] = df["seeds_needed"].astype("Int64")
    df["n_boot"] = df["n_boot"].astype("Int64")
    return df


def notes(df, metric: str, seeds: Sequence[int], n_boot: int, confidence: float, power: float) -> list[str]:
    """What the table's numbers are: the selection metric, the seeds, the interval's level and
    resamples, whom the selected point is compared with, the verdict and the seeds needed."""
    compared = df[df["verdict"].isin([DISTINGUISHABLE, NOT_DISTINGUISHABLE])]
    counts = set(compared["ci_counts"].dropna())
    whom = ("every other point" if len(compared) == len(df) - 1
            else f"the {len(compared)} next best points only (the others: not compared)")
    how = []
    if "seeds+items" in counts:
        how.append("with >= 2 seeds the interval counts the seeds (paired: every point ran the same seeds) and the "
                   "evaluation items together, Student's t at Satterthwaite's degrees of freedom")
    if "items" in counts:
        how.append("with one seed it counts the evaluation items only, not training randomness")
    return [f"Selection metric: {metric_of(metric).label} ({metric}; a development split, not a test set), mean ± "
            f"standard deviation over seeds {', '.join(map(str, seeds))}; the selected point has the best mean.",
            f"Best minus: the selected point's mean minus this point's, with a {confidence:.0%} paired bootstrap "
            f"interval ({n_boot} resamples; evaluation.bootstrap){': ' + '; '.join(how) if how else ''}. The "
            f"selected point is compared with {whom}.",
            "Verdict: distinguishable when the interval excludes 0, else not distinguishable at these seeds.",
            f"Seeds needed: the seeds per point a two-sided test at {1 - confidence:.0%} with power {power:g} needs "
            "to detect the observed difference (the seed planner's variance components, results/seed_power.csv); "
            "empty: no number of seeds does (the evaluation items alone are too noisy for so small a difference), "
            "or fewer than 2 seeds ran.",
            "Cost: the training jobs' wall seconds summed over the seeds (GPU-hours where the summaries name a GPU)."]


def _fmt(value, digits: int = 2) -> str:
    import pandas as pd

    if value is None or pd.isna(value):
        return ""
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def to_markdown(df, grid: dict[str, list], title: str, notes: Sequence[str] = (), metric: str = "stsb_dev") -> str:
    """The paper-style table: grid values, mean ± std, steps, cost, the comparison with the
    selected point (marked **bold**), its verdict and the seeds needed."""
    keys = list(grid)
    gpu = df["gpu_hours"].notna().any()
    head = [*keys, metric_of(metric).column, "steps", "GPU-hours" if gpu else "wall s",
            "best minus [CI]", "verdict", "seeds needed"]
    lines = [f"# {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in df.to_dict("records"):
        score = _fmt(r["mean"]) + (f" ± {_fmt(r['std'])}" if _fmt(r["std"]) else "")
        if r["selected"]:
            score = f"**{score}**"
        versus = ("" if _fmt(r["best_minus"]) == "" else
                  f"{r['best_minus']:+.2f} [{r['best_minus_ci_low']:+.2f}, {r['best_minus_ci_high']:+.2f}]")
        cells = [*_ticks([r[k] for k in keys]), score, r["steps"],
                 _fmt(r["gpu_hours"], 3) if gpu else _fmt(r["wall_s"], 1), versus, r["verdict"],
                 _fmt(r["seeds_needed"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", *notes]) + "\n"


def write(df, grid: dict[str, list], csv_path, md_path, png_path, title: str, notes: Sequence[str] = (),
          metric: str = "stsb_dev") -> None:
    """The table as CSV and markdown, and its figure (:func:`draw`)."""
    from cselab.io import open_atomic, write_text

    with open_atomic(csv_path) as fh:
        df.to_csv(fh, index=False)
    write_text(md_path, to_markdown(df, grid, title, notes, metric))
    draw(df, grid, png_path, title)


def _ticks(values: list) -> list[str]:
    """Grid values as the table and the axes show them; a null value (``d0: null``, NaN once in a
    DataFrame: a config refuses NaN itself) as the config spells it."""
    return ["null" if v is None or (isinstance(v, float) and v != v) else f"{v:g}" if isinstance(v, float) else str(v)
            for v in values]


def draw(df, grid: dict[str, list], png_path, title: str) -> None:
    """A two-dimensional grid: a heatmap of the mean (each cell: mean ± std; the selected point
    framed); one dimension: the mean with its standard deviation as error bars against the value;
    more: the same against the points."""
    from matplotlib.figure import Figure

    from cselab.io import open_atomic

    keys = list(grid)
    best = df[df["selected"]].iloc[0]
    if len(keys) == 2:
        fig = Figure(figsize=(1.4 * len(grid[keys[1]]) + 2.2, 1.0 * len(grid[keys[0]]) + 1.6))
        ax = fig.add_subplot(1, 1, 1)
        cell = np.full((len(grid[keys[0]]), len(grid[keys[1]])), np.nan)
        text = {}
        for k, r in enumerate(df.to_dict("records")):  # the points in grid order: the product of the values
            i, j = divmod(k, len(grid[keys[1]]))
            cell[i, j] = r["mean"]
            text[i, j] = _fmt(r["mean"]) + (f"\n± {_fmt(r['std'])}" if _fmt(r["std"]) else "")
        image = ax.imshow(cell, cmap="viridis", aspect="auto")
        low, high = np.nanmin(cell), np.nanmax(cell)
        for (i, j), label in text.items():  # dark text on the bright end of the colour map
            bright = high > low and (cell[i, j] - low) / (high - low) > 0.6
            ax.text(j, i, label, ha="center", va="center", fontsize=8, color="black" if bright else "white")
        ax.add_patch(_frame(*divmod(int(np.flatnonzero(df["selected"])[0]), len(grid[keys[1]]))))
        ax.set_xticks(range(len(grid[keys[1]])), _ticks(grid[keys[1]]))
        ax.set_yticks(range(len(grid[keys[0]])), _ticks(grid[keys[0]]))
        ax.set_xlabel(keys[1])
        ax.set_ylabel(keys[0])
        fig.colorbar(image, ax=ax, label="mean over seeds")
    else:
        fig = Figure(figsize=(max(4.0, 0.9 * len(df) + 1.5), 3.4))
        ax = fig.add_subplot(1, 1, 1)
        one = len(keys) == 1 and all(isinstance(v, (int, float)) for v in grid[keys[0]])
        x = list(df[keys[0]]) if one else list(range(len(df)))
        ax.errorbar(x, df["mean"], yerr=df["std"].fillna(0), fmt="o-", capsize=3)
        ax.plot([x[int(np.flatnonzero(df["selected"])[0])]], [best["mean"]], "r*", ms=12, label="selected")
        if one and min(grid[keys[0]]) > 0 and max(grid[keys[0]]) >= 10 * min(grid[keys[0]]):
            ax.set_xscale("log")
        if not one:
            ax.set_xticks(x, [", ".join(_ticks([r[k] for k in keys])) for r in df.to_dict("records")],
                          rotation=30, ha="right", fontsize=7)
        ax.set_xlabel(keys[0] if one else ", ".join(keys))
        ax.set_ylabel("mean over seeds (± std)")
        ax.legend(fontsize=7)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    with open_atomic(png_path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=150, bbox_inches="tight", metadata={"Software": None})


def _frame(i: int, j: int):
    from matplotlib.patches import Rectangle

    return Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2.5)


def read_winner(csv_path) -> dict:
    """The selected point of a written sweep table (``results/sweep_<name>.csv``), as a table
    that shows it needs it: ``{"experiment", "mean", "compared", "distinguishable"}`` (how many
    other points it was compared with, and told apart from). Read with :mod:`csv`: the workflow
    calls it when it plans."""
    import csv

    with open(csv_path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    best = [r for r in rows if r["selected"] == "True"]
    if len(best) != 1:
        raise ValueError(f"{csv_path}: {len(best)} selected points, not one; rebuild it (snakemake --forcerun sweep)")
    verdicts = [r["verdict"] for r in rows]
    return {"experiment": best[0]["experiment"], "mean": float(best[0]["mean"]),
            "compared": sum(v in (DISTINGUISHABLE, NOT_DISTINGUISHABLE) for v in verdicts),
            "distinguishable": verdicts.count(DISTINGUISHABLE)}


#: an experiment entry's keys the winner keeps (:class:`cselab.settings.entries.Experiment`)
ENTRY_KEYS = ("plm", "method", "options", "training", "auxiliaries", "weight")


def best_entry(experiment: dict, seeds: Sequence[int]) -> dict:
    """The selected point's experiment as an entry to paste under ``experiments:`` (its PLM,
    method, the overrides it has, and the sweep's seeds)."""
    entry = {k: experiment[k] for k in ENTRY_KEYS if experiment.get(k) not in (None, {}, [])}
    return {**entry, "seeds": [int(s) for s in seeds]}


def write_best(path, sweep: str, name: str, entry: dict, values: dict, metric: str, mean: float) -> None:
    """``results/sweep_<name>.best.yaml``: ``{<experiment name>: <entry>}`` (a point named by its
    values, ``<base>@lr=...``, as ``<sweep>-best``: an entry's name has no ``@``), a comment above
    it saying where it came from."""
    import yaml

    from cselab.io import write_text

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):  # a point's own name (a@lr=...) is no entry name
        name = f"{sweep}-best"
    head = (f"# The selected point of sweep {sweep} ({', '.join(f'{k}={v}' for k, v in values.items())}): "
            f"{metric} mean {mean:.2f}.\n# Paste under experiments: (results/sweep_{sweep}.md says whether it is "
            "distinguishable from the runners-up).\n")
    write_text(path, head + yaml.safe_dump({name: entry}, sort_keys=False, default_flow_style=False))
