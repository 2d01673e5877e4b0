"""The figure kinds, one module per paper (:mod:`.compcse`, :mod:`.diffcse`, :mod:`.paradigm`):
each function writes the CSV a figure is drawn from, then the PNG, and each kind is registered
where it is drawn (:func:`cselab.reporting.kinds.figure_kind`; this folder is scanned, so a new
kind is one module, or a function in one, plus its config entry).

Figures are built with matplotlib's object API (``matplotlib.figure.Figure``, rendered by the
Agg canvas on save): headless, no pyplot global state, nothing to close. Every function returns
the CSV's dataframe. Shared here: :func:`new_figure`, :func:`save_figure`, :func:`curve_rows`,
:func:`figure_loss_terms` (a pretraining stage's curve). matplotlib is imported when a figure is
drawn, not with these modules: the workflow reads the kinds' declarations when it plans.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import pandas as pd

from cselab.errors import DataError
from cselab.io import open_atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_DPI = 150


def new_figure(**kwargs) -> Figure:
    """``matplotlib.figure.Figure(**kwargs)``, matplotlib imported on the first figure drawn."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def save_figure(fig: Figure, df: pd.DataFrame, out_png: str | Path, out_csv: str | Path) -> pd.DataFrame:
    """Write the CSV first, then the PNG."""
    with open_atomic(out_csv) as fh:
        df.to_csv(fh, index=False)
    with open_atomic(out_png, "wb") as fh:
        fig.savefig(fh, format="png", dpi=_DPI, bbox_inches="tight")
    return df


def label_axes(ax, xlabel: str, ylabel: str, title: str | None = None, legend: bool = True) -> None:
    """A one-panel figure's axis labels, legend and optional title, laid out."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if legend:
        ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    ax.figure.tight_layout()


def curve_rows(curves: Mapping[str, pd.DataFrame], columns: Sequence[str], max_step: int,
                what: str) -> pd.DataFrame:
    """Long table ``label, step, *columns`` of the measured steps <= ``max_step`` of each curve."""
    if not curves:
        raise ValueError(f"no curves to plot for the {what} figure")
    parts = []
    for label, df in curves.items():
        missing = [c for c in ("step", *columns) if c not in df.columns]
        if missing:
            raise DataError(f"training curve of {label!r} has no column(s) {missing}; the {what} figure "
                            "needs a run that logged them (re-run its training rule)")
        rows = df.loc[df["step"] <= max_step, ["step", *columns]].dropna()
        if rows.empty:
            raise DataError(f"training curve of {label!r} has no {'/'.join(columns)} measurement up to "
                            f"step {max_step}; train longer or evaluate more often")
        parts.append(rows.sort_values("step").assign(label=label))
    out = pd.concat(parts, ignore_index=True)[["label", "step", *columns]]
    out["step"] = out["step"].astype(int)
    return out


def figure_loss_terms(curve: pd.DataFrame, out_png: str | Path, title: str | None = None) -> None:
    """Every logged loss term (``loss``, ``loss.<term>``) against the step: a pretraining stage's
    curve, drawn beside the training curves."""
    columns = [c for c in curve.columns if c == "loss" or c.startswith("loss.")]
    rows = curve.dropna(subset=columns[:1]) if columns else curve
    fig = new_figure(figsize=(5.5, 3.6))
    ax = fig.add_subplot(1, 1, 1)
    for col in columns:
        ax.plot(rows["step"], rows[col], label=col)
    label_axes(ax, "step", "loss", title)
    with open_atomic(out_png, "wb") as fh:
        fig.savefig(fh, format="png", dpi=_DPI, bbox_inches="tight")
