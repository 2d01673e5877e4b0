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

from cselab.errors import named_storage_errors
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
    (fingerprint, step, the sha256 and size of every file) and ``best/`` (the best model so far,
    hard-linked where possible).

    A checkpoint is written to a hidden temporary directory, its files fsynced, and renamed
    into place (:func:`cselab.io.atomic_path`); the two latest are kept, so a kill at any point,
    or a checkpoint damaged afterwards, leaves a good one. On resume a checkpoint whose files
    fail their checksums or do not load is moved aside (``step-<N>.corrupt``) with one message
    naming it, and the run resumes from the previous good one, or from step 0, and says which.
    """

    KEEP = 2

    def __init__(self, root: Path, fingerprint: str):
        self.root, self.fingerprint = Path(root), fingerprint

    def _fingerprint_of(self, path: Path) -> str | None:
        try:
            return json.loads((path / "meta.json").read_text())["fingerprint"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _candidates(self) -> list[Path]:
        """Checkpoints with a readable meta.json of this run's fingerprint, newest first."""
        return [p for p in sorted(self.root.glob("step-*[0-9]"), reverse=True)
                if self._fingerprint_of(p) == self.fingerprint]

    def peek(self) -> Path | None:
        """The newest sound checkpoint of this run (the one :meth:`latest` will resume from),
        without changing anything."""
        return next((p for p in self._candidates() if damaged(p) is None), None)

    def latest(self) -> Path | None:
        """The newest checkpoint of this run whose files match their checksums (a damaged one is
        moved aside, one message naming it); a checkpoint of another spec or corpus is removed.
        One process of a job calls it, then all :meth:`read`."""
        for p in sorted(self.root.glob("step-*[0-9]")) if self.root.is_dir() else []:
            seal = self._fingerprint_of(p)
            if seal is None:  # its meta.json is damaged: the state may be fine, so keep it aside
                self.quarantine(p, "meta.json is missing or unreadable")
            elif seal != self.fingerprint:
                log.warning("discarding checkpoint %s: the training spec or corpus changed", p)
                shutil.rmtree(p, ignore_errors=True)
        for path in self._candidates():
            problem = damaged(path)
            if problem is None:
                return path
            self.quarantine(path, problem)
        return None

    def quarantine(self, path: Path, problem: str) -> None:
        """Move a damaged checkpoint aside and say where the run resumes from instead."""
        aside = path.with_name(path.name + ".corrupt")
        shutil.rmtree(aside, ignore_errors=True)
        path.rename(aside)
        previous = self._candidates()
        log.warning("checkpoint %s is damaged (%s): moved to %s; %s", path, problem, aside.name,
                    f"resuming from the previous one, {previous[0].name}" if previous else "starting from step 0")

    @staticmethod
    def read(path: Path) -> dict:
        state = torch.load(Path(path) / "state.pt", map_location="cpu", weights_only=False)  # our own file
        return {**state, "best_dir": Path(path) / "best"}

    def save(self, state: dict, best: Path | None) -> None:
        """Write the checkpoint of ``state`` (and the ``best`` model folder) whole or not at all;
        a disk that fills or is read-only is one :class:`~cselab.errors.StorageError` naming the
        folder and the space needed, the checkpoints before it kept."""
        final = self.root / f"step-{state['step']:08d}"
        with named_storage_errors(final.parent, need=lambda: state_bytes(state)), atomic_path(final) as tmp:
            tmp.mkdir()
            with (tmp / "state.pt").open("wb") as fh:
                torch.save(state, fh)
                fh.flush()
                os.fsync(fh.fileno())
            if best is not None:
                shutil.copytree(best, tmp / "best", copy_function=link_or_copy)
            files = {str(f.relative_to(tmp)): file_record(f) for f in sorted(tmp.rglob("*")) if f.is_file()}
            with (tmp / "meta.json").open("w") as fh:
                fh.write(json.dumps({"fingerprint": self.fingerprint, "step": state["step"], "files": files}))
                fh.flush()
                os.fsync(fh.fileno())
        _fsync_dir(self.root)  # the rename itself survives a crash of the node
        self._keep_latest()

    def _keep_latest(self) -> None:
        """Remove all but the :attr:`KEEP` newest checkpoints (and leftovers of interrupted writes)."""
        keep = set(sorted(self.root.glob("step-*[0-9]"), reverse=True)[:self.KEEP])
        for p in self.root.iterdir():
            if p not in keep and not p.name.endswith(".corrupt"):
                shutil.rmtree(p) if p.is_dir() else p.unlink()


def state_bytes(state) -> int:
    """About the bytes ``torch.save`` writes for ``state``: its tensors' (and the best model's
    folder is linked, not written)."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(v) for v in state)
    return 0


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # a filesystem that cannot fsync a directory
        pass
    finally:
        os.close(fd)


def file_record(path: Path) -> dict:
    from cselab.io import sha256_file

    return {"sha256": sha256_file(path), "bytes": path.stat().st_size}


def damaged(path: Path) -> str | None:
    """Why the checkpoint at ``path`` cannot be trusted (a file missing, of another size or
    sha256), or None. A checkpoint written before checksums were recorded is trusted as it is."""
    meta = json.loads((path / "meta.json").read_text())
    for rel, record in meta.get("files", {}).items():
        f = path / rel
        if not f.is_file():
            return f"{rel} is missing"
        if f.stat().st_size != record["bytes"]:
            return f"{rel} has {f.stat().st_size} bytes, {record['bytes']} were written"
        if file_record(f)["sha256"] != record["sha256"]:
            return f"{rel} does not match its sha256"
    if not (path / "state.pt").is_file():
        return "state.pt is missing"
    return None


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
