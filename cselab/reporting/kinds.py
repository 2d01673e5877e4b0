"""The registries of table kinds and figure kinds: each kind is declared once, where it is drawn
or built, with what it reads, its options (and their defaults) and its draw function.

- A *table kind* (:class:`TableKind`, registered with ``@table_kind`` in
  :mod:`cselab.reporting.tables`, or in a plugin module) names the results each row reads, its
  columns (fixed, or from the evaluation settings), whether it averages them, its comparisons
  with SimCSE and any derived scores.
- A *figure kind* (:class:`FigureKind`) is registered with :func:`figure_kind` on its draw
  function in a module of :mod:`cselab.reporting.figures` (the folder is scanned, no list to
  edit): what it reads per experiment (``curve``, ``model``, ``stsb_dev``, or nothing for a
  simulation), whether it needs trained experiments or the held-out corpus slice, its options
  as JSON-schema properties with their defaults, and optional checks of the experiments.

The workflow's config schema takes its ``kind`` enums and each figure's options from here
(:mod:`cselab.pipeline.config`), so a kind is added in one module and used in the config.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

#: what a figure kind can read per experiment
READS = ("curve", "model", "stsb_dev")


@dataclass(frozen=True)
class Out:
    """Where a figure goes: its PNG, the CSV it is drawn from, its title; ``name`` (the figure's
    name in the config) keys what it encodes in the embedding cache."""

    png: Path
    csv: Path
    title: str | None = None
    name: str = "figure"

    def kwargs(self) -> dict:
        return {"out_png": self.png, "out_csv": self.csv, "title": self.title}


@dataclass
class FigureInputs:
    """What a figure's draw function gets: per legend label the experiment id and the files its
    kind reads (``files[label][read]``), the evaluation settings and embedding cache (for
    checkpoints), the SentEval tree and the held-out corpus slice where needed, and a sweep's
    x values (``values[label]``)."""

    labels: dict[str, str]
    files: dict[str, dict[str, Path]] = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    cache: Path | None = None
    senteval: Path | None = None
    heldout: Path | None = None
    values: dict[str, float] = field(default_factory=dict)

    def curves(self) -> dict:
        """Label -> the experiment's training curve (a DataFrame)."""
        import pandas as pd

        return {label: pd.read_csv(self.files[label]["curve"]) for label in self.labels}

    def models(self) -> dict:
        """Label -> a :class:`~cselab.evaluation.encoding.ModelEncoder` of the experiment's checkpoint
        (or the untrained PLM), through the embedding cache."""
        from cselab.evaluation.encoding import ModelEncoder
        from cselab.models.checkpoints import model_path

        return {label: ModelEncoder(model_path(self.files[label]["model"]), self.settings, self.cache)
                for label in self.labels}


@dataclass(frozen=True)
class FigureKind:
    """A figure kind (see the module docstring). ``draw(inputs, options, out)`` writes the figure;
    ``check(options, spec)`` returns why an experiment cannot be drawn (or None); ``values(options,
    spec)`` an experiment's x value (a sweep)."""

    name: str
    draw: Callable[[FigureInputs, dict, Out], Any]
    reads: tuple[str, ...] = ()
    trained: bool = False
    heldout: bool = False
    options: dict[str, dict] = field(default_factory=dict)
    check: Callable[[dict, dict], str | None] | None = None
    values: Callable[[dict, dict], float] | None = None

    def defaults(self) -> dict:
        return {key: prop["default"] for key, prop in self.options.items() if "default" in prop}


_FIGURES: dict[str, FigureKind] = {}
_SCANNED = False


def figure_kind(name: str, *, reads: tuple[str, ...] | str = (), trained: bool = False, heldout: bool = False,
                options: dict[str, dict] | None = None, check=None, values=None):
    """Register the decorated function as the draw function of figure kind ``name``."""
    reads = (reads,) if isinstance(reads, str) else tuple(reads)
    unknown = [r for r in reads if r not in READS]
    if unknown:
        raise ValueError(f"figure kind {name!r} reads {unknown}; a kind reads any of {READS}")

    def register(draw):
        _FIGURES[name] = FigureKind(name, draw, reads, trained, heldout, dict(options or {}), check, values)
        return draw

    return register


def figure_kinds() -> dict[str, FigureKind]:
    """Every figure kind, from the modules of :mod:`cselab.reporting.figures` (scanned once)."""
    global _SCANNED
    if not _SCANNED:
        from cselab.reporting import figures

        for module in pkgutil.iter_modules(figures.__path__):
            importlib.import_module(f"{figures.__name__}.{module.name}")
        _SCANNED = True
    return _FIGURES


def table_kinds() -> dict:
    """Every table kind (:data:`cselab.reporting.tables.TABLE_KINDS`)."""
    from cselab.reporting.tables import TABLE_KINDS

    return TABLE_KINDS
