"""The methods as torch modules, built when a job trains them: :class:`Method` (the ``nn.Module``
base of every method), :func:`method_class` (a method's class with :class:`Method` behind it),
:class:`Objective` (an experiment's primary method plus its weighted auxiliaries) and
:func:`build_objective`. The methods themselves, and what they receive (``Context``, ``Output``),
are in :mod:`cselab.training.methods`, which imports no torch.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from cselab.data.tokens import TokenizedCorpus
from cselab.errors import ConfigError
from cselab.models import keyed
from cselab.settings.spec import ExperimentSpec
from cselab.training.chunks import Runner
from cselab.training.method_config import MethodConfig, behind
from cselab.training.methods import Context, MethodSettings, Output, method_config

class Method(MethodConfig, nn.Module):
    """The ``nn.Module`` base of every method (see :mod:`cselab.training.methods`): behind a
    method's class (:func:`method_class`), or subclassed directly by a method module that imports
    torch itself (which the workflow then imports when it plans)."""

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
        """A pretraining stage writes the artifact later stages read (see ``requires``)."""
        raise NotImplementedError(f"method {self.name!r} is not a pretraining stage")


def method_class(name: str, where: str = "objective") -> type[Method]:
    """Method ``name`` as an ``nn.Module`` class: its class with :class:`Method` behind it
    (:func:`~cselab.training.method_config.behind`, built once: the method's ``__init__``,
    ``prepare``, ``forward``, ... come first, its ``super().__init__(ctx)`` reaches :class:`Method`),
    the class its ``implementation()`` returns, or the class itself when it is a :class:`Method`."""
    cls = method_config(name, where)
    if issubclass(cls, Method):
        return cls
    built = _implementation(cls)
    if built is not None:
        return built
    if not callable(getattr(cls, "forward", None)):
        raise ConfigError(f"config key '{where}': method {name!r} ({cls.__module__}) has no forward(batch, shared), "
                          "nor an implementation() that returns its Method")
    return behind(cls, Method)


@functools.cache
def _implementation(cls: type[MethodConfig]) -> type[Method] | None:
    """``cls.implementation()``, called once (a plugin's class defines its ``Method`` there)."""
    return cls.implementation()


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

    def loss_units(self, batch: dict):
        """What a per-sentence objective's loss averages over in ``batch`` (its primary's ``loss_units``)."""
        return self.primary.loss_units(batch)

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


def build_objective(spec: ExperimentSpec | dict, encoder: nn.Module, artifacts: dict[str, Path] | None = None,
                    model_dir: Path | None = None) -> Objective:
    """The objective of an experiment ``spec`` (:class:`~cselab.settings.spec.ExperimentSpec`,
    or the dict of :func:`cselab.pipeline.config.experiment_spec`)."""
    spec = ExperimentSpec.of(spec)
    components = []
    chunk = spec.training.chunk_size  # auto: decided by the loop for the device (cselab/training/memory.py)
    runner = Runner(chunk if isinstance(chunk, int) else None, keyed=spec.training.keyed_dropout,
                    chunk_tokens=spec.training.chunk_tokens)
    for entry in spec.components():
        cls = method_class(entry.method)
        options = cls.check_options(entry.options)
        own = {role: Path(path) for role, path in (artifacts or {}).items() if role in cls.requires(options)}
        settings = MethodSettings.declared(spec, cls, options)
        ctx = Context(encoder=encoder, options=options, training=settings, artifacts=own, model_dir=model_dir,
                      runner=runner)
        components.append((entry.method, entry.weight, cls(ctx)))
    objective = Objective(components, runner)
    keyed.install(encoder, "encoder")  # every trained network's dropout keyed by row (inactive outside a step)
    keyed.install(objective, "objective")
    for name, module in objective.frozen().items():
        keyed.install(module, f"frozen/{name}")
    return objective
