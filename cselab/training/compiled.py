"""``training.compile``: which mode a run compiles its step in, and an inductor cache that a job
killed mid-compile cannot poison for the jobs after it.

``auto`` (the default) is CUDA graphs (``reduce-overhead``) for a single-process CUDA run, where it
was measured fastest (docs/speed.md): the whole step, or with gradient caching (``training.chunk_size``
as planned for the device, :mod:`cselab.training.memory`) each chunk in one fixed shape
(:mod:`cselab.training.chunks`); the eager step everywhere else. Compiling
changes no result (the step's math and its keyed dropout are the same), so the setting is
operational.

A job killed while inductor writes its cache can leave an empty file behind (a 0-byte ``.so``
was seen), and a damaged disk a cut or garbled one: the next job loads it and every compiled step
fails. Before compiling, a run removes such files with one warning naming them (empty, a library
that is no ELF file or is cut short, a Python or JSON file that does not parse), except those
another job is compiling at that moment (inductor holds a lock per
library while g++ writes it, empty for a while; the cache is shared by a workflow's jobs); a
compile that still fails is retried once in a fresh private cache, and a second failure leaves
the run on its eager step with one warning (the numbers are the same).

A workflow's training jobs compile into one cache in the workflow's folder (:func:`share_cache`):
torch's default lives under the temporary folder, which a cluster's jobs rarely share (each node
has its own; SLURM often gives each job its own ``TMPDIR``), so each job compiled its step from
nothing (the first step of a smoke training on an H200 took 82 s, docs/speed.md). A warm cache is
reused: a tiny compiled CPU training took 53-60 s in a new cache and 16 s in a used one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path

import torch

from cselab.io import process_folder, reason_of

log = logging.getLogger("cselab")

#: files inductor and Triton write and load back; empty, they are the trace of a killed write
CACHE_SUFFIXES = (".so", ".o", ".cubin", ".ptx", ".py", ".json", ".pkl", ".cpp", ".h", ".best_config", ".ttir",
                  ".ttgir", ".llir")


def compile_mode(setting, device: torch.device, world: int):
    """The ``torch.compile`` mode a run uses for ``training.compile`` = ``setting`` (False: eager;
    True: torch's default mode): ``auto`` is ``reduce-overhead`` on one CUDA device (the whole
    step, or with gradient caching each chunk in its fixed shape), else eager."""
    if setting != "auto":
        return setting
    return "reduce-overhead" if device.type == "cuda" and world == 1 else False


def share_cache(folder: Path) -> None:
    """Compile into ``folder`` (and Triton into its ``triton/``), unless ``TORCHINDUCTOR_CACHE_DIR``
    names another cache than torch's default (which torch writes back once it has used it).
    Inductor is imported only to read that default, when the variable is set: importing it costs
    an eager job about 2 CPU-s."""
    named = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
    if named:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        if named != os.path.abspath(default_cache_dir()):
            return
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder.resolve())


def cache_dir() -> Path:
    """The inductor cache this process compiles into (``TORCHINDUCTOR_CACHE_DIR`` or torch's default)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_cache_dir

    return Path(inductor_cache_dir())


def drop_partial_files(root: Path) -> list[Path]:
    """Remove the unreadable files of :data:`CACHE_SUFFIXES` under ``root`` (what a killed compile
    or a damaged disk leaves: empty, a cut or garbled library, a cut Python or JSON file,
    :func:`cache_file_problem`) with one warning naming them; returns them. A file another process
    is compiling right now is left alone: inductor builds ``<key>*.so`` holding
    ``locks/<key>.lock``, and while g++ writes the library it may be empty or cut; a file whose
    lock is held is skipped, one whose lock is free is checked again under it. Files another
    process removes meanwhile are skipped."""
    removed: dict[Path, str] = {}
    if not root.is_dir():
        return []
    for path in root.rglob("*"):
        try:
            if path.suffix in CACHE_SUFFIXES and path.is_file() and cache_file_problem(path) \
                    and (problem := _drop_if_idle(path, root)):
                removed[path] = problem
        except OSError:
            continue
    if removed:
        shown = "; ".join(f"{p.relative_to(root)} ({why})" for p, why in list(removed.items())[:5])
        log.warning("compile cache %s: removed %d unreadable file(s), compiled again when needed: %s%s", root,
                    len(removed), shown, "; ..." if len(removed) > 5 else "")
    return list(removed)


#: the ELF header fields that say where the file ends (64-bit, 32-bit): section headers' offset,
#: size of one and their count (the section header table is the file's last part)
_ELF_TAIL = {2: ("Q", 0x28, 0x3A, 0x3C), 1: ("I", 0x20, 0x2E, 0x30)}


def cache_file_problem(path: Path) -> str | None:
    """Why a compile-cache file cannot be what inductor or Triton wrote, or None: empty; a library
    or object (``.so``, ``.o``, ``.cubin``) that is no ELF file or ends before its section headers
    (cut short); a ``.py`` that does not compile; a ``.json`` that does not parse."""
    import struct

    size = path.stat().st_size
    if size == 0:
        return "empty"
    if path.suffix in (".so", ".o", ".cubin"):
        with open(path, "rb") as fh:
            head = fh.read(64)
        if head[:4] != b"\x7fELF" or head[4] not in _ELF_TAIL or len(head) < 52:
            return "not an ELF file"
        word, off, entsize, count = _ELF_TAIL[head[4]]
        order = "<" if head[5] == 1 else ">"
        shoff = struct.unpack_from(order + word, head, off)[0]
        end = shoff + struct.unpack_from(order + "H", head, entsize)[0] * struct.unpack_from(order + "H", head, count)[0]
        return f"cut short: {size} bytes, its headers end at {end}" if end > size else None
    try:
        if path.suffix == ".py":
            compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
        elif path.suffix == ".json":
            json.loads(path.read_bytes())
    except (SyntaxError, ValueError) as e:
        return reason_of(e)
    return None


def _drop_if_idle(path: Path, root: Path) -> str | None:
    """Unlink the unreadable ``path`` unless a compile in progress holds the inductor lock of its key
    (its name up to the first dot, in a ``locks/`` folder of the cache or of the file's own
    folders) or, for a file without a lock of its own, of a key beside it (inductor's C++ wrapper
    links ``<key2>.optimized.o`` under the lock of ``<key>.main.cpp``); its problem when it was removed."""
    from filelock import Timeout  # torch requires filelock; inductor locks with it
    from torch.utils._filelock import FileLock

    locks = _locks_of([path.name.split(".", 1)[0]], path, root)
    if not locks:
        locks = _locks_of(sorted({p.name.split(".", 1)[0] for p in path.parent.iterdir()}), path, root)
    try:
        with contextlib.ExitStack() as held:
            for lock in locks:
                held.enter_context(FileLock(str(lock), timeout=0))
            problem = cache_file_problem(path)
            if problem is None:  # the compile finished meanwhile
                return None
            path.unlink()
            return problem
    except Timeout:
        log.info("compile cache: %s is being compiled by another process; left alone", path.name)
        return None


def _locks_of(keys: list[str], path: Path, root: Path) -> list[Path]:
    """The inductor lock files that exist for ``keys``."""
    folders = dict.fromkeys((root / "locks", path.parent / "locks", path.parent.parent / "locks"))
    return [folder / f"{key}.lock" for key in keys for folder in folders if (folder / f"{key}.lock").is_file()]


def compile_failures() -> tuple[type[BaseException], ...]:
    """The exceptions a failed compile raises (as opposed to the step's own errors)."""
    from torch._dynamo.exc import BackendCompilerFailed

    failures: list[type[BaseException]] = [BackendCompilerFailed]
    try:
        from torch._inductor.exc import InductorError

        failures.append(InductorError)
    except ImportError:  # an older torch
        pass
    return tuple(failures)


def fresh_cache() -> Path:
    """Point inductor (and the Triton cache under it) at a new private folder, forget what was
    compiled, and return the folder: the retry after a failed compile."""
    import torch._dynamo

    folder = process_folder("cselab-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    os.environ["TRITON_CACHE_DIR"] = str(folder / "triton")
    torch._dynamo.reset()
    return folder
