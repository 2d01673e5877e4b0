"""The training diagnostics figure (any paper's runs; :mod:`cselab.training.diagnostics`): per run,
what its logging windows and its STS-B dev evaluations recorded, with the collapse alarms marked."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from cselab.reporting.figures import new_figure, save_figure
from cselab.reporting.kinds import FigureInputs, NoOptions, Out, figure_kind

#: (curve column, panel title): the logging windows' diagnostics, then the dev evaluations'
PANELS = (("view_cosine", "cosine of the two views"), ("duplicate_rate", "in-batch duplicate rate"),
          ("tokens_per_s", "real tokens / s"), ("anisotropy", "anisotropy (STS-B dev)"),
          ("effective_rank", "effective rank (STS-B dev)"), ("uniformity", "uniformity (STS-B dev)"))


def diagnostics_rows(curves: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Long rows ``label, step, metric, value, alarm`` of every diagnostic each curve logged
    (``alarm``: the collapse alarm went off at that dev evaluation)."""
    frames = []
    for label, curve in curves.items():
        alarm = curve["collapse_alarm"].fillna(0) if "collapse_alarm" in curve else pd.Series(0, index=curve.index)
        for column, _ in PANELS:
            if column in curve:
                logged = curve[column].notna()
                frames.append(pd.DataFrame({"label": label, "step": curve.loc[logged, "step"].astype(int),
                                            "metric": column, "value": curve.loc[logged, column],
                                            "alarm": alarm[logged].astype(bool)}))
    if not frames:
        return pd.DataFrame(columns=["label", "step", "metric", "value", "alarm"])
    return pd.concat(frames, ignore_index=True)


def figure_diagnostics(curves: Mapping[str, pd.DataFrame], out_png, out_csv, title=None) -> pd.DataFrame:
    """Six panels over training steps: the two views' cosine, the in-batch duplicate rate and the
    real tokens per second (logging windows); anisotropy, effective rank and uniformity of the
    STS-B dev embeddings (dev evaluations), each run a colour, collapse alarms as red crosses."""
    df = diagnostics_rows(curves)
    fig = new_figure(figsize=(12, 6.4))
    axes = [fig.add_subplot(2, 3, k + 1) for k in range(len(PANELS))]
    for ax, (column, name) in zip(axes, PANELS):
        for k, label in enumerate(curves):
            rows = df[(df["label"] == label) & (df["metric"] == column)]
            ax.plot(rows["step"], rows["value"], ".-", color=f"C{k}", label=label, ms=3)
            alarms = rows[rows["alarm"]]
            ax.plot(alarms["step"], alarms["value"], "x", color="red", ms=8)
        if df[df["metric"] == column].empty:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="0.5")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step")
    axes[0].legend(fontsize=7)
    if df["alarm"].any():
        axes[4].plot([], [], "x", color="red", label="collapse alarm")
        axes[4].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, df.replace({np.inf: np.nan}), out_png, out_csv)


@figure_kind("diagnostics", reads="curve", trained=True)
def draw_diagnostics(inputs: FigureInputs, options: NoOptions, out: Out):
    """The training diagnostics of the figure's runs, from their curves."""
    return figure_diagnostics(inputs.curves(), **out.kwargs())
