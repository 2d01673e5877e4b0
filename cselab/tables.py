"""Result tables: our numbers (mean over seeds) with the paper's number beside each."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from cselab.published import STS_COLUMNS, lookup


def sts_table(rows: list[dict], paper: str, table: str) -> pd.DataFrame:
    """One row per experiment name (PLM x method), averaged over its seeds.

    ``rows``: one dict per experiment id with keys ``name``, ``plm``, ``model``, ``method``,
    ``objective``, ``options``, ``seed`` and ``scores`` (column -> Spearman x100). Columns:
    each task, then ``<task>_paper``; ``Avg``, ``Avg_std`` (over seeds), ``Avg_paper`` and
    ``Avg_gap`` (ours - paper).
    """
    out, order = [], []
    for r in rows:
        if r["name"] not in order:
            order.append(r["name"])
    for name in order:
        group = [r for r in rows if r["name"] == name]
        first = group[0]
        entry, note = lookup(paper, table, first["model"], first["objective"], first["options"])
        rec = {"plm": first["plm"], "model": first["model"], "method": first["method"], "experiment": name,
               "seeds": " ".join(str(r["seed"]) for r in group if r["seed"] is not None) or "-"}
        avgs = []
        for r in group:
            avgs.append(float(np.mean([r["scores"][c] for c in STS_COLUMNS])))
        for col in STS_COLUMNS:
            rec[col] = round(float(np.mean([r["scores"][col] for r in group])), 2)
            rec[f"{col}_paper"] = entry["scores"][col] if entry else None
        rec["Avg"] = round(float(np.mean(avgs)), 2)
        rec["Avg_std"] = round(float(np.std(avgs, ddof=1)), 2) if len(avgs) > 1 else None
        rec["Avg_paper"] = entry["scores"]["Avg"] if entry else None
        rec["Avg_gap"] = round(rec["Avg"] - entry["scores"]["Avg"], 2) if entry else None
        rec["note"] = note
        out.append(rec)
    return pd.DataFrame(out)


def to_markdown(df: pd.DataFrame, title: str = "") -> str:
    """Render with 'ours (paper)' cells."""
    cols = STS_COLUMNS + ["Avg"]
    header = ["PLM", "method", "experiment"] + cols + ["note"]
    lines = [f"# {title}", ""] if title else []
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def cell(row, col):
        ours = f"{row[col]:.2f}"
        if col == "Avg" and pd.notna(row.get("Avg_std")):
            ours += f" ± {row['Avg_std']:.2f}"
        paper = row.get(f"{col}_paper")
        return f"{ours} ({paper:.2f})" if paper is not None and pd.notna(paper) else ours

    for _, row in df.iterrows():
        cells = [row["plm"], row["method"], row["experiment"]] + [cell(row, c) for c in cols] + [row["note"] or ""]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines += ["", "Cells: ours (paper). Ours is the mean over seeds; Avg ± standard deviation over seeds."]
    return "\n".join(lines) + "\n"


def write(df: pd.DataFrame, csv_path: Path, md_path: Path, title: str) -> None:
    Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(csv_path, index=False)
    Path(md_path).write_text(to_markdown(df, title))
