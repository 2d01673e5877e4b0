"""``python -m snakemake ...`` for tests, each invocation a fork of one process per test worker
that has imported Snakemake and cselab's planning modules once (about 1.5 CPU seconds an
invocation otherwise; the suite runs about a hundred).

A fork is a process of its own, as ``subprocess.run`` would start: its own pid, standard streams,
working folder, environment, exit status and atexit handlers; only the imports are shared, made
before any invocation's settings were known. What differs from a started process is chosen so
that nothing a test checks can differ:

- only the current checkout's Snakefile under this interpreter and ``PYTHONPATH`` goes through a
  fork (another checkout's code would find this one's modules imported): anything else, and any
  call while the fork server cannot start, runs as a plain subprocess;
- tests that signal or race a live invocation start it with ``subprocess.Popen`` themselves.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from cselab.pipeline import jobhost  # its request format, stream and process helpers

ROOT = Path(__file__).resolve().parents[1]
#: imported once by the fork server: Snakemake's command line, what the Snakefile imports to plan
#: and what its ``onstart`` opens (MLflow's SQL store)
PRELOAD = ("snakemake.cli", "snakemake.api", "snakemake.workflow", "snakemake.dag", "snakemake.persistence",
           "snakemake.report", "snakemake.report.html_reporter", "smart_open", "jsonschema", "yaml", "git",
           "mlflow", "mlflow.store.tracking.sqlalchemy_store", "cselab.pipeline.config",
           "cselab.pipeline.invocation", "cselab.pipeline.targets", "cselab.pipeline.jobspecs",
           "cselab.pipeline.outputs", "cselab.pipeline.console", "cselab.pipeline.tracking")
#: imported too where installed (MLflow asks IPython whether it runs in a notebook)
OPTIONAL = ("IPython",)
_SERVER: list = [None]  # (Popen, address) of this process's fork server


#: set by tests/conftest.py with parallel test workers: each worker's share of the cores
THREAD_CAP_ENV = "CSELAB_TEST_MAX_THREADS"


def capped(cmd: list[str]) -> list[str]:
    """``cmd`` with Snakemake's ``--max-threads`` at this worker's share of the cores where the
    workers share the machine (:data:`THREAD_CAP_ENV`) and ``cmd`` runs jobs: a job's torch then
    runs as many threads as the worker has cores. Two workers' jobs that each run OpenMP threads on
    every core wait at every op's barrier for a thread the other holds off its core: the fault
    file's three training tests beside one busy single-thread process took 964 s so, 159 s capped.
    A dry run (it shows each job's threads) and a command that sets its own cap are unchanged."""
    from cselab.pipeline.invocation import is_dry_run

    cap = os.environ.get(THREAD_CAP_ENV)
    if (not cap or cmd[:3] != [sys.executable, "-m", "snakemake"] or is_dry_run(cmd[3:])
            or any(a.split("=")[0] == "--max-threads" for a in cmd)):
        return cmd
    return [*cmd[:3], "--max-threads", cap, *cmd[3:]]


def run(cmd: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)``, through a
    fork of the server where :func:`forkable` says it may (with :func:`capped`'s thread cap)."""
    cmd = capped(cmd)
    conn = _connect() if forkable(cmd, env) else None
    if conn is None:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, \
            open(os.devnull) as null, conn:
        request = {"args": cmd[3:], "cwd": os.getcwd(), "env": dict(env), "umask": jobhost._umask()}
        jobhost.send_request(conn, request, [null.fileno(), out.fileno(), err.fileno()])
        reader = conn.makefile("rb")
        pid = int(reader.readline()[1:])
        code = _wait(conn, reader, pid, cmd, timeout)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, code, out.read(), err.read())


def forkable(cmd: list[str], env: dict) -> bool:
    """This checkout's Snakefile, run by this interpreter with this process's ``PYTHONPATH``."""
    return (cmd[:3] == [sys.executable, "-m", "snakemake"] and "-s" in cmd
            and Path(cmd[cmd.index("-s") + 1]) == ROOT / "Snakefile"
            and env.get("PYTHONPATH") == os.environ.get("PYTHONPATH")
            and os.environ.get("CSELAB_TEST_SNAKEMAKE_FORKS", "1") != "0")


def _wait(conn: socket.socket, reader, pid: int, cmd: list[str], timeout: float) -> int:
    if not select.select([conn], [], [], timeout)[0]:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        raise subprocess.TimeoutExpired(cmd, timeout)
    line = reader.readline()
    if not line.startswith(b"X"):
        raise RuntimeError(f"the snakemake fork server lost invocation {pid}")
    return int(line[1:])


def _connect() -> socket.socket | None:
    if _SERVER[0] is None or _SERVER[0][0].poll() is not None:
        address = f"cselab-test-snakemake-{os.getpid()}-{time.monotonic_ns()}"
        code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from tests.smk_forks import serve; "
                f"sys.exit(serve({address!r}, {os.getpid()}))")
        server = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, start_new_session=True,
                                  cwd=ROOT)
        atexit.register(server.terminate)
        _SERVER[0] = (server, address)
    server, address = _SERVER[0]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and server.poll() is None:
        sock = jobhost._try_connect(address)
        if sock is not None:
            return sock
        time.sleep(0.05)
    return None


# -- the server ------------------------------------------------------------------------------------

def serve(address: str, parent_pid: int) -> int:
    """Import :data:`PRELOAD`, then fork one invocation per request until ``parent_pid`` ends."""
    import gc
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    for name in OPTIONAL:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    _warm_validation()
    gc.freeze()
    listener = jobhost._bind(address)
    while jobhost._alive(parent_pid):
        if not select.select([listener], [], [], 1.0)[0]:
            continue
        conn, _ = listener.accept()
        try:
            request, fds = jobhost._receive(conn)
        except (OSError, EOFError, pickle.UnpicklingError, struct.error):
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            listener.close()
            _become_invocation(conn, fds, request)  # never returns: the invocation exits
        for fd in fds:
            os.close(fd)
        conn.sendall(b"P%d\n" % pid)
        threading.Thread(target=jobhost._report, args=(pid, conn, set()), daemon=True).start()
    return 0


def _warm_validation() -> None:
    """Validate the shipped config once, as every invocation's Snakefile does first: the method
    modules, their option schemas and the config schema's validator are then loaded and built
    in the server, not again in each fork (this checkout's code only: see :func:`forkable`)."""
    from cselab.io import load_yaml
    from cselab.pipeline.config import validate

    with contextlib.suppress(Exception):  # a broken config is each invocation's own message to give
        validate(load_yaml((ROOT / "config.yaml").read_text()))


def _become_invocation(conn: socket.socket, fds: list[int], request: dict) -> None:
    """In the fork: the request's streams, folder and environment, then Snakemake's own ``main``."""
    conn.close()
    os.setsid()  # a process group of its own: whatever Snakemake signals in its group, the server is not in it
    jobhost.take_over(fds, request)
    import snakemake
    from snakemake.cli import main

    sys.argv = [str(Path(snakemake.__file__).with_name("__main__.py")), *request["args"]]  # as `python -m snakemake`
    main()  # exits through sys.exit, atexit handlers included
