"""Resumable training state: written atomically every ``training.checkpoint_steps`` steps, so a
job killed by a time limit or pre-emption continues where it stopped, bit for bit on CPU."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from cselab.io import atomic_path, link_or_copy

log = logging.getLogger(__name__)


def fingerprint(spec: dict, corpus_path: Path, artifacts: dict | None = None) -> str:
    """sha256 of the spec, the upstream artifacts' manifests and the corpus's size and first and
    last MiB (cheap, catches a new corpus)."""
    h = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode())
    for role, path in sorted((artifacts or {}).items()):
        manifest = Path(path) / "manifest.json"
        h.update(role.encode() + (manifest.read_bytes() if manifest.is_file() else str(path).encode()))
    size = Path(corpus_path).stat().st_size
    h.update(str(size).encode())
    with Path(corpus_path).open("rb") as fh:
        h.update(fh.read(1 << 20))
        fh.seek(max(0, size - (1 << 20)))
        h.update(fh.read(1 << 20))
    return h.hexdigest()


class Checkpoints:
    """The resumable state of one run: ``root/step-<N>/`` holding ``state.pt``, ``meta.json``
    (fingerprint, step) and ``best/`` (the best model so far, hard-linked where possible).

    A checkpoint is written to a hidden temporary directory and renamed into place
    (:func:`cselab.io.atomic_path`) before older ones are removed, so a kill at any point leaves
    the previous one usable.
    """

    def __init__(self, root: Path, fingerprint: str):
        self.root, self.fingerprint = Path(root), fingerprint

    def peek(self) -> Path | None:
        """The checkpoint :meth:`latest` would resume from, without removing anything."""
        found = sorted(p for p in self.root.glob("step-*") if (p / "meta.json").is_file())
        if not found:
            return None
        try:
            same = json.loads((found[-1] / "meta.json").read_text())["fingerprint"] == self.fingerprint
        except (OSError, ValueError, KeyError):
            return None
        return found[-1] if same else None

    def latest(self) -> Path | None:
        """The latest checkpoint if its fingerprint matches (older ones are removed); otherwise
        clear ``root`` and return None. One process of a job calls it, then all :meth:`read`."""
        found = sorted(p for p in self.root.glob("step-*") if (p / "meta.json").is_file())
        if not found:
            shutil.rmtree(self.root, ignore_errors=True)
            return None
        path = found[-1]
        if json.loads((path / "meta.json").read_text())["fingerprint"] != self.fingerprint:
            log.warning("discarding checkpoint %s: the training spec or corpus changed; starting over", path)
            shutil.rmtree(self.root, ignore_errors=True)
            return None
        self._remove_all_but(path)
        return path

    @staticmethod
    def read(path: Path) -> dict:
        state = torch.load(Path(path) / "state.pt", map_location="cpu", weights_only=False)  # our own file
        return {**state, "best_dir": Path(path) / "best"}

    def save(self, state: dict, best: Path | None) -> None:
        final = self.root / f"step-{state['step']:08d}"
        with atomic_path(final) as tmp:
            tmp.mkdir()
            with (tmp / "state.pt").open("wb") as fh:
                torch.save(state, fh)
                fh.flush()
                os.fsync(fh.fileno())
            if best is not None:
                shutil.copytree(best, tmp / "best", copy_function=link_or_copy)
            (tmp / "meta.json").write_text(json.dumps({"fingerprint": self.fingerprint, "step": state["step"]}))
        self._remove_all_but(final)

    def _remove_all_but(self, keep: Path) -> None:
        for p in self.root.iterdir():
            if p != keep:
                shutil.rmtree(p) if p.is_dir() else p.unlink()


def rng_state(generator: torch.Generator) -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "data": generator.get_state()}


def set_rng_state(rng: dict, generator: torch.Generator) -> None:
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    generator.set_state(rng["data"])
