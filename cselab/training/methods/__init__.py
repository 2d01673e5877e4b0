"""The method contract: what one training method brings to the shared loop.

A method is one module in this folder, found by scanning it (no list to edit), plus an entry
under ``methods:`` in the config. A :class:`Method` subclass with a ``name`` registers itself;
what the config sets of it (name, roles, ``Options``, ``training_keys``, ``requires``) it
inherits from its declaration in :mod:`cselab.training.method_config` (``class SimCSE(SimCSEConfig,
Method)``), which the workflow reads without importing torch (a method may declare them itself
too: the workflow then imports the methods to plan). It receives a :class:`Context` and owns

- its training head(s) (:func:`cselab.models.heads.make_head`) and any extra networks:
  trainable ones are ordinary submodules (optimised and checkpointed), fixed inputs are
  registered with :meth:`Method.freeze` (no gradients, not in the optimizer, not in the
  resumable state, moved to the device with the method);
- its parameter groups (:meth:`Method.param_groups`, an own learning rate allowed);
- :meth:`Method.prepare`, run on every batch outside the forward and without gradients
  (masking, splitting);
- :meth:`Method.forward`, returning named loss terms and extra scalars (:class:`Output`);
- the upstream artifacts it needs (:meth:`Method.requires`: a name under ``pretraining:`` in the
  config per role), which the workflow turns into rule dependencies; their local paths
  arrive in ``Context.artifacts``;
- for a pretraining stage, :meth:`Method.export`: what it leaves for later stages.

An experiment trains one primary method plus any number of weighted auxiliary methods
(:class:`Objective`); the primary publishes what auxiliaries need (the sentence embedding of
each view) in the ``shared`` dict it receives.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from cselab.data.tokens import TokenizedCorpus
from cselab.errors import ConfigError
from cselab.models import keyed
from cselab.settings import TrainingSettings
from cselab.settings.spec import ExperimentSpec
from cselab.training.chunks import Runner
from cselab.training.diagnostics import view_cosine
from cselab.training.method_config import (  # noqa: F401 (the contract's names, used by the methods)
    POSITIVE, RATIO, MethodConfig, option, required_artifacts, spec_components)

_REGISTRY: dict[str, type["Method"]] = {}
_SCANNED = False


def registry() -> dict[str, type["Method"]]:
    """Every method in this folder by name (the folder is scanned once)."""
    global _SCANNED
    if not _SCANNED:
        for module in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{module.name}")
        _SCANNED = True
    return _REGISTRY


def method_class(name: str, where: str = "objective") -> type["Method"]:
    """Method ``name``'s implementation: in this folder, or built by its declaration (a plugin's
    :meth:`MethodConfig.implementation`, which registers it)."""
    from cselab.training.method_config import _CONFIGS

    methods = registry()
    if name not in methods and name in _CONFIGS:
        built = _CONFIGS[name].implementation()
        if built is not None:
            methods.setdefault(name, built)
    if name not in methods and name in _CONFIGS:
        raise ConfigError(f"config key '{where}': method {name!r} is declared in {_CONFIGS[name].__module__} "
                          "without an implementation: a Method subclass here, or its declaration's implementation()")
    if name not in methods:
        valid = sorted(set(methods) | set(_CONFIGS))
        raise ConfigError(f"config key '{where}': unknown method {name!r}; valid methods: {', '.join(valid)}")
    return methods[name]


@dataclass
class Context:
    """What a method is built from."""

    encoder: nn.Module                 # the sentence encoder the loop trains (backbone + pooler)
    options: Any                       # the method's validated ``Options``
    training: MethodSettings           # the experiment's training settings, typed (a dict given is typed)
    artifacts: dict[str, Path] = field(default_factory=dict)  # declared upstream artifacts
    model_dir: Path | None = None      # the PLM's local folder (for a second copy of it)
    runner: Runner = field(default_factory=Runner)  # the step's network runs (keyed dropout, chunks)

    def __post_init__(self):
        if isinstance(self.training, dict):  # a test's or a script's plain settings
            self.training = MethodSettings(self.training)

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


class Method(MethodConfig, nn.Module):
    """Base class; see the module docstring. What the config sets (``name``, ``roles``,
    ``Options``, ``training_keys``, ``requires``, ...) is :class:`MethodConfig`'s."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # an implementation of a method (its own name, or its declaration's) that none it extends implements
        if cls.__dict__.get("name") or (cls.name and all(base.name != cls.name for base in cls.__mro__[1:]
                                                          if issubclass(base, Method))):
            _REGISTRY[cls.name] = cls

    def __init__(self, ctx: Context):
        super().__init__()
        self.ctx = ctx
        self.options = ctx.options
        object.__setattr__(self, "_frozen", {})

    # -- networks ---------------------------------------------------------------------------

    def freeze(self, name: str, module: nn.Module, train_mode: bool = False) -> nn.Module:
        """Keep ``module`` as a fixed input: no gradients, outside the optimizer and the
        resumable state. ``train_mode`` keeps its dropout active while the method trains."""
        module.requires_grad_(False)
        self._frozen[name] = (module, train_mode)
        object.__setattr__(self, name, module)
        return module

    def frozen(self) -> dict[str, nn.Module]:
        return {name: module for name, (module, _) in self._frozen.items()}

    def __setattr__(self, name, value):
        if name in self.__dict__.get("_frozen", ()):  # ``self.x = self.freeze("x", ...)``: stays unregistered
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        for module, _ in self._frozen.values():
            module._apply(fn)
        return self

    def train(self, mode: bool = True):
        super().train(mode)
        for module, train_mode in self._frozen.values():
            module.train(mode and train_mode)
        return self

    def param_groups(self, lr: float) -> list[dict]:
        """Optimizer groups of the method's own trainable parameters (default: one, at ``lr``)."""
        params = [p for p in self.parameters() if p.requires_grad]
        return [{"params": params, "lr": lr}] if params else []

    # -- training ---------------------------------------------------------------------------

    def attach_corpus(self, sentences: list[str], corpus: TokenizedCorpus,
                      tokenize: Callable[[list[str]], TokenizedCorpus]) -> None:
        """Called once before training with the corpus's sentences and their token ids (same
        order), for methods that precompute per-sentence inputs: ``batch["index"]`` (a CPU
        tensor) selects them, :meth:`TokenizedCorpus.batch` pads them without a Python loop.
        ``tokenize(texts)`` tokenises other texts the same way, through the token cache."""

    def prepare(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Add inputs to a batch (``input_ids``, ``attention_mask``; ``index`` and ``lengths``
        on the host) before the forward."""
        return batch

    def forward(self, batch: dict[str, torch.Tensor], shared: dict[str, Any]) -> Output:
        raise NotImplementedError

    def export(self, out_dir: Path) -> None:
        """A pretraining stage writes the artifact later stages read (see :meth:`requires`)."""
        raise NotImplementedError(f"method {self.name!r} is not a pretraining stage")


class Objective(nn.Module):
    """An experiment's objective: a primary method plus weighted auxiliaries, each a :class:`Method`.

    ``total = w_0 * sum(primary terms) + sum_k w_k * sum(terms of auxiliary k)``; every term is
    reported by name (an auxiliary's terms keep their names; a clash gets the method's name
    as prefix), and so is ``total``.
    """

    def __init__(self, components: list[tuple[str, float, Method]], runner: Runner | None = None):
        super().__init__()
        self.runner = runner or Runner()
        self.names = [name for name, _, _ in components]
        self.weights = [float(w) for _, w, _ in components]
        self.components = nn.ModuleList(m for _, _, m in components)

    @property
    def primary(self) -> Method:
        return self.components[0]

    def param_groups(self, lr: float) -> list[dict]:
        return [g for m in self.components for g in m.param_groups(lr)]

    def frozen(self) -> dict[str, nn.Module]:
        return {f"{n}.{k}": v for n, m in zip(self.names, self.components) for k, v in m.frozen().items()}

    def attach_corpus(self, sentences: list[str], corpus: TokenizedCorpus,
                      tokenize: Callable[[list[str]], TokenizedCorpus]) -> None:
        for m in self.components:
            m.attach_corpus(sentences, corpus, tokenize)

    def prepare(self, batch: dict) -> dict:
        for m in self.components:
            batch = m.prepare(batch)
        return batch

    def forward(self, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict]:
        """Return ``(total, {term: value, ..., "total": total}, scalars)``."""
        shared: dict[str, Any] = {}
        terms: dict[str, torch.Tensor] = {}
        scalars: dict = {}
        total = None
        for name, weight, method in zip(self.names, self.weights, self.components):
            out = method(batch, shared)
            for key, value in out.losses.items():
                terms[f"{name}.{key}" if key in terms else key] = value
                total = weight * value if total is None else total + weight * value
            scalars.update(out.scalars)
        if "view_cosine" in shared:  # a training diagnostic (cselab.training.diagnostics)
            scalars.setdefault("view_cosine", shared["view_cosine"])
        terms["total"] = total
        return total, terms, scalars


def dropout_views(ctx: Context, head: nn.Module, batch: dict, shared: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Unsupervised SimCSE's positives: the batch encoded twice in one pass (dropout differs per
    row), through ``head``; returns the two views and publishes them in ``shared`` (``input_ids``
    and ``attention_mask`` of both views, ``pooled`` before the head, ``projected`` after it, and
    the views' mean cosine ``view_cosine``, a diagnostic)."""
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


class MethodSettings:
    """The training settings a method reads, typed (``ctx.training.temperature``). A job's spec
    holds the settings its methods declare (``training_keys``) and no operational ones: one a method
    reads but did not declare is one message naming it, not a silent default; an operational
    setting (speed, memory) reads as its value, or its default when the spec leaves it out."""

    def __init__(self, settings: dict | TrainingSettings, method: str | None = None, given: tuple[str, ...] = ()):
        """``settings``: a spec's training dict, or typed with the keys the spec states (``given``)."""
        from cselab.settings import training_settings

        typed = isinstance(settings, TrainingSettings)
        self._given, self._method = frozenset(given if typed else settings), method
        self._typed = settings if typed else training_settings(dict(settings))

    def __getattr__(self, key: str):
        from cselab.settings.training import OPERATIONAL

        if key.startswith("_"):
            raise AttributeError(key)
        if self._method is not None and key not in self._given and key not in OPERATIONAL:
            raise ConfigError(f"method {self._method!r} reads the training setting {key!r}, which it does not "
                              "declare: add it to its training_keys (a job's spec holds the settings its methods "
                              "declare)")
        return getattr(self._typed, key)


def build_objective(spec: ExperimentSpec | dict, encoder: nn.Module, artifacts: dict[str, Path] | None = None,
                    model_dir: Path | None = None) -> Objective:
    """The objective of an experiment ``spec`` (:class:`~cselab.settings.spec.ExperimentSpec`,
    or the dict of :func:`cselab.pipeline.config.experiment_spec`)."""
    spec = ExperimentSpec.of(spec)
    components = []
    runner = Runner(spec.training.chunk_size, keyed=spec.training.keyed_dropout)
    for entry in spec.components():
        cls = method_class(entry.method)
        options = cls.check_options(entry.options)
        own = {role: Path(path) for role, path in (artifacts or {}).items() if role in cls.requires(options)}
        settings = MethodSettings(spec.training, cls.name, given=spec.training_keys)
        ctx = Context(encoder=encoder, options=options, training=settings, artifacts=own, model_dir=model_dir,
                      runner=runner)
        components.append((entry.method, entry.weight, cls(ctx)))
    objective = Objective(components, runner)
    keyed.install(encoder, "encoder")  # every trained network's dropout keyed by row (inactive outside a step)
    keyed.install(objective, "objective")
    for name, module in objective.frozen().items():
        keyed.install(module, f"frozen/{name}")
    return objective
