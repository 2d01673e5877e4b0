"""Training objectives: positive construction + loss, one module each, found by name.

Every method trains with the same encoder and loop (``cselab.train``); what differs is the
:class:`Objective`. To add a method, write a module here with a subclass decorated by
``@register("name")`` and give it an entry under ``methods:`` in the config.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, ClassVar

import torch
from torch import nn

from cselab.errors import ConfigError

OBJECTIVES: dict[str, type["Objective"]] = {}
_MODULES = ("simcse", "compcse")


def register(name: str):
    def wrap(cls):
        cls.name = name
        OBJECTIVES[name] = cls
        return cls
    return wrap


class Objective(nn.Module):
    """Base class. ``Options`` is a dataclass of the objective's settings (config ``options``)."""

    name: ClassVar[str] = ""

    @dataclasses.dataclass
    class Options:
        pass

    def __init__(self, options: dict[str, Any], hidden_size: int, temperature: float):
        super().__init__()
        self.options = self.check_options(options)
        self.hidden_size, self.temperature = hidden_size, temperature

    @classmethod
    def check_options(cls, options: dict[str, Any], where: str = "options"):
        """Build ``Options`` from a dict; unknown keys or bad values raise ConfigError naming them."""
        fields = {f.name for f in dataclasses.fields(cls.Options)}
        unknown = sorted(set(options) - fields)
        if unknown:
            raise ConfigError(f"unknown config key '{where}.{unknown[0]}' for objective {cls.name!r}; "
                              f"valid options: {', '.join(sorted(fields)) or '(none)'}")
        opts = cls.Options(**options)
        problem = cls.validate_options(opts)
        if problem:
            key, msg = problem
            raise ConfigError(f"config key '{where}.{key}': {msg}")
        return opts

    @classmethod
    def validate_options(cls, options) -> tuple[str, str] | None:
        """Return (key, message) for an invalid option value, or None."""
        return None

    def forward(self, encoder, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """Return (loss, extra scalars to log) for one batch of tokenised sentences."""
        raise NotImplementedError


def objective_class(name: str) -> type[Objective]:
    if name not in OBJECTIVES:
        raise ConfigError(f"unknown objective {name!r}; valid objectives: {', '.join(sorted(OBJECTIVES))}")
    return OBJECTIVES[name]


for _m in _MODULES:
    importlib.import_module(f"cselab.objectives.{_m}")
