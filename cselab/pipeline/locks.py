"""One owner per experiment folder, one live ``snakemake`` invocation per project folder.

Both are OS file locks (``fcntl.flock``) on files that are never deleted, held for the owner's
whole life: the OS frees them when the process ends, however it ends (``kill -9`` included), so
a lock is never stale. The owner writes who it is (host, pid, since when, what) beside the lock,
for the one message a second comer gets. Snakemake's own lock files are not enough: an
invocation that exits deletes every lock file in ``.snakemake/locks`` (Snakemake 9), so a third
invocation could start beside a live one and, with ``rerun-incomplete``, delete the outputs the
live one is writing.

- :func:`experiment_owner`: a training job (an experiment's or a pretraining stage's folder)
  waits up to ``wait_s`` for the folder and then fails naming the holder; it never trains,
  deletes or reopens the holder's MLflow run.
- :func:`hold_invocation`: the invocation that runs jobs (not a dry run, not a job on a cluster
  node) holds the project folder's lock until it exits; a second one fails before it plans a
  job, naming the first.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import IO, Iterator

from cselab.errors import CselabError

log = logging.getLogger(__name__)

OWNER_LOCK, OWNER_INFO = ".owner.lock", ".owner.json"
INVOCATION_LOCK, INVOCATION_INFO = "invocation.lock", "invocation.json"


class LockError(CselabError):
    """A folder is another live process's (names it: host, pid, since when, what)."""


def _identity(what: str) -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "what": what}


def describe_holder(info: Path) -> str:
    """Who holds a lock, from the file its holder wrote (``host, pid, since``)."""
    try:
        who = json.loads(info.read_text())
        return f"{who['what']} (host {who['host']}, pid {who['pid']}, since {who['since']})"
    except (OSError, ValueError, KeyError):
        return "another process (its details are not readable)"


def _try_lock(path: Path) -> IO | None:
    """The open lock file, locked exclusively; None when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    except OSError as e:  # a filesystem without flock (Lustre mounted noflock: ENOSYS): no guard, say so
        log.warning("cannot lock %s (%s): this filesystem has no file locks; nothing guards it against a "
                    "second job or invocation", path, e.strerror or e)
    return fh


def invocation_held(state_dir: str | Path) -> bool:
    """Whether a live process holds the folder's invocation lock (a dry run asks; it takes none)."""
    fh = _try_lock(Path(state_dir) / INVOCATION_LOCK)
    if fh is None:
        return True
    fh.close()  # closing the file releases the lock
    return False


def _claim(fh: IO, info: Path, what: str, **extra) -> None:
    tmp = info.with_name(f".{info.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({**_identity(what), **extra}) + "\n")
    os.replace(tmp, info)


def last_holder(info: Path) -> dict | None:
    """The record the lock's last holder wrote (None: none, or not readable)."""
    try:
        record = json.loads(Path(info).read_text())
        return record if isinstance(record, dict) else None
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def experiment_owner(folder: str | Path, what: str, wait_s: float = 60.0, poll_s: float = 1.0) -> Iterator[None]:
    """Hold ``folder``'s owner lock for the block (``what``: the job, for the holder's message);
    wait up to ``wait_s`` seconds for a live holder, then raise :class:`LockError` naming it."""
    folder = Path(folder)
    deadline = time.monotonic() + wait_s
    while (fh := _try_lock(folder / OWNER_LOCK)) is None:
        if time.monotonic() >= deadline:
            raise LockError(f"{folder} is being written by {describe_holder(folder / OWNER_INFO)}; this job "
                            f"waited {wait_s:g} s and did nothing (it trains nothing, deletes nothing and leaves the "
                            "holder's MLflow run alone). Wait for that job to end, or stop it, then rerun.")
        time.sleep(poll_s)
    try:
        _claim(fh, folder / OWNER_INFO, what)
        yield
    finally:
        with contextlib.suppress(OSError):
            (folder / OWNER_INFO).unlink()
        fh.close()  # closing the file releases the lock


_INVOCATION: IO | None = None  # held until the process exits


def hold_invocation(state_dir: str | Path, command: str | None = None, invocation: str | None = None) -> dict | None:
    """Hold the project's invocation lock (``state_dir``, e.g. ``.snakemake/cselab``) until this
    process exits; a live holder raises :class:`LockError` naming it. Returns the record of the
    invocation that held it last (read before this one's replaces it; None the second time), which
    says whether it ended (:func:`mark_ended`, registered at exit)."""
    global _INVOCATION
    if _INVOCATION is not None:
        return None
    state_dir = Path(state_dir)
    fh = _try_lock(state_dir / INVOCATION_LOCK)
    if fh is None:
        raise LockError(f"another snakemake invocation is running in this folder: "
                        f"{describe_holder(state_dir / INVOCATION_INFO)}. Two invocations in one folder can delete "
                        "each other's outputs; wait for it to finish (or stop it), or run from another folder. "
                        "A dry run (-n) is always allowed.")
    previous = last_holder(state_dir / INVOCATION_INFO)
    _claim(fh, state_dir / INVOCATION_INFO, command or "snakemake " + " ".join(sys.argv[1:]),
           **({"invocation": invocation} if invocation else {}))
    _INVOCATION = fh
    import atexit

    atexit.register(mark_ended, (state_dir / INVOCATION_INFO).resolve())  # Snakemake's --directory is left by then
    return previous


def mark_ended(info: Path) -> None:
    """Say in the invocation's record that it ended (any exit but a kill): its successor then
    knows it did not die."""
    try:
        record = json.loads(info.read_text())
        if record.get("pid") == os.getpid():
            record["ended"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            tmp = info.with_name(f".{info.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(record) + "\n")
            os.replace(tmp, info)
    except (OSError, ValueError):
        pass
