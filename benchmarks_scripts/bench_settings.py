"""The training settings of a spec a benchmark builds by hand: ``config.yaml``'s ``training``
section (where each default is stated, once) with the benchmark's own values on top."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def training(**overrides) -> dict:
    return {**yaml.safe_load((ROOT / "config.yaml").read_text())["training"], **overrides}
