"""The built-in training methods, one module each, and what a method sees of the loop; imports no torch.

A method is one module in this folder, found by scanning it (no list to edit), plus an entry
under ``methods:`` in the config. Its class (a :class:`~cselab.training.method_config.MethodConfig`
subclass with a ``name``, which registers it) holds all of it: what the config sets of it (name,
roles, ``Options``, ``training_keys``, ``requires``), read when the workflow plans, and its training
code, whose bodies import torch (and the torch helpers: :mod:`cselab.training.losses`,
:mod:`cselab.training.mlm`, :mod:`cselab.models.heads`) when a job runs them; so scanning the
folder imports no torch. A job builds the ``nn.Module`` from the class
(:func:`cselab.training.objective.method_class`: the class with :class:`~cselab.training.objective.Method`
behind it, so ``super().__init__(ctx)`` reaches the contract's base). It receives a :class:`Context` and owns

- its training head(s) (:func:`cselab.models.heads.make_head`) and any extra networks:
  trainable ones are ordinary submodules (optimised and checkpointed), fixed inputs are
  registered with ``self.freeze(name, module)`` (no gradients, not in the optimizer, not in the
  resumable state, moved to the device with the method);
- its parameter groups (``param_groups(lr)``, an own learning rate allowed);
- ``prepare(batch)``, run on every batch outside the forward and without gradients (masking,
  splitting);
- ``forward(batch, shared)``, returning named loss terms and extra scalars (:class:`Output`);
- the upstream artifacts it needs (``requires(options)``: a name under ``pretraining:`` in the
  config per role), which the workflow turns into rule dependencies; their local paths
  arrive in ``Context.artifacts``;
- for a pretraining stage, ``export(out_dir)``: what it leaves for later stages.

An experiment trains one primary method plus any number of weighted auxiliary methods
(:class:`cselab.training.objective.Objective`); the primary publishes what auxiliaries need (the
sentence embedding of each view) in the ``shared`` dict it receives.

The lookups by name (:func:`find_config`, :func:`method_config`, :func:`method_names`, ...) are
here: the folder's methods and the plugins' (registered when the config's ``plugins:`` are imported).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from cselab.errors import ConfigError
from cselab.settings import training_settings
from cselab.settings.spec import Component, ExperimentSpec
from cselab.training.method_config import (  # noqa: F401 (the names a method module uses)
    POSITIVE, RATIO, MethodConfig, TorchModule, declared, declared_names, option)

if TYPE_CHECKING:
    import torch
    from torch import nn

    from cselab.training.chunks import Runner

_SCANNED = False


def registry() -> dict[str, type[MethodConfig]]:
    """Every method by name: this folder's (scanned once; no torch imported) and the plugins'."""
    global _SCANNED
    if not _SCANNED:
        for module in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{module.name}")
        _SCANNED = True
    return {name: declared(name) for name in declared_names()}


def find_config(name: str) -> type[MethodConfig] | None:
    """Method ``name`` (see :func:`method_config`), or None for no such method."""
    return declared(name) or registry().get(name)


def is_registered(name: str) -> bool:
    """Whether ``name`` is a method's (a built-in one or a plugin's)."""
    return find_config(name) is not None


def method_names() -> list[str]:
    """Every registered method's name."""
    return sorted(registry())


def method_config(name: str, where: str = "objective") -> type[MethodConfig]:
    """Method ``name``'s class (its declaration and its training code); an unknown name raises ConfigError."""
    found = find_config(name)
    if found is None:
        raise ConfigError(f"config key '{where}': unknown method {name!r}; valid methods: {', '.join(method_names())}")
    return found


def spec_components(spec) -> tuple[Component, ...]:
    """A spec's methods (an :class:`~cselab.settings.spec.ExperimentSpec` or its dict): the
    primary first, then the auxiliaries in order."""
    return ExperimentSpec.of(spec).components()


def required_artifacts(spec) -> dict[str, str]:
    """role -> ``pretraining:`` entry name, over all of an experiment's methods."""
    out: dict[str, str] = {}
    for entry in spec_components(spec):
        cls = method_config(entry.method)
        out.update(cls.requires(cls.check_options(entry.options)))
    return out


# -- what a method receives and returns ---------------------------------------------------------


@dataclass
class Context:
    """What a method is built from."""

    encoder: nn.Module                 # the sentence encoder the loop trains (backbone + pooler)
    options: Any                       # the method's validated ``Options``
    training: MethodSettings           # the training settings the method declared, typed (a dict given: all, typed)
    artifacts: dict[str, Path] = field(default_factory=dict)  # declared upstream artifacts
    model_dir: Path | None = None      # the PLM's local folder (for a second copy of it)
    runner: Runner | None = None       # the step's network runs (keyed dropout, chunks); None: a plain one

    def __post_init__(self):
        if isinstance(self.training, dict):  # a test's or a script's plain settings: every field, defaults filled in
            typed = training_settings(self.training)
            self.training = MethodSettings({f.name: getattr(typed, f.name) for f in fields(typed)})
        if self.runner is None:
            from cselab.training.chunks import Runner

            self.runner = Runner()

    def run(self, fn: Callable, *inputs: Any, **kwargs) -> Any:
        """A network run over rows (``inputs`` with one row per leading index): every run of a
        method's trained networks goes through here, so its dropout is keyed by row and a
        large batch can be cached in chunks (:mod:`cselab.training.chunks`). ``fn`` returns one
        row per input row."""
        return self.runner.run(fn, *inputs, **kwargs)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               lengths: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder's pooled embeddings of these rows, as a run (:meth:`run`); their real
        tokens are counted (``runner.tokens``: the MFU diagnostic's work)."""
        self.runner.count_tokens(lengths if lengths is not None else attention_mask.numel())
        return self.runner.run(self.encoder, input_ids, attention_mask, lengths)

    @property
    def tokenizer(self):
        return self.encoder.tokenizer

    @property
    def hidden_size(self) -> int:
        return self.encoder.hidden_size


@dataclass
class Output:
    """One batch's result: ``losses`` (named loss terms, summed into the total) and ``scalars``
    (anything else worth logging); both are averaged over the logging window."""

    losses: dict[str, torch.Tensor]
    scalars: dict[str, torch.Tensor | float] = field(default_factory=dict)


class MethodSettings:
    """The training settings a method declared (its ``training_keys``), and only those, typed
    (``ctx.training.temperature``): a read of another is one message naming the method and the
    setting, never a default. The config check refuses such a read first where it finds it in the
    method's code (``MethodConfig.training_reads``); a read by a computed name ends here, when the
    job builds the method. A test's or a script's plain dict holds its own keys (see :class:`Context`)."""

    def __init__(self, values: dict, method: str | None = None):
        self._values, self._method = dict(values), method

    @classmethod
    def declared(cls, spec: ExperimentSpec, method: type[MethodConfig], options) -> MethodSettings:
        """The settings of ``spec.training`` that ``method`` declares (at these ``options``); a spec
        that does not state one of them (its operational ones aside) was not made for this method."""
        from cselab.settings.training import OPERATIONAL

        keys = method.used_training_keys(options)
        missing = [k for k in keys if k not in OPERATIONAL and not spec.holds(k)]
        if missing:
            raise ConfigError(f"method {method.name!r} reads the training setting {missing[0]!r}, which the spec of "
                              f"{spec.id or spec.name or spec.objective!r} does not state: its spec holds the "
                              "settings its methods declare (training_keys)")
        return cls({k: getattr(spec.training, k) for k in keys}, method.name)

    def __getattr__(self, key: str):
        if key.startswith("_"):
            raise AttributeError(key)
        if key not in self._values:
            who = f"method {self._method!r}" if self._method else "this method"
            raise ConfigError(f"{who} reads the training setting {key!r}, which it does not declare: add it to "
                              f"its training_keys (it receives the settings it declares: "
                              f"{', '.join(self._values) or 'none'})")
        return self._values[key]


# -- views the methods share ----------------------------------------------------------------------


def dropout_views(ctx: Context, head: nn.Module, batch: dict, shared: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Unsupervised SimCSE's positives: the batch encoded twice in one pass (dropout differs per
    row), through ``head``; returns the two views and publishes them in ``shared`` (``input_ids``
    and ``attention_mask`` of both views, ``pooled`` before the head, ``projected`` after it, and
    the views' mean cosine ``view_cosine``, a diagnostic)."""
    from cselab.training.diagnostics import view_cosine

    n = batch["input_ids"].size(0)
    ids, mask = batch["input_ids"].repeat(2, 1), batch["attention_mask"].repeat(2, 1)
    pooled = ctx.encode(ids, mask, repeat_lengths(batch.get("lengths"), 2))
    z = head(pooled)
    shared.update(input_ids=ids, attention_mask=mask, pooled=pooled, projected=z,
                  view_cosine=view_cosine(z[:n], z[n:]))
    return z[:n], z[n:]


def repeat_lengths(lengths: torch.Tensor | None, copies: int) -> torch.Tensor | None:
    """A batch's host-side ``lengths`` (see :meth:`SentenceEncoder.forward`) for its rows
    repeated ``copies`` times, or None when the batch has none."""
    return None if lengths is None else lengths.repeat(copies)


def primary_views(shared: dict, key: str, rows: int, who: str, what: str, views: int) -> torch.Tensor:
    """What an auxiliary reads from the primary (``shared[key]``, one row per view of each
    sentence), or one clear message when the primary publishes nothing or another number of views."""
    value = shared.get(key)
    if value is None or value.size(0) != rows:
        got = "nothing" if value is None else f"{value.size(0)} rows"
        raise ConfigError(f"{who} needs the primary method's {what} of {views} views ({rows} rows) in "
                          f"shared['{key}'], got {got}; set options.views to the primary's number of views")
    return value
