"""A job's experiment spec, typed: what :func:`cselab.pipeline.experiments.experiment_spec` and
:func:`~cselab.pipeline.experiments.pretraining_spec` build as a plain dict, read by attribute.

The dict stays what the workflow passes as a training job's params (Snakemake's rerun trigger),
what its checkpoints fingerprint and what its manifests and MLflow params record: a job turns it
into an :class:`ExperimentSpec` where it starts (:meth:`ExperimentSpec.of`) and writes
:meth:`ExperimentSpec.to_dict`, the same dict (its keys, their order and their values), wherever
it records the spec. ``training`` is typed (:class:`~cselab.settings.training.Training`): a key
the spec leaves out (a job's spec holds only the settings its output depends on: an untrained
experiment none, a pretraining stage no STS-B dev scoring) reads as its default, and
:meth:`ExperimentSpec.holds` tells whether the spec states it. ``options`` and each auxiliary's
entry stay mappings: each method types its own (``MethodConfig.check_options``).

A spec written by hand (a test's) may leave out any key but ``objective``; the typed spec then
reads the default of the field, and :meth:`ExperimentSpec.to_dict` gives back only the keys given.
Imports no torch (the workflow reads it when it plans)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from typing import Any, Mapping

from cselab.errors import ConfigError
from cselab.settings.base import from_dict, to_plain
from cselab.settings.training import Training


@dataclasses.dataclass(frozen=True)
class Component:
    """One method a spec trains: the primary objective or an auxiliary one, with its weight and
    its options (the method's own, as configured)."""

    method: str
    weight: float
    options: Mapping[str, Any]


@functools.lru_cache(maxsize=1024)
def _training(plain: str) -> Training:
    """Typed training settings, cached by value (frozen, so shared: planning types a spec per row)."""
    return from_dict(Training, json.loads(plain), where="training")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExperimentSpec:
    """An experiment's (or a pretraining stage's) training job, typed; its mappings are read-only."""

    objective: str
    id: str = ""
    name: str = ""
    plm: str = ""
    model: str = ""
    method: str = ""
    weight: float = 1.0
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    auxiliaries: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    signature: str = ""
    training: Training = dataclasses.field(default_factory=Training)
    seed: int | None = None
    #: the training settings the spec states, in its order (the others read as their defaults)
    training_keys: tuple[str, ...] = ()
    #: the dict's keys in its order: :meth:`to_dict` gives back exactly these
    keys: tuple[str, ...] = dataclasses.field(default=(), repr=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], operational: Mapping[str, Any] | None = None) -> ExperimentSpec:
        """The typed spec of a spec dict (an unknown key or a missing ``objective`` raises
        ConfigError); ``operational``: the job's operational training settings, read as the
        spec's (``spec.training.devices``) but not stated by it (:meth:`to_dict` leaves them out)."""
        if not isinstance(d, Mapping):
            raise ConfigError(f"an experiment spec is a mapping, got {d!r}")
        fields = set(SPEC_KEYS)
        unknown = sorted(set(d) - fields)
        if unknown or "objective" not in d:
            problem = f"unknown key {unknown[0]!r}" if unknown else "no 'objective'"
            raise ConfigError(f"experiment spec {d.get('id', '')!r}: {problem}; its keys: {', '.join(SPEC_KEYS)}")
        training = d.get("training") or {}
        values = {k: copy.deepcopy(v) for k, v in d.items() if k != "training"}
        typed = _training(json.dumps({**training, **(operational or {})}, sort_keys=True, default=str))
        return cls(**values, training=typed, training_keys=tuple(training), keys=tuple(d))

    @classmethod
    def of(cls, spec: ExperimentSpec | Mapping[str, Any],
           operational: Mapping[str, Any] | None = None) -> ExperimentSpec:
        """``spec`` typed (a typed spec as it is), with ``operational`` settings where given."""
        if not isinstance(spec, ExperimentSpec):
            return cls.from_dict(spec, operational)
        if not operational:
            return spec
        plain = {k: to_plain(getattr(spec.training, k)) for k in spec.training_keys}
        return spec.with_training(_training(json.dumps({**plain, **operational}, sort_keys=True, default=str)))

    def to_dict(self) -> dict[str, Any]:
        """The spec dict it was built from: the same keys in the same order, the same values."""
        return {k: self.training_dict() if k == "training" else copy.deepcopy(getattr(self, k)) for k in self.keys}

    def training_dict(self) -> dict[str, Any]:
        """The training settings the spec states, as the dict's ``training``."""
        return {k: to_plain(getattr(self.training, k)) for k in self.training_keys}

    def holds(self, key: str) -> bool:
        """Whether the spec states the training setting ``key`` (a setting read only by the methods
        that declare it is left out of a spec whose methods do not read it)."""
        return key in self.training_keys

    @property
    def trained(self) -> bool:
        """Whether the spec trains anything (an untrained PLM's has no seed)."""
        return self.seed is not None

    def components(self) -> tuple[Component, ...]:
        """The methods it trains: the primary first, then the auxiliaries in order."""
        return (Component(self.objective, self.weight, self.options),
                *(Component(name, aux["weight"], aux.get("options", {})) for name, aux in self.auxiliaries.items()))

    def with_training(self, training: Training) -> ExperimentSpec:
        """The same spec reading ``training`` (e.g. with the job's operational settings); the
        settings it states, and so its dict, unchanged."""
        return dataclasses.replace(self, training=training)


#: a spec dict's keys, in the order experiment_spec's dicts have them
SPEC_KEYS = ("name", "plm", "model", "method", "objective", "weight", "options", "auxiliaries", "signature",
             "training", "id", "seed")


__all__ = ["Component", "ExperimentSpec", "SPEC_KEYS"]
