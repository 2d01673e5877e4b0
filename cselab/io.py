"""Files that are either complete or absent: every result is written to a temporary sibling and
renamed into place, so an interrupted job never leaves a half-written output behind."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

_CHUNK = 1 << 20


@contextlib.contextmanager
def atomic_path(path: str | Path, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` if the block succeeds.

    Works for files and directories (an existing directory at ``path`` is replaced). On an
    exception the temporary is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}{suffix}")
    _remove(tmp)
    try:
        yield tmp
        if tmp.is_dir() and path.is_dir():
            old = path.with_name(f".{path.name}.old")
            _remove(old)
            path.rename(old)
            tmp.rename(path)
            _remove(old)
        else:
            os.replace(tmp, path)
    finally:
        _remove(tmp)


@contextlib.contextmanager
def open_atomic(path: str | Path, mode: str = "w") -> Iterator[Any]:
    """``open`` for writing whose result appears at ``path`` only once the block succeeds."""
    with atomic_path(path) as tmp:
        kwargs = {} if "b" in mode else {"encoding": "utf-8", "newline": "\n"}
        with open(tmp, mode, **kwargs) as fh:
            yield fh


def lines_sha256(lines) -> str:
    """sha256 of lines joined with newlines (UTF-8): the content key of the embedding and token caches."""
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode("utf-8") + b"\n")
    return h.hexdigest()


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` of ``text`` through libyaml's parser where PyYAML was built with it (the
    same values; config.yaml: 26 ms against 180 ms for the pure-Python parser)."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def write_text(path: str | Path, text: str) -> None:
    with open_atomic(path) as fh:
        fh.write(text)


def write_json(path: str | Path, obj: Any) -> None:
    """Indented JSON (anything not JSON-native as ``str``)."""
    write_text(path, json.dumps(obj, indent=2, default=str) + "\n")


def write_with(path: str | Path, save: Callable[[Path], object]) -> None:
    """Let ``save(tmp)`` write a file or a directory (``np.save``, ``model.save_pretrained``, ...)
    and move the result onto ``path``."""
    with atomic_path(path) as tmp:
        save(tmp)


def as_recorded(path: str | Path) -> str:
    """A path as a record (a data manifest) stores it: relative to the working directory (a job's:
    the project folder) when it lies inside it, so the folder can be moved or copied and its
    records still name its own files; absolute otherwise."""
    full = Path(path).expanduser().resolve()
    try:
        return str(full.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(full)


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class DamagedEntry(ValueError):
    """A cache entry that reads but does not hold what was written (its record says another size,
    shape or number of rows): as unreadable as a cut file."""


def unreadable_errors() -> tuple[type[BaseException], ...]:
    """What reading a damaged file raises: cut short, empty, a bad CRC or garbage make numpy,
    zipfile, zlib, pickle and JSON raise these (``zipfile.BadZipFile: Bad CRC-32``, ``EOFError:
    No data left in file``, ``ValueError: Cannot load file containing pickled data``, ...)."""
    import pickle
    import zipfile
    import zlib

    return (OSError, EOFError, ValueError, KeyError, IndexError, zipfile.BadZipFile, zlib.error,
            pickle.UnpicklingError, SyntaxError)


def reason_of(e: BaseException) -> str:
    """An exception in one short line: ``BadZipFile: Bad CRC-32 for file 'ids.npy'``."""
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__


def read_cache_entry(path: Path, read: Callable[[Path], Any], what: str, again: str,
                     also: tuple[Path, ...] = ()) -> Any | None:
    """``read(path)``; None when the cache entry at ``path`` cannot be read (any of
    :func:`unreadable_errors`, :class:`DamagedEntry` included): the entry (and ``also``, its
    record) is removed with one warning naming it, and the caller builds it again (``again``
    says how: "tokenising again")."""
    try:
        return read(path)
    except unreadable_errors() as e:
        drop_cache_entry(path, what, reason_of(e) if not isinstance(e, DamagedEntry) else str(e), again, also)
        return None


def drop_cache_entry(path: Path, what: str, reason: str, again: str, also: tuple[Path, ...] = ()) -> None:
    """Remove a damaged cache entry (and ``also``) with one warning naming it: every cache
    (tokens, embeddings, BEIR downloads, compiled steps) says it the same way."""
    for p in (path, *also):
        with contextlib.suppress(OSError):
            Path(p).unlink()
    logging.getLogger("cselab").warning("%s %s is damaged (%s): removed, %s", what, path, reason, again)


def link_or_copy(src: str, dst: str) -> None:
    """Hard link (outputs are never rewritten in place), else copy; a ``copytree`` copy_function."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def thread_budget() -> int:
    """The CPU threads this process may use: the cores it may run on, bounded in a job by its
    rule's threads (``OMP_NUM_THREADS``, set for each job by :func:`cselab.pipeline.jobs.set_threads`)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        cores = os.cpu_count() or 1
    threads = os.environ.get("OMP_NUM_THREADS", "")
    return max(1, min(cores, int(threads)) if threads.isdigit() and int(threads) > 0 else cores)


def skip_collection_at_exit() -> None:
    """At the interpreter's exit, before its modules are torn down, move every object still alive
    into the garbage collector's permanent generation (:func:`gc.freeze`), so that the final
    collections neither traverse nor free them. Snakemake's imports (pandas through the SLURM
    plugin, SQLAlchemy, pyarrow) leave 165,000 tracked objects at the end of the smoke sweep's dry
    run, and the modules' reference cycles among them: 12% of the paper config's dry run
    (docs/scale.md). A rule job's process (:func:`cselab.pipeline.jobs.main`) exits the same way:
    torch, transformers and MLflow's modules cost it about 1.2 CPU-s more at exit otherwise.

    Nothing the run wrote is at stake: the exit handlers registered before this one (logging's
    flush and close, Snakemake's) still run after it; the exit status is untouched; objects are
    still freed by their reference counts. Only reference cycles left at exit go unfreed, and the
    language promises no finalizer at shutdown anyway."""
    import gc

    atexit.unregister(gc.freeze)  # once, however often a process reads the Snakefile
    atexit.register(gc.freeze)


def process_folder(prefix: str) -> Path:
    """A new folder in the temporary folder for this process's scratch files, removed when the
    process exits (its children started afresh or with ``multiprocessing`` leave it alone)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


#: third-party loggers kept at WARNING in the logs of jobs and training processes
NOISY_LOGGERS = ("alembic", "mlflow", "urllib3", "httpx")


def quiet_third_party_loggers() -> None:
    """Third-party loggers at WARNING, and the libraries' progress bars off (Hugging Face's
    "Loading weights" and "Writing model shards"): a job reports its own progress (:class:`Progress`)."""
    import logging
    import sys

    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # read when transformers and huggingface_hub load
    if "huggingface_hub" in sys.modules:  # loaded already (by MLflow or a tokenizer): transformers asks it
        sys.modules["huggingface_hub"].utils.disable_progress_bars()
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


#: ``extra=`` of a log record a person watching the console sees (a job's stderr shows these,
#: warnings and nothing else; its log file shows every record)
CONSOLE = {"console": True}
#: ``extra=`` of a progress record for a terminal's updating line alone (never in a log file)
LIVE = {"console": True, "live": True}
#: seconds between a :class:`Progress`'s updates of a terminal's one updating line; None (the
#: default): no such updates. A console handler on a terminal sets it (:func:`console_stream_handler`)
live_every: float | None = None


def not_live(record: logging.LogRecord) -> bool:
    """A log file's filter: every record but a terminal's updating progress line (:data:`LIVE`)."""
    return not getattr(record, "live", False)


#: a terminal's "back to the line's start and erase it" (cselab.pipeline.console keeps its own
#: copy, since it imports nothing of cselab; tests/test_console.py holds them equal)
ERASE_LINE = "\r\x1b[K"
#: seconds between the updates of a terminal's progress line
LIVE_EVERY_S = 2.0
#: a job's console label, which the processes it starts (a multi-process training's workers) read
CONSOLE_LABEL_ENV = "CSELAB_CONSOLE_LABEL"


def console_stream_handler(label: str, stream) -> logging.Handler:
    """What a person watching a job reads on ``stream``: progress lines and cselab's warnings,
    each named by ``label`` (``[12:03:41] <label>: ...``); everything else goes to the log file
    alone. On a terminal the progress is one line updated in place (every :data:`LIVE_EVERY_S`
    seconds, :class:`LiveLineHandler`)."""
    global live_every
    tty = _isatty(stream)
    handler = (LiveLineHandler if tty else logging.StreamHandler)(stream)
    handler.setFormatter(logging.Formatter(f"[%(asctime)s] {label}: %(message)s", datefmt="%H:%M:%S"))
    handler.addFilter(lambda r: (getattr(r, "console", False) and (tty or not getattr(r, "live", False)))
                      or (r.levelno == logging.WARNING and r.name.startswith("cselab")))
    if tty:
        live_every = LIVE_EVERY_S
    return handler


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class LiveLineHandler(logging.StreamHandler):
    """A terminal's console: a progress record replaces the line it is on (carriage return,
    erase to the end, no newline); any other record, and Snakemake's console's lines after it
    (:mod:`cselab.pipeline.console`), replace it in turn and end their line."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            end = "" if getattr(record, "console", False) else "\n"
            self.stream.write(ERASE_LINE + self.format(record) + end)
            self.flush()
        except Exception:  # noqa: BLE001 (as logging's own handlers: a console never stops a job)
            self.handleError(record)


class Progress:
    """A long loop's progress for a person: one line at its start, at most every ``every``
    seconds, and at its end: ``<what>: <done> of <total> <unit> (p%), <rate>/s, elapsed, ETA``
    (``total`` None: ``<done> <unit>``, no ETA). Written through ``log`` (the job's log file and
    its console), plain lines that read the same in a file and on a terminal; a terminal's line is
    also updated in place every :data:`live_every` seconds between them. ``lazy``: a step
    inside a job whose own lines frame it (encoding, a corpus search): no start or end line, and
    nothing before it has run ``lazy`` seconds, so a short loop says nothing."""

    def __init__(self, log, what: str, total: int | None, unit: str, done: int = 0, every: float = 30.0,
                 lazy: float | None = None):
        import time

        self.log, self.what, self.unit, self.every, self.lazy = log, what, unit, every, lazy
        self.total = None if total is None else max(1, int(total))
        self.start, self.first = time.monotonic(), done
        self.live = self.start
        self.last = self.start + (lazy - every if lazy is not None else 0.0)
        self.done = done
        if lazy is None:
            self.log.info("%s: %s", what, self._line(done, 0.0), extra=CONSOLE)

    def update(self, done: int) -> None:
        import time

        self.done = done
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = self.live = now
            self.log.info("%s: %s", self.what, self._line(done, now - self.start), extra=CONSOLE)
        elif live_every is not None and now - self.live >= live_every and (
                self.lazy is None or now - self.start >= self.lazy):
            self.live = now  # a terminal's updating line between the plain lines
            self.log.info("%s: %s", self.what, self._line(done, now - self.start), extra=LIVE)

    def close(self) -> None:
        import time

        if self.lazy is None:
            self.log.info("%s: %s", self.what, self._line(self.done, time.monotonic() - self.start, end=True),
                          extra=CONSOLE)

    def _line(self, done: int, elapsed: float, end: bool = False) -> str:
        rate = (done - self.first) / elapsed if elapsed > 0 else 0.0
        speed = f"{rate:,.1f} {self.unit}/s, {clock(elapsed)} elapsed"
        if self.total is None:
            return f"{done:,} {self.unit}, {speed}" + (", done" if end else "")
        left = (self.total - done) / rate if rate > 0 else None
        tail = "done" if end else f"ETA {clock(left)}" if left is not None else "ETA unknown"
        return f"{done:,} of {self.total:,} {self.unit} ({100 * done / self.total:.0f}%), {speed}, {tail}"


def function_name(fn: Callable) -> str:
    """``module:qualname`` of a module-level function: what :func:`named_function` resolves."""
    return f"{fn.__module__}:{fn.__qualname__}"


def named_function(name: str) -> Callable:
    """The function a ``module:name`` string names (the module imported if it is not yet)."""
    import importlib

    module, attr = name.split(":")
    return getattr(importlib.import_module(module), attr)


def clock(seconds: float | None) -> str:
    """``h:mm:ss`` (``m:ss`` under an hour; ``?`` unknown)."""
    if seconds is None:
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A GitHub-flavoured Markdown table (cells as given, ``str``-ed)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
