"""The training settings of a spec a benchmark builds by hand: ``config.yaml``'s ``training``
section (where each default is stated, once) with the benchmark's own values on top."""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

from cselab.io import load_yaml

ROOT = Path(__file__).resolve().parents[1]


@lru_cache(maxsize=1)
def _defaults() -> dict:
    """config.yaml's training section, read once per process (the acceptance command builds 47 specs)."""
    return load_yaml((ROOT / "config.yaml").read_text())["training"]


def training(**overrides) -> dict:
    return {**copy.deepcopy(_defaults()), **overrides}
