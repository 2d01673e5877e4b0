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
  as a settings dataclass (:func:`cselab.settings.base.setting` fields: each option's default,
  description and constraints, declared once) and optional checks of the experiments. Its draw
  function, ``check`` and ``values`` get the options typed (:meth:`FigureKind.typed`).

The workflow's config schema takes its ``kind`` enums and each figure's options from here
(:mod:`cselab.pipeline.config`), so a kind is added in one module and used in the config.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cselab.settings.base import default_of, fields, from_dict, schema_of, settings, to_plain
from cselab.settings.spec import ExperimentSpec

#: what a figure kind can read per experiment
READS = ("curve", "model", "stsb_dev")


@settings
class NoOptions:
    """The options of a figure kind that has none."""


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
    """A figure kind (see the module docstring). ``options``: its settings dataclass;
    ``draw(inputs, options, out)`` writes the figure; ``check(options, spec)`` returns why an
    experiment cannot be drawn (or None); ``values(options, spec)`` an experiment's x value (a
    sweep); each gets the figure's options typed (an ``options`` object) and the experiment typed
    (:class:`~cselab.settings.spec.ExperimentSpec`)."""

    name: str
    draw: Callable[[FigureInputs, Any, Out], Any]
    reads: tuple[str, ...] = ()
    trained: bool = False
    heldout: bool = False
    options: type = NoOptions
    check: Callable[[Any, ExperimentSpec], str | None] | None = None
    values: Callable[[Any, ExperimentSpec], float] | None = None

    def schema(self) -> dict:
        """The options' JSON schema (an object of the option keys only)."""
        return schema_of(self.options)

    def defaults(self) -> dict:
        """Option key -> its default, as plain config data (in declaration order)."""
        return {f.name: to_plain(default_of(f)) for f, _ in fields(self.options) if f.metadata.get("fill")}

    def typed(self, figure: dict, where: str = "figures"):
        """The options of a figure's config entry (its other keys left out) as the kind's
        ``options`` object."""
        names = {f.name for f in dataclasses.fields(self.options)}
        return from_dict(self.options, {k: v for k, v in figure.items() if k in names}, where=where)


_FIGURES: dict[str, FigureKind] = {}
_SCANNED = False


def figure_kind(name: str, *, reads: tuple[str, ...] | str = (), trained: bool = False, heldout: bool = False,
                options: type = NoOptions, check=None, values=None):
    """Register the decorated function as the draw function of figure kind ``name``; ``options``
    is a ``@settings`` dataclass of the kind's options (each a :func:`~cselab.settings.base.setting`
    with its default and constraints), the draw function gets an instance of it."""
    from cselab.settings.entries import Figure

    reads = (reads,) if isinstance(reads, str) else tuple(reads)
    unknown = [r for r in reads if r not in READS]
    if unknown:
        raise ValueError(f"figure kind {name!r} reads {unknown}; a kind reads any of {READS}")
    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise TypeError(f"figure kind {name!r}: options must be a @settings dataclass, got {options!r}")
    names = {f.name for f in dataclasses.fields(options)}
    taken = sorted(names & {f.name for f in dataclasses.fields(Figure)})
    if taken:
        raise ValueError(f"figure kind {name!r}: options {taken} are keys every figure has")
    if heldout and "holdout" not in names:
        raise ValueError(f"figure kind {name!r} reads the held-out slice: declare its 'holdout' option")

    def register(draw):
        _FIGURES[name] = FigureKind(name, draw, reads, trained, heldout, options, check, values)
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
