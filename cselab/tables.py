"""Result tables: our numbers (mean over seeds) with the paper's number beside each."""

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
            rec[col] = round(float(np.mean([r["scores"][col] for r in group])), digits)
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


def to_markdown(df: pd.DataFrame, columns: Sequence[str], title: str = "", digits: int = 2) -> str:
    """Render with 'ours (paper)' cells."""
    cols = list(columns) + (["Avg"] if "Avg" in df.columns else [])
    header = ["PLM", "method", "experiment"] + cols + ["note"]
    lines = [f"# {title}", ""] if title else []
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def cell(row, col):
        ours = f"{row[col]:.{digits}f}"
        if col == "Avg" and pd.notna(row.get("Avg_std")):
            ours += f" ± {row['Avg_std']:.{digits}f}"
        paper = row.get(f"{col}_paper")
        return f"{ours} ({paper:.{digits}f})" if paper is not None and pd.notna(paper) else ours

    for _, row in df.iterrows():
        cells = [row["plm"], row["method"], row["experiment"]] + [cell(row, c) for c in cols] + [row["note"] or ""]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines += ["", "Cells: ours (paper). Ours is the mean over seeds; Avg ± standard deviation over seeds."]
    return "\n".join(lines) + "\n"


def write(df: pd.DataFrame, columns: Sequence[str], csv_path: Path, md_path: Path, title: str, digits: int = 2) -> None:
    Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(csv_path, index=False)
    Path(md_path).write_text(to_markdown(df, columns, title, digits))
