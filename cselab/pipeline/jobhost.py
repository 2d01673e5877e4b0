"""The warm job host: one process per local ``snakemake`` invocation that has imported what rule
jobs import (MLflow and its SQL store, torch, transformers, SciPy's statistics, the evaluations)
and runs each job as a fork of itself.

A tiny job spends most of its process's life importing: MLflow with its SQL store about 3 s,
torch 2.3 s, transformers' BERT classes 3-4 s more, against well under a second of work. Without
the host every job pays that again; with it the invocation pays it once.

How a job runs through it (:func:`run_in_host`, called by :func:`cselab.pipeline.jobs.main`):

- The job's own process (Snakemake's ``script:``, here called the client) connects to the
  invocation's host, starting it on first use, and sends what the job is: its ``snakemake``
  object, job function, working folder, environment, umask and its standard streams (the file
  descriptors themselves, so the console and the log see what they saw before).
- The host forks. The fork takes the client's streams, folder and environment, reseeds Python's
  and numpy's random generators, and runs the job exactly as the client would have (the runner
  the client names: :func:`cselab.pipeline.jobs.run_here`); its exit status comes back to the
  client, which exits with it (or dies of the same signal), so Snakemake sees what it would have
  seen.
- Signals sent to the client (Snakemake's terminate, the terminal's Ctrl-C, SLURM's) are passed
  on to the job; a client killed outright (SIGKILL) takes its job with it: the job watches the
  connection and kills itself when it closes.

When it is used: an invocation that runs jobs itself (a plain ``snakemake --cores N``; never
with an executor or profile, where each job is its own batch job). Where a GPU is visible the
host holds MLflow's imports only and each job imports torch itself: a process must not fork after
CUDA may have been touched, and the host never imports what might touch it.
``CSELAB_JOB_HOST=0`` turns it off. Anything that keeps the host from answering (it cannot
start, it died) makes the job run in its own process as before; a job never fails for it.

What differs for a job run this way: Snakemake's benchmark file times the client, so its wall
seconds are the job's, but its CPU and memory columns are the waiting client's; the job's own
CPU seconds and peak memory are in its log's last line, and the invocation's closing summary
(:mod:`cselab.pipeline.console`) adds those CPU seconds. A host exits once its invocation's
process has ended and its last job has been reported.

A host template (:func:`serve_template`, named by ``CSELAB_JOB_HOST_TEMPLATE``) holds those imports
across invocations: each invocation's host is then a fork of it instead of a new process. The test
suite starts one per worker.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import hashlib
import importlib
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from cselab.io import function_name, named_function

#: set by the invocation (:func:`cselab.pipeline.invocation.set_up`) for its jobs: the host's address
ADDRESS_ENV = "CSELAB_JOB_HOST_ADDRESS"
#: the invocation's process, which the host outlives by no more than its running jobs
INVOCATION_PID_ENV = "CSELAB_INVOCATION_PID"
#: ``0`` turns the host off (every job in its own process)
SWITCH_ENV = "CSELAB_JOB_HOST"
#: ``0`` (set where a GPU is visible): the host never imports torch; each job that needs it does
TORCH_ENV = "CSELAB_JOB_HOST_TORCH"
#: set inside a job the host runs (for its log line and for processes it starts)
IN_HOST_ENV = "CSELAB_IN_JOB_HOST"
#: the name of a host template (:func:`serve_template`): invocations fork their hosts from it
TEMPLATE_ENV = "CSELAB_JOB_HOST_TEMPLATE"

#: what every job imports: tracking (MLflow, its SQL store and what its runs touch: a run's start asks
#: IPython, where installed, whether it runs in a notebook), Snakemake's script object, the tables' statistics
LIGHT = ("mlflow", "mlflow.tracking.fluent", "mlflow.store.tracking.sqlalchemy_store", "mlflow.store.db.utils",
         "mlflow.tracing.processor.base_mlflow", "sqlalchemy.dialects.sqlite", "alembic.script", "IPython", "git",
         "requests", "psutil", "jsonschema", "snakemake.script", "scipy.stats", "cselab.pipeline.tracking",
         "cselab.pipeline.jobs", "cselab.pipeline.jobs.report", "cselab.pipeline.jobs.data",
         "cselab.reporting.stats", "cselab.reporting.tables")
#: what the jobs that load a model import; the host takes them on when the first such job comes
TORCH = ("torch", "transformers", "transformers.models.bert.modeling_bert", "transformers.models.auto",
         "transformers.models.auto.tokenization_auto", "safetensors.torch", "sklearn.model_selection",
         "cselab.models.encoder", "cselab.evaluation.encoding", "cselab.evaluation.sts",
         "cselab.evaluation.transfer", "cselab.training.loop", "cselab.pipeline.jobs.train",
         "cselab.pipeline.jobs.evaluate")
#: the job functions that load a model (their family's imports are worth holding warm)
TORCH_JOBS = frozenset({"train", "pretrain", "evaluate", "export", "resolve_plm", "protocol_table",
                        "leakage_audit"})
#: signals a client passes on to its job (SIGINT to the job's process group, as a terminal would)
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
#: how long a client waits for a host it started to answer before it runs its job itself
START_TIMEOUT_S = 60.0


def address(invocation: str, pid: int, root: str | Path) -> str:
    """The name of the hosts' abstract sockets for one invocation (its id and process) and
    checkout (nothing on disk); each Python a job runs under (a rule's conda environment has its
    own) has a host of its own at :func:`_for_this_python`."""
    key = "\0".join([invocation, str(pid), str(root), str(os.getuid())])
    return "cselab-jobhost-" + hashlib.sha1(key.encode()).hexdigest()[:20]


def _for_this_python(addr: str) -> str:
    return f"{addr}-{hashlib.sha1(sys.executable.encode()).hexdigest()[:8]}"


def wanted(local: bool) -> bool:
    """Whether an invocation's jobs go through a host: it runs them itself (``local``) and
    ``CSELAB_JOB_HOST`` is not ``0``."""
    return local and os.environ.get(SWITCH_ENV, "1") != "0"


def enable(invocation: str) -> None:
    """Point this invocation's jobs at its host (started by the first job that asks); where a
    GPU is visible, a host that never imports torch."""
    import glob

    os.environ[ADDRESS_ENV] = address(invocation, os.getpid(), _root())
    os.environ[INVOCATION_PID_ENV] = str(os.getpid())
    os.environ[TORCH_ENV] = "0" if glob.glob("/dev/nvidia[0-9]*") else "1"


def _root() -> Path:
    return Path(__file__).resolve().parents[2]


# -- the client: a rule job's own process ----------------------------------------------------------

def run_in_host(smk, job: Callable, runner: Callable) -> int | None:
    """Run ``runner(smk, job, started)`` as a fork of the invocation's host (``started``: when this
    client's process started) and return its exit status (negative: the signal that ended it);
    ``None`` when there is no host to use (the caller runs the job). ``job`` and ``runner`` go by
    name (module-level functions): the fork imports them, most already imported by the host."""
    addr = os.environ.get(ADDRESS_ENV)
    if not addr or os.environ.get(IN_HOST_ENV) or os.environ.get(SWITCH_ENV, "1") == "0":
        return None
    conn = _connect(_for_this_python(addr))
    if conn is None:
        return None
    try:
        _send_request(conn, smk, job, runner)
        reader = conn.makefile("rb")
        first = reader.readline()
    except OSError:
        return None
    if not first.startswith(b"P"):
        return None  # the host could not take it: nothing ran, the caller runs the job
    return _wait_for_job(int(first[1:]), reader)


def _connect(addr: str) -> socket.socket | None:
    sock = _try_connect(addr)
    if sock is not None:
        return sock
    if _host_from_template(addr):
        sock = _try_connect(addr)
        if sock is not None:
            return sock
    host = _start_host(addr)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        sock = _try_connect(addr)
        if sock is not None:
            return sock
        if host is None or (host.poll() is not None and host.returncode != 0):
            return None  # it could not start
        time.sleep(0.05)
    return None


def _try_connect(addr: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect("\0" + addr)
        return sock
    except OSError:
        sock.close()
        return None


def _start_host(addr: str) -> subprocess.Popen | None:
    """A host for ``addr``, in a session of its own, holding none of the client's files; the
    process started here binds the address and leaves a fork behind to serve, so the host is no
    job's child (Snakemake's benchmark of a job counts its process's children). Two jobs that
    start one at once each start one, and the second to bind the address leaves."""
    code = (f"import sys; sys.path.insert(0, {str(_root())!r}); from cselab.pipeline.jobhost import serve; "
            f"sys.exit(serve({addr!r}, {int(os.environ.get(INVOCATION_PID_ENV) or os.getppid())}))")
    try:
        return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True, cwd="/")
    except OSError:
        return None


#: environment variables that libraries a host imports read as they are imported (Hugging Face's
#: offline mode and cache, CUDA's devices, the code's path, ...): a template serves only invocations
#: whose values of these equal its own
IMPORT_TIME_ENV = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "TORCH", "PYTORCH_", "CUDA", "LD_",
                   "PYTHONPATH", "PYTHONHOME", "GIT_", "SQLALCHEMY_")
#: ... except those a job sets for itself whatever its process imported: its threads
#: (:func:`cselab.pipeline.jobs.set_threads`; Snakemake sets OMP_/MKL_/OPENBLAS_NUM_THREADS, not
#: keyed), the libraries' progress bars (:func:`cselab.io.quiet_third_party_loggers`) and the
#: compile caches (torch's import sets the default; :mod:`cselab.training.compiled`). MLflow reads
#: its variables when it is called.
SET_BY_JOBS = frozenset({"HF_HUB_DISABLE_PROGRESS_BARS", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"})


def import_time_env(env) -> str:
    """A digest of ``env``'s :data:`IMPORT_TIME_ENV` variables (less :data:`SET_BY_JOBS`)."""
    items = sorted((k, v) for k, v in env.items() if k.startswith(IMPORT_TIME_ENV) and k not in SET_BY_JOBS)
    return hashlib.sha1(repr(items).encode()).hexdigest()[:16]


def template_address(name: str) -> str:
    """The abstract socket of the host template ``name`` for this checkout and Python: a template
    serves only invocations of the code and interpreter it imported."""
    key = "\0".join([name, str(_root()), sys.executable, str(os.getuid())])
    return "cselab-jobhost-template-" + hashlib.sha1(key.encode()).hexdigest()[:20]


def _host_from_template(addr: str) -> bool:
    """Ask the host template named by ``CSELAB_JOB_HOST_TEMPLATE``, if one serves this checkout and
    Python, to fork this invocation's host at ``addr``; False when there is none to ask, when a GPU
    is visible (a template holds torch) or when the template imported under other values of
    :data:`IMPORT_TIME_ENV` (it refuses)."""
    name = os.environ.get(TEMPLATE_ENV)
    if not name or os.environ.get(TORCH_ENV) == "0":
        return False
    conn = _try_connect(template_address(name))
    if conn is None:
        return False
    invocation = int(os.environ.get(INVOCATION_PID_ENV) or os.getppid())
    try:
        conn.settimeout(START_TIMEOUT_S)
        conn.sendall(f"{addr} {invocation} {import_time_env(os.environ)}\n".encode())
        return conn.makefile("rb").readline() == b"H\n"  # bound by its fork, or by another host before
    except OSError:
        return False
    finally:
        conn.close()


def start_template(name: str, root: str | Path | None = None) -> subprocess.Popen:
    """Start the host template ``name`` (:func:`serve_template`) of the code at ``root`` (this
    checkout by default) for this process's lifetime; its invocations find it through
    ``CSELAB_JOB_HOST_TEMPLATE=name`` in their environment."""
    code = (f"import sys; sys.path.insert(0, {str(root or _root())!r}); "
            f"from cselab.pipeline.jobhost import serve_template; "
            f"sys.exit(serve_template({name!r}, {os.getpid()}))")
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, cwd="/")


def serve_template(name: str, parent_pid: int) -> int:
    """A template of hosts, for many invocations in a row (the test suite starts one per worker):
    it imports what a host imports, torch included, once, and forks each invocation's host from
    that state, so no invocation pays the imports. A forked host is what :func:`serve` would be,
    bound to its own invocation's address. The template leaves when ``parent_pid`` has ended. It
    serves the code it imported: start it again after the checkout's code changes."""
    listener = _bind(template_address(name))
    if listener is None:
        return 0  # one already serves this name
    own_env = import_time_env(os.environ)  # before the imports, some of which set such variables
    signal.signal(signal.SIGTERM, _leave)  # terminated, it leaves as a returning one does (exit handlers run)
    _preload(LIGHT + TORCH)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the hosts it forks are not its to wait for
    while _alive(parent_pid):
        if not select.select([listener], [], [], 1.0)[0]:
            continue
        conn, _ = listener.accept()
        try:
            conn.settimeout(10)
            addr, invocation, env = conn.makefile("rb").readline().decode().split()
            invocation_pid = int(invocation)
        except (OSError, ValueError, UnicodeDecodeError):
            conn.close()
            continue
        if env != own_env:  # its imports read other values: the client starts a host of its own
            with contextlib.suppress(OSError):
                conn.sendall(b"N\n")
            conn.close()
            continue
        if os.fork() == 0:
            listener.close()
            return _become_host(conn, addr, invocation_pid)
        conn.close()
    return 0


def _leave(_signum, _frame) -> None:
    raise SystemExit(0)


def _become_host(conn: socket.socket, addr: str, invocation_pid: int) -> int:
    """In the template's fork: a session of its own, the invocation's address bound, then the host."""
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # a host waits for its jobs itself
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # and a signal ends it as it ends a started host
    listener = _bind(addr)
    with contextlib.suppress(OSError):
        conn.sendall(b"H\n")  # bound here, or already by another host: either way the client connects
        conn.close()
    if listener is None:
        return 0
    return _serve_bound(listener, invocation_pid)


def _send_request(conn: socket.socket, smk, job: Callable, runner: Callable) -> None:
    import psutil

    request = {"job": function_name(job), "runner": function_name(runner), "smk": smk, "cwd": os.getcwd(),
               "env": dict(os.environ), "umask": _umask(), "argv": list(sys.argv),
               "started": psutil.Process().create_time(), "torch": job.__name__ in TORCH_JOBS}
    send_request(conn, request, [0, 1, 2])


def send_request(conn: socket.socket, request: dict, fds: list[int]) -> None:
    """``request`` (pickled, its length first) with the three descriptors that become the fork's
    standard streams (:func:`_receive` reads it)."""
    payload = pickle.dumps(request)
    socket.send_fds(conn, [struct.pack("!Q", len(payload))], fds)
    conn.sendall(payload)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _wait_for_job(pid: int, reader) -> int:
    """Pass signals on to the job until the host reports how it ended."""
    def forward(signum, _frame):
        with contextlib.suppress(OSError):
            if signum == signal.SIGINT:
                os.killpg(pid, signum)
            else:
                os.kill(pid, signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    said = None  # the status the job gave itself as it left (``Y``); the host's (``X``) is final
    for line in iter(reader.readline, b""):
        if line.startswith(b"X"):
            return int(line[1:])
        said = int(line[1:]) if line.startswith(b"Y") else said
    # the host is gone without a word: wait for the job itself, whose end it can no longer report
    while _alive(pid) and not _zombie(pid):
        time.sleep(0.5)
    if said is not None:
        return said
    print(f"cselab: the job host ended before this job's process {pid} reported; see the job's log",
          file=sys.stderr)
    return 1


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def exit_like(status: int) -> None:
    """Leave the client as its job left: its exit code, or killed by the same signal."""
    sys.stdout.flush()
    sys.stderr.flush()
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
        time.sleep(5)
    os._exit(status if status >= 0 else 1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- the host --------------------------------------------------------------------------------------

def serve(addr: str, invocation_pid: int) -> int:
    """The host's loop: bind ``addr`` (or leave, if another host has it), import :data:`LIGHT`,
    fork a job for each request; leave once ``invocation_pid`` has ended and no job is running.
    In a fork, returns the job's exit status."""
    listener = _bind(addr)
    if listener is None:
        return 0  # another host has this invocation
    if os.fork():  # the process the client started leaves at once: no job's process tree holds the host
        os._exit(0)
    return _serve_bound(listener, invocation_pid)


def _bind(addr: str) -> socket.socket | None:
    """A listening socket at the abstract address ``addr``; None when another process has it."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind("\0" + addr)
    except OSError:
        listener.close()
        return None
    listener.listen(64)
    return listener


def _serve_bound(listener: socket.socket, invocation_pid: int) -> int:
    """The host's loop on its bound ``listener`` (:func:`serve`)."""
    _preload(LIGHT)
    running: set[int] = set()
    while _alive(invocation_pid) or running:
        if not select.select([listener], [], [], 1.0)[0]:
            continue
        conn, _ = listener.accept()
        try:
            request, fds = _receive(conn)
        except (OSError, EOFError, pickle.UnpicklingError, struct.error):
            conn.close()
            continue
        if request.get("torch") and os.environ.get(TORCH_ENV) != "0":
            _preload(TORCH)
        pid = os.fork()
        if pid == 0:
            listener.close()
            return _become_job(conn, fds, request)
        for fd in fds:
            os.close(fd)
        running.add(pid)
        with contextlib.suppress(OSError):
            conn.sendall(b"P%d\n" % pid)
        threading.Thread(target=_report, args=(pid, conn, running), daemon=True).start()
    return 0


def _preload(modules: tuple[str, ...]) -> None:
    """Import ``modules`` (those missing are skipped), then move every object alive into the
    garbage collector's permanent generation (:func:`gc.freeze`): a fork neither copies their pages
    by collecting them nor traverses them at its exit (3 s a job with torch's imports, 0.6 s frozen)."""
    for name in modules:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    if "transformers" in modules:
        _warm_model_loading()
    gc.freeze()


def _warm_model_loading() -> None:
    """Build what transformers builds on a process's first model load, its checkpoint conversion
    rules (0.11 s a model job), once in the host before it forks jobs; nothing where this version
    of transformers has no such cache."""
    with contextlib.suppress(Exception):
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping

        get_checkpoint_conversion_mapping("bert")


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    head, fds, _flags, _addr = socket.recv_fds(conn, 8, 3)
    try:
        if len(head) != 8 or len(fds) != 3:
            raise EOFError("incomplete request")
        return _receive_payload(conn, struct.unpack("!Q", head)[0]), fds
    except BaseException:
        for fd in fds:  # a cut or damaged request: the descriptors it passed are not kept
            os.close(fd)
        raise


def _receive_payload(conn: socket.socket, size: int) -> dict:
    chunks, left = [], size
    while left:
        chunk = conn.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("incomplete request")
        chunks.append(chunk)
        left -= len(chunk)
    return pickle.loads(b"".join(chunks))


def _report(pid: int, conn: socket.socket, running: set[int]) -> None:
    """Wait for a job and tell its client how it ended (``X<status>``, negative for a signal)."""
    _, status, _usage = os.wait4(pid, 0)
    running.discard(pid)
    code = os.waitstatus_to_exitcode(status)
    with contextlib.suppress(OSError):
        conn.sendall(b"X%d\n" % code)
    conn.close()


def _become_job(conn: socket.socket, fds: list[int], request: dict) -> int:
    """In the fork: take the client's streams, folder and environment, then run its job."""
    os.setpgid(0, 0)
    for signum in FORWARDED:
        signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
    take_over(fds, request)
    os.environ[IN_HOST_ENV] = "1"
    sys.argv = request["argv"]
    _TORCH_BEFORE_THE_JOB[0] = "torch" in sys.modules
    atexit.register(gc.freeze)  # the job's own objects are not traversed at its exit either
    # (cselab.pipeline.config.skip_collection_at_exit: exit handlers still run, nothing unwritten)
    threading.Thread(target=_die_with_client, args=(conn,), daemon=True).start()
    job, runner = named_function(request["job"]), named_function(request["runner"])
    try:
        runner(request["smk"], job, request["started"])
    except SystemExit as e:
        _say_status(conn, e.code)
        raise
    _say_status(conn, 0)
    return 0


def take_over(fds: list[int], request: dict) -> None:
    """In a fork: the requester's standard streams (``fds``), working folder, umask and environment,
    and what a new process would not share with its siblings (:func:`_fresh_process_state`)."""
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    _reopen_std_streams()
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    _fresh_process_state()


def _say_status(conn: socket.socket, code) -> None:
    """Tell the client the job's status as it leaves, so that a host gone meanwhile loses nothing
    (the host's own report, after the process has ended, stays the one the client uses)."""
    status = code if isinstance(code, int) else (0 if code is None else 1)
    with contextlib.suppress(OSError):
        conn.sendall(b"Y%d\n" % status)


def _reopen_std_streams() -> None:
    """Python's standard streams on the client's descriptors, buffered as the client's would be."""
    enc = {"encoding": "utf-8", "errors": "backslashreplace"}
    sys.stdin = open(0, "r", closefd=False, **enc)
    sys.stdout = open(1, "w", buffering=1 if os.isatty(1) else -1, closefd=False, **enc)
    sys.stderr = open(2, "w", buffering=1, closefd=False, **enc)


def _fresh_process_state() -> None:
    """What a new process would not share with its siblings: random seeds, the temporary folder."""
    import random
    import tempfile

    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    tempfile.tempdir = None


def _die_with_client(conn: socket.socket) -> None:
    """The client is gone (killed outright): so is its job, as a job killed outright would be."""
    with contextlib.suppress(OSError):
        while conn.recv(1):
            pass
    os.kill(os.getpid(), signal.SIGKILL)


_TORCH_BEFORE_THE_JOB = [False]


def describe() -> str:
    """For a job's last log line: whether it imported torch (or found it imported by the host)
    and whether it ran as a fork of the warm host."""
    torch = ("not imported" if "torch" not in sys.modules
             else "held by the host" if _TORCH_BEFORE_THE_JOB[0] else "imported")
    return f"torch {torch}; " + ("a fork of the warm job host" if os.environ.get(IN_HOST_ENV) else "its own process")

