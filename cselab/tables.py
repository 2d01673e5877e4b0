"""Result tables: our numbers (mean ± std over seeds) with the paper's number beside each, and
for every method its paired difference to SimCSE on the same PLM with a bootstrap confidence
interval over the evaluation pairs (the papers report single runs; this says whether a
difference is real)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from cselab.published import lookup_any


def score_table(rows: list[dict], columns: Sequence[str], sources: Sequence[tuple[str, str]],
                average: bool = True, digits: int = 2) -> pd.DataFrame:
    """One row per experiment name (PLM x method), averaged over its seeds.

    ``rows``: one dict per experiment id with keys ``name``, ``plm``, ``model``, ``method``,
    ``objective``, ``options``, ``seed`` and ``scores`` (column -> value). ``sources``: the
    (paper, table) pairs whose published numbers may stand beside ours; the first matching
    setting wins. Columns: each metric, then ``<metric>_paper``; with ``average``, also
    ``Avg``, ``Avg_std`` (over seeds), ``Avg_paper`` and ``Avg_gap`` (ours - paper).
    """
    out, order = [], list(dict.fromkeys(r["name"] for r in rows))
    for name in order:
        group = [r for r in rows if r["name"] == name]
        first = group[0]
        entry, note = lookup_any(sources, first["model"], first["objective"], first["options"])
        paper = entry["scores"] if entry else {}
        rec = {"plm": first["plm"], "model": first["model"], "method": first["method"], "experiment": name,
               "seeds": " ".join(str(r["seed"]) for r in group if r["seed"] is not None) or "-"}
        for col in columns:
            values = [r["scores"][col] for r in group]
            rec[col] = round(float(np.mean(values)), digits)
            rec[f"{col}_std"] = round(float(np.std(values, ddof=1)), digits) if len(values) > 1 else None
            rec[f"{col}_paper"] = paper.get(col)
        if average:
            avgs = [float(np.mean([r["scores"][c] for c in columns])) for r in group]
            rec["Avg"] = round(float(np.mean(avgs)), digits)
            rec["Avg_std"] = round(float(np.std(avgs, ddof=1)), digits) if len(avgs) > 1 else None
            rec["Avg_paper"] = paper.get("Avg")
            rec["Avg_gap"] = round(rec["Avg"] - paper["Avg"], digits) if paper.get("Avg") is not None else None
        rec["note"] = note
        out.append(rec)
    return pd.DataFrame(out)


def add_comparisons(df: pd.DataFrame, rows: list[dict], columns: Sequence[str], average: bool = True,
                    n_boot: int = 1000, confidence: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Each trained non-SimCSE experiment against SimCSE on the same PLM (the table's first such row).

    Adds ``baseline``, ``diff`` (ours - baseline: the table's Avg, or its single column, mean over
    seeds), ``diff_ci_low``/``diff_ci_high`` (paired bootstrap over the evaluation pairs, resampled
    within each task, the same resamples for both models and all seeds), ``p_value`` and
    ``significant`` (the interval excludes 0). Rows need ``pairs``: column -> (gold, pred).
    """
    from cselab.stats import paired_bootstrap

    by_name: dict[str, list[dict]] = {}
    for r in rows:
        by_name.setdefault(r["name"], []).append(r)
    simcse = {}
    for name, group in by_name.items():
        if group[0]["objective"] == "simcse" and all(r["pairs"] is not None for r in group):
            simcse.setdefault(group[0]["plm"], name)
    cols = list(columns) if average else list(columns)[:1]
    out = {k: [] for k in ("baseline", "diff", "diff_ci_low", "diff_ci_high", "p_value", "significant")}
    for name in df["experiment"]:
        group, base = by_name[name], simcse.get(by_name[name][0]["plm"])
        if (base is None or base == name or group[0]["seed"] is None or group[0]["objective"] == "simcse"
                or any(r["pairs"] is None for r in group)):
            for k in out:
                out[k].append(None)
            continue
        gold = {c: by_name[base][0]["pairs"][c][0] for c in cols}
        res = paired_bootstrap(gold, [{c: r["pairs"][c][1] for c in cols} for r in group],
                               [{c: r["pairs"][c][1] for c in cols} for r in by_name[base]],
                               n_boot=n_boot, seed=seed, confidence=confidence, average=True)
        out["baseline"].append(base)
        out["diff"].append(round(res["diff"], 2))
        out["diff_ci_low"].append(round(res["ci_low"], 2))
        out["diff_ci_high"].append(round(res["ci_high"], 2))
        out["p_value"].append(round(res["p_value"], 4))
        out["significant"].append(bool(res["significant"]))
    return df.assign(**out)


def to_markdown(df: pd.DataFrame, columns: Sequence[str], title: str = "", digits: int = 2) -> str:
    """Render with 'ours (paper)' cells."""
    cols = list(columns) + (["Avg"] if "Avg" in df.columns else [])
    compare = "diff" in df.columns and df["diff"].notna().any()
    header = ["PLM", "method", "experiment"] + cols + (["vs SimCSE [CI]"] if compare else []) + ["note"]
    lines = [f"# {title}", ""] if title else []
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def cell(row, col):
        ours = f"{row[col]:.{digits}f}"
        std = row.get(f"{col}_std")
        if std is not None and pd.notna(std):
            ours += f" ± {std:.{digits}f}"
        paper = row.get(f"{col}_paper")
        return f"{ours} ({paper:.{digits}f})" if paper is not None and pd.notna(paper) else ours

    for _, row in df.iterrows():
        cells = [row["plm"], row["method"], row["experiment"]] + [cell(row, c) for c in cols]
        if compare:
            cells.append(f"{row['diff']:+.2f} [{row['diff_ci_low']:+.2f}, {row['diff_ci_high']:+.2f}]"
                         + ("*" if row["significant"] else "") if pd.notna(row["diff"]) else "")
        lines.append("| " + " | ".join(str(c) for c in cells + [row["note"] or ""]) + " |")
    lines += ["", "Cells: ours (paper). Ours is the mean over seeds ± standard deviation over seeds."]
    if compare:
        lines += ["vs SimCSE: ours minus SimCSE on the same PLM (Avg, or the single column), with the paired "
                  "bootstrap confidence interval over the evaluation pairs; * = the interval excludes 0."]
    return "\n".join(lines) + "\n"


def write(df: pd.DataFrame, columns: Sequence[str], csv_path: Path, md_path: Path, title: str, digits: int = 2) -> None:
    Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(csv_path, index=False)
    Path(md_path).write_text(to_markdown(df, columns, title, digits))
