"""MLflow tracking: every rule job is one MLflow run.

The store is ``sqlite:///results/mlflow.db`` by default (artifacts under
``results/mlartifacts``); ``MLFLOW_TRACKING_URI`` points the workflow at any tracking server.
Each run is tagged with the rule, the experiment id, the git commit and library versions, so a
number can always be traced back to the code and settings that produced it.

A remote (http/https) server is checked at the start of every run, before the job's work:
when it does not answer, the job fails at once with a :class:`TrackingError` naming the server
and the ways out, or, with ``mlflow.fallback: local`` in the config, logs to the local store
instead and tags the run ``cselab.tracking_fallback=<server>`` so it can be found and merged
later. A server that stops answering in the middle of a run fails the job with the same kind
of message; result files of jobs that already finished are never touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import platform
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from cselab.errors import TrackingError
from cselab.pipeline import outputs
from cselab.training.preemption import Preempted

log = logging.getLogger(__name__)

LOCAL_STORE = outputs.MLFLOW_STORE
FALLBACK_TAG = "cselab.tracking_fallback"
#: The environment variable naming one ``snakemake`` invocation (set by the Snakefile); every run
#: it starts carries it as the tag :data:`INVOCATION_TAG`, so one invocation's runs group in the UI.
INVOCATION_ENV = "CSELAB_INVOCATION"
COMMAND_ENV = "CSELAB_COMMAND"  # the snakemake command line of the invocation (model cards quote it)
INVOCATION_TAG = "snakemake.invocation"
FALLBACKS = ("none", "local")
# The reachability check: seconds per attempt, retries after the first attempt.
CHECK_TIMEOUT = 5.0
CHECK_RETRIES = 2

_PACKAGES = ("torch", "transformers", "tokenizers", "numpy", "scipy", "mlflow", "snakemake", "sentence-transformers")


def versions() -> dict[str, str]:
    from importlib import metadata

    import cselab

    out = {"python": platform.python_version(), "cselab": cselab.__version__}
    for pkg in _PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def git_commit() -> str:
    """The commit of the cselab checkout (``+dirty`` when it has uncommitted changes)."""
    repo = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                             text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def metric_name(name: str) -> str:
    """MLflow allows letters, digits and ``_-. :/`` in metric names: ``R@1`` -> ``R_at_1``."""
    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", name.replace("@", "_at_"))


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


@contextlib.contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    """Serialise creation of a local SQLite store (parallel first jobs would race the schema)."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    db = Path(uri[len("sqlite:///"):])
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.parent / ".mlflow.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def _readable_store(uri: str) -> Iterator[None]:
    """A local SQLite store that is not a readable MLflow database ends in one message naming it."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 (SQLAlchemy's, alembic's and MLflow's own errors alike)
        if not uri.startswith("sqlite:///") or isinstance(e, TrackingError):
            raise
        db = uri[len("sqlite:///"):]
        raise TrackingError(f"the MLflow store {db} cannot be read ({_reason(e)}): it is damaged or not an MLflow "
                            f"database. Move it aside (mv {db} {db}.damaged) and rerun to start a new store (results "
                            "on disk are kept; their runs are in the old file), or point MLFLOW_TRACKING_URI at "
                            "another store") from e


def is_remote(uri: str) -> bool:
    return uri.lower().startswith(("http://", "https://"))


def _reason(exc: BaseException) -> str:
    """The root cause of a failed request in a few words ("Connection refused", "timed out")."""
    seen, deepest = set(), exc
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        deepest = exc
        exc = exc.__cause__ or exc.__context__
    text = getattr(deepest, "strerror", None) or str(deepest) or type(deepest).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def probe(uri: str, timeout: float | None = None, retries: int | None = None) -> str | None:
    """Why the tracking server at ``uri`` does not answer ``GET /health``; ``None`` when it does.

    Any HTTP answer below 500 counts as an answer (an auth error or a proxy without
    ``/health`` is reported by MLflow itself later); a refused or timed-out connection, an
    unknown host or a 5xx (a proxy whose server is down) does not. Uses MLflow's own HTTP
    client, so ``MLFLOW_TRACKING_INSECURE_TLS``, certificates and credentials apply.
    """
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    timeout = CHECK_TIMEOUT if timeout is None else timeout
    retries = CHECK_RETRIES if retries is None else retries
    pool_log = logging.getLogger("urllib3.connectionpool")  # one "Retrying ..." warning per retry
    level = pool_log.level
    pool_log.setLevel(logging.ERROR)
    try:
        resp = http_request(get_default_host_creds(uri), "/health", "GET", max_retries=retries,
                            backoff_factor=0.5, backoff_jitter=0.1, timeout=timeout, raise_on_status=False)
    except Exception as e:  # noqa: BLE001 - any failure to get an answer means "not reachable"
        return _reason(e)
    finally:
        pool_log.setLevel(level)
    return f"GET /health answered HTTP {resp.status_code}" if resp.status_code >= 500 else None


def _unreachable(uri: str, reason: str, during: str | None = None, from_env: bool | None = None) -> str:
    if from_env is None:
        from_env = os.environ.get("MLFLOW_TRACKING_URI") == uri
    local = ("unset MLFLOW_TRACKING_URI to use the local store" if from_env
             else "set mlflow.tracking_uri to the local store")
    what = (f"MLflow tracking server {uri} stopped answering during {during} ({reason}), so the job failed "
            f"with its run incomplete; rerun it once the server is back, " if during
            else f"MLflow tracking server {uri} is not reachable ({reason}); start it, ")
    return f"{what}{local} {LOCAL_STORE}, or set mlflow.fallback: local in the config"


@dataclass(frozen=True)
class Target:
    """Where a run is logged: ``uri``; ``fallback_from`` is the unreachable server it replaces."""

    uri: str
    fallback_from: str | None = None


def resolve(uri: str, fallback: str = "none") -> Target:
    """The one place that decides where runs go: ``uri`` if it answers (or is not remote),
    else the local store when ``fallback`` is ``"local"``, else a :class:`TrackingError`."""
    if fallback not in FALLBACKS:
        raise TrackingError(f"config key 'mlflow.fallback': {fallback!r} is not one of {list(FALLBACKS)}")
    reason = probe(uri) if is_remote(uri) else None
    if not reason:
        return Target(uri)
    if fallback != "local":
        raise TrackingError(_unreachable(uri, reason))
    log.warning("MLflow tracking server %s is not reachable (%s); mlflow.fallback is 'local': logging to %s "
                "instead, runs tagged %s=%s", uri, reason, LOCAL_STORE, FALLBACK_TAG, uri)
    return Target(LOCAL_STORE, fallback_from=uri)


def resolve_tracking(cfg: dict) -> Target:
    """:func:`resolve` for a validated config (``MLFLOW_TRACKING_URI`` wins over the config)."""
    from cselab.pipeline.config import tracking_uri
    from cselab.settings import typed_config

    return resolve(tracking_uri(cfg), typed_config(cfg).mlflow.fallback)


def resolve_tracking_uri(cfg: dict) -> str:
    return resolve_tracking(cfg).uri


def refuse_empty_store(uri: str) -> None:
    """A local store that is an empty file (emptied, or cut to nothing) is one message: MLflow
    would create a new store in it without a word, and the runs the folder's results came from
    would be gone from the UI."""
    if not uri.startswith("sqlite:///"):
        return
    db = Path(uri[len("sqlite:///"):])
    if db.is_file() and db.stat().st_size == 0:
        raise TrackingError(f"the MLflow store {db} is empty (0 bytes): its runs are lost from it. Restore it from "
                            f"a backup, or move it aside (mv {db} {db}.damaged) and rerun to start a new store "
                            "(results on disk are kept)")


def init_store(uri: str, experiment_name: str) -> str:
    """Create (or find) the MLflow experiment; returns its id. Safe to call from many jobs.

    Uses a client for ``uri`` rather than ``mlflow.set_tracking_uri``, which would also export
    ``MLFLOW_TRACKING_URI`` to every job Snakemake starts after ``onstart``.
    """
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from cselab.io import quiet_third_party_loggers

    quiet_third_party_loggers()  # MLflow's "Creating initial MLflow database tables" stays off the console
    refuse_empty_store(uri)
    moved = relocate_artifacts(uri)  # the invocation's start has said it already (rules/common.smk)
    if moved:
        log.info("%s", moved)
    with _store_lock(uri), _readable_store(uri):
        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name(experiment_name)
        if exp is not None:
            return exp.experiment_id
        location = None
        if uri.startswith("sqlite:///"):
            location = (Path(uri[len("sqlite:///"):]).resolve().parent / "mlartifacts").as_uri()
        try:
            return client.create_experiment(experiment_name, artifact_location=location)
        except MlflowException:  # created meanwhile by another process
            return client.get_experiment_by_name(experiment_name).experiment_id


#: the columns of a local store that hold where artifacts live (MLflow writes them absolute)
ARTIFACT_COLUMNS = (("experiments", "artifact_location"), ("runs", "artifact_uri"),
                    ("logged_models", "artifact_location"))


def relocate_artifacts(uri: str) -> str | None:
    """A local store (``sqlite:///results/mlflow.db``) whose experiments keep their artifacts in
    another folder's ``results/mlartifacts`` (the project folder was moved or copied: MLflow
    records absolute locations) is pointed back at this folder's, so nothing is written outside
    it and the old runs' artifacts (moved or copied with it) are found again; returns the one line
    that says so, or None when there was nothing to correct (or no such store)."""
    import sqlite3

    if not uri.startswith("sqlite:///"):
        return None
    db = Path(uri[len("sqlite:///"):])
    if not db.is_file():
        return None
    here = (db.resolve().parent / "mlartifacts").as_uri()
    with _store_lock(uri), contextlib.closing(sqlite3.connect(db)) as con:
        try:
            found = [row[0] for row in con.execute("SELECT artifact_location FROM experiments")]
        except sqlite3.Error:
            return None  # not an MLflow store yet: init_store names a damaged one
        old = sorted({loc for loc in found if loc and loc.startswith("file://") and loc.endswith("/mlartifacts")
                      and loc != here})
        if not old:
            return None
        tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        runs = 0
        with con:
            for prefix in old:
                for table, column in ARTIFACT_COLUMNS:
                    if table in tables:
                        cur = con.execute(f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
                                          f"WHERE substr({column}, 1, ?) = ?", (here, len(prefix) + 1, len(prefix), prefix))
                        runs += cur.rowcount if table == "runs" else 0
    return (f"the MLflow store {db} kept its artifacts in {', '.join(old)} (the project folder was moved or copied): "
            f"its experiments and {runs} run(s) now keep them in {here}")


#: where a training job keeps the MLflow calls a tracking outage kept from the server
BUFFER_NAME = "mlflow_buffer.jsonl"
REPLAY_EVERY_S = 15.0  # while the server is down, how often the buffer is tried again


def _tracking_errors() -> tuple[type[BaseException], ...]:
    import requests
    from mlflow.exceptions import MlflowException

    return MlflowException, requests.RequestException, OSError


def is_outage(e: BaseException) -> bool:
    """Whether a failed MLflow call means the server is away (no connection, a timeout, a 5xx),
    as opposed to a call the server rejected (a deleted run, an invalid value), which no replay
    would ever get through."""
    import requests
    from mlflow.exceptions import MlflowException

    if isinstance(e, (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError)):
        return True
    if isinstance(e, MlflowException):
        status = e.get_http_status_code()
        text = str(e)
        return status >= 500 and ("API request to" in text or "Max retries" in text or status >= 502)
    return False


class Buffer:
    """MLflow calls that could not reach the server, in order, one JSON line each (a batch of
    metrics, tags, an artifact, the run's end), replayed when the server answers again, at the
    latest when the job ends; ``python -m cselab.pipeline.tracking replay <file>`` replays a
    buffer a job left behind."""

    def __init__(self, path: Path, uri: str, run_id: str):
        self.path, self.uri, self.run_id = Path(path), uri, run_id
        self.last_try = 0.0

    def __len__(self) -> int:
        try:
            with open(self.path) as fh:
                return sum(1 for _ in fh)
        except OSError:
            return 0

    def __bool__(self) -> bool:
        """Whether calls are waiting (asked at every step of an outage: the file's size, not its lines)."""
        try:
            return os.stat(self.path).st_size > 0
        except OSError:
            return False

    def add(self, op: str, **kwargs) -> None:
        with open(self.path, "a") as fh:
            fh.write(json.dumps({"op": op, "uri": self.uri, "run_id": self.run_id, **kwargs}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def drop_ends(self) -> None:
        """Forget buffered ends of this run (an attempt that reopens it supersedes them)."""
        try:
            ops = [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
        except OSError:
            return
        keep = [o for o in ops if not (o["op"] == "end_run" and o["run_id"] == self.run_id)]
        if len(keep) != len(ops):
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text("".join(json.dumps(o) + "\n" for o in keep))
            os.replace(tmp, self.path)

    def replay(self) -> bool:
        """Send the buffered calls in order; True when none is left (the file is then removed)."""
        self.last_try = time.monotonic()
        return replay_file(self.path) == 0


def _execute(client, op: dict) -> None:
    from mlflow.entities import Metric

    run_id = op["run_id"]
    if op["op"] == "log_batch":
        client.log_batch(run_id, metrics=[Metric(k, v, ts, step) for k, v, ts, step in op["metrics"]])
    elif op["op"] == "set_tags":
        for k, v in op["tags"].items():
            client.set_tag(run_id, k, v)
    elif op["op"] == "log_artifact":
        path = Path(op["path"])
        if path.is_dir():
            client.log_artifacts(run_id, str(path), op.get("artifact_path"))
        elif path.is_file():
            client.log_artifact(run_id, str(path), op.get("artifact_path"))
    elif op["op"] == "end_run":
        client.set_terminated(run_id, status=op["status"])


#: the most metrics one replayed ``log_batch`` request carries (MLflow's own limit per request)
MAX_REPLAY_METRICS = 1000


def replay_file(path: str | Path) -> int:
    """Replay a buffer file's calls in order; return how many are left (0: the file is removed).

    Consecutive buffered metric batches of one run go as one request of up to
    :data:`MAX_REPLAY_METRICS` metrics, so an outage of many steps replays in a few requests, not
    one per step. A merged request the server rejects is sent again call by call: only the calls
    it rejects are dropped (and said)."""
    from mlflow import MlflowClient

    path = Path(path)
    try:
        ops = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return 0
    clients: dict = {}
    i, alone = 0, 0  # the calls before ``alone`` go one by one (their merged request was rejected)
    while i < len(ops):
        end = i + 1 if i < alone else _metric_run(ops, i)
        uri = ops[i]["uri"]
        if uri not in clients:
            clients[uri] = MlflowClient(uri)
        try:
            _execute(clients[uri], _merged(ops[i:end]))
        except _tracking_errors() as e:
            if is_outage(e):
                rest = path.with_name(f".{path.name}.{os.getpid()}.tmp")
                rest.write_text("".join(json.dumps(o) + "\n" for o in ops[i:]))
                os.replace(rest, path)
                return len(ops) - i
            if end - i > 1:
                alone = end
                continue
            log.warning("MLflow rejected a buffered %s for run %s (%s): dropped", ops[i]["op"], ops[i]["run_id"], _reason(e))
        i = end
    path.unlink(missing_ok=True)
    return 0


def _metric_run(ops: list[dict], start: int) -> int:
    """The end of the calls from ``start`` that go as one request: consecutive ``log_batch`` calls
    of one run and server, up to :data:`MAX_REPLAY_METRICS` metrics (any other call alone)."""
    first, end = ops[start], start + 1
    if first["op"] != "log_batch":
        return end
    count = len(first["metrics"])
    while end < len(ops):
        op = ops[end]
        if (op["op"], op["uri"], op["run_id"]) != ("log_batch", first["uri"], first["run_id"]) \
                or count + len(op["metrics"]) > MAX_REPLAY_METRICS:
            break
        count, end = count + len(op["metrics"]), end + 1
    return end


def _merged(ops: list[dict]) -> dict:
    """One call for ``ops``: the call itself, or one run's metric batches as one batch."""
    return ops[0] if len(ops) == 1 else {**ops[0], "metrics": [m for op in ops for m in op["metrics"]]}


class Run:
    """A thin handle on the active MLflow run. With a :class:`Buffer` (a training job), a call
    the server does not take is buffered instead of failing the job."""

    def __init__(self, run, buffer: Buffer | None = None):
        self.run = run
        self.run_id = run.info.run_id
        self.buffer = buffer

    def _guard(self, call, op: str, **buffered) -> None:
        if self.buffer:
            self.buffer.add(op, **buffered)  # keep the order: after what is already buffered
            return
        try:
            call()
        except _tracking_errors() as e:
            if self.buffer is None:
                raise
            if not is_outage(e):
                log.warning("MLflow rejected %s (%s): not logged", op, _reason(e))
                return
            log.warning("MLflow did not take %s (%s): buffered in %s", op, _reason(e), self.buffer.path)
            self.buffer.add(op, **buffered)

    def log_params(self, params: dict) -> None:
        import mlflow

        flat = {metric_name(k): (json.dumps(v) if isinstance(v, (list, tuple)) else v)
                for k, v in flatten(params).items()}
        items = list(flat.items())
        for i in range(0, len(items), 100):
            mlflow.log_params(dict(items[i:i + 100]))

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        import mlflow

        clean = {metric_name(k): float(v) for k, v in metrics.items() if v is not None}
        now = int(time.time() * 1000)
        self._guard(lambda: mlflow.log_metrics(clean, step=step, timestamp=now), "log_batch",
                    metrics=[[k, v, now, step or 0] for k, v in clean.items()])

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        import mlflow

        path = Path(path)
        call = ((lambda: mlflow.log_artifacts(str(path), artifact_path=artifact_path)) if path.is_dir()
                else (lambda: mlflow.log_artifact(str(path), artifact_path=artifact_path)))
        self._guard(call, "log_artifact", path=str(path.resolve()), artifact_path=artifact_path)

    def set_tags(self, tags: dict[str, Any]) -> None:
        import mlflow

        clean = {k: str(v) for k, v in tags.items()}
        self._guard(lambda: mlflow.set_tags(clean), "set_tags", tags=clean)

    def flush(self) -> bool:
        """Replay the buffer (training is over: wait for the server with backoff, up to
        :data:`FLUSH_WAIT_S`); True when nothing is left."""
        if not self.buffer:
            return True
        deadline, pause = time.monotonic() + FLUSH_WAIT_S, 2.0
        while not self.buffer.replay():
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 30.0)
        log.info("MLflow answers again: the buffered calls were replayed")
        return True


#: how long a training job that ends during an outage waits for the server before it leaves
#: its buffer behind (its outputs are written either way)
FLUSH_WAIT_S = float(os.environ.get("CSELAB_MLFLOW_FLUSH_WAIT_S", "120"))


class RunMetrics:
    """Log curve rows to one run by id: picklable, so a training process other than the job's
    own (rank 0 of a multi-process job) reports to the job's run while it trains. With a buffer
    file, a row the server does not take (after MLflow's own retries) is buffered and training
    goes on; the buffer is retried every :data:`REPLAY_EVERY_S` seconds and before the job ends."""

    def __init__(self, uri: str, run_id: str, buffer: str | Path | None = None):
        self.uri, self.run_id, self.buffer_path = uri, run_id, buffer
        self._buffer: Buffer | None = None

    @classmethod
    def of(cls, run: Run) -> "RunMetrics":
        import mlflow

        return cls(mlflow.get_tracking_uri(), run.run_id, run.buffer.path if run.buffer is not None else None)

    def __call__(self, row: dict) -> None:
        from mlflow import MlflowClient
        from mlflow.entities import Metric

        step, now = int(row["step"]), int(time.time() * 1000)
        metrics = [[metric_name(k), float(v), now, step] for k, v in row.items()
                   if k not in ("step", "epoch") and v is not None]
        if self._buffer is None and self.buffer_path:
            self._buffer = Buffer(Path(self.buffer_path), self.uri, self.run_id)
        buffer = self._buffer
        if buffer:
            if time.monotonic() - buffer.last_try < REPLAY_EVERY_S or not buffer.replay():
                buffer.add("log_batch", metrics=metrics)
                return
        try:
            MlflowClient(self.uri).log_batch(self.run_id, metrics=[Metric(*m) for m in metrics])
        except _tracking_errors() as e:
            if buffer is None:
                raise
            if not is_outage(e):
                log.warning("MLflow rejected the metrics of step %d (%s): not logged", step, _reason(e))
                return
            log.warning("MLflow did not take the metrics of step %d (%s): training goes on, metrics buffered in "
                        "%s", step, _reason(e), buffer.path)
            buffer.add("log_batch", metrics=metrics)
            buffer.last_try = time.monotonic()


#: a training job's MLflow run id, kept in its output folder while the job has not completed
RUN_FILE = "mlflow_run.json"
RESUMED_TAG, SUCCESSOR_TAG, PREDECESSOR_TAG = "cselab.resumed", "cselab.successor_run_id", "cselab.predecessor_run_id"
PREEMPTED_TAG = "cselab.preempted"  # the signal and the last step of an attempt stopped by a signal


def previous_run(out_dir: Path) -> str | None:
    """The MLflow run id of this job's last attempt when it did not complete (killed, failed)."""
    path = Path(out_dir) / RUN_FILE
    try:
        return json.loads(path.read_text())["run_id"]
    except (OSError, ValueError, KeyError):
        return None


def remember_run(out_dir: Path, run_id: str) -> None:
    from cselab.io import write_json

    write_json(Path(out_dir) / RUN_FILE, {"run_id": run_id})


def forget_run(out_dir: Path) -> None:
    (Path(out_dir) / RUN_FILE).unlink(missing_ok=True)


def retire(run_id: str, successor: str) -> None:
    """An interrupted attempt that the new one does not resume: marked KILLED when a hard kill left
    it RUNNING, and pointing to its successor (the successor points back)."""
    import mlflow
    from mlflow.exceptions import MlflowException

    client = mlflow.MlflowClient()
    try:
        if client.get_run(run_id).info.status == "RUNNING":
            client.set_terminated(run_id, status="KILLED")
        client.set_tag(run_id, SUCCESSOR_TAG, successor)
        client.set_tag(successor, PREDECESSOR_TAG, run_id)
    except MlflowException as e:  # deleted meanwhile, or another store: nothing to retire
        log.info("could not mark the interrupted MLflow run %s: %s", run_id, e)


def _resumable(run_id: str | None):
    """The run to continue (an interrupted attempt of this job in the current store), or None."""
    if not run_id:
        return None
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        return mlflow.MlflowClient().get_run(run_id)
    except MlflowException:
        return None


def _end(handle: Run, status: str) -> None:
    """End the active run; a buffered run whose server is down leaves its end in the buffer."""
    import mlflow

    if handle.buffer is None:
        mlflow.end_run(status)
        return
    if handle.flush():
        try:
            mlflow.end_run(status)
            return
        except _tracking_errors():
            pass
    handle.buffer.add("end_run", status=status)
    with contextlib.suppress(*_tracking_errors()):
        mlflow.end_run(status)  # the local run stack ends here; the server gets the status on replay
    message = (f"MLflow server {handle.buffer.uri} did not answer after training; the run {handle.run_id}'s last "
               f"{len(handle.buffer)} call(s) (metrics, artifacts, its end: {status}) are in {handle.buffer.path}. "
               f"The outputs are complete. Replay them when the server is back: "
               f"python -m cselab.pipeline.tracking replay {handle.buffer.path}")
    log.warning("%s", message)
    print(f"\ncselab: {message}\n", file=sys.stderr)


def limit_http_retries() -> None:
    """MLflow's HTTP retries for a training job (unless set): a failed call costs seconds, not the
    minutes of MLflow's defaults, and the job's buffer takes over (:class:`Buffer`)."""
    for name, value in (("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1"), ("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1"),
                        ("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")):
        os.environ.setdefault(name, value)


def main(argv: list[str] | None = None) -> int:
    """``python -m cselab.pipeline.tracking replay FILE...``: send a job's buffered MLflow calls."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m cselab.pipeline.tracking", description=main.__doc__)
    ap.add_argument("command", choices=["replay"])
    ap.add_argument("files", nargs="+", type=Path)
    args = ap.parse_args(argv)
    left = 0
    for path in args.files:
        n = replay_file(path)
        print(f"{path}: {'all calls replayed' if n == 0 else f'{n} call(s) left (the server did not answer)'}")
        left += n
    return 1 if left else 0


def _log_params_once(handle: "Run", params: dict, logged: dict) -> None:
    """A resumed run keeps its params; a value that changed since (an operational setting such
    as the number of processes) becomes a tag ``cselab.resume.<param>``."""
    flat = {metric_name(k): (json.dumps(v) if isinstance(v, (list, tuple)) else v) for k, v in flatten(params).items()}
    new = {k: v for k, v in flat.items() if k not in logged}
    changed = {k: v for k, v in flat.items() if k in logged and logged[k] != str(v)}
    if new:
        handle.log_params(new)
    if changed:
        handle.set_tags({f"cselab.resume.{k}": v for k, v in changed.items()})


def _new_run(experiment: str, name: str, tags: dict[str, str]) -> str:
    """A new run's id, created with exactly ``tags`` and its user: not by ``mlflow.start_run``,
    whose run-context providers (Databricks' notebook checks import IPython; git of the script's
    folder, here Snakemake's temporary copy) cost a job 0.4 CPU-s (docs/speed.md) for tags this
    run names itself."""
    import getpass

    import mlflow

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # a container's uid with no name
        user = "unknown"
    return mlflow.MlflowClient().create_run(experiment, run_name=name, tags={"mlflow.user": user, **tags}).info.run_id


@contextlib.contextmanager
def mlflow_run(*, uri: str, experiment_name: str, rule: str, experiment_id: str | None = None,
               params: dict | None = None, tags: dict | None = None, label: str | None = None,
               fallback: str = "none", source: str | None = None, resume: str | None = None,
               buffer: Path | None = None) -> Iterator[Run]:
    """Open one MLflow run for a rule job, tagged for traceability; failed jobs end FAILED.

    ``uri`` is checked first (see :func:`resolve`), so an unreachable server fails the job
    before its work; a server that stops answering later fails it with a :class:`TrackingError`,
    except with a ``buffer`` file (a training job): its calls are then buffered, replayed when the
    server answers again, and at the end, where a server still down after
    :data:`FLUSH_WAIT_S` leaves the rest (the run's end included) in the buffer with one message
    saying how to replay it; the job's outputs are kept either way.
    ``source`` (the rule's script, relative to the repository) is the run's source in the UI.
    ``resume``: the run id of an interrupted attempt this job continues (from its checkpoint):
    that run is reopened (tagged ``cselab.resumed``) instead of a new one.
    """
    import mlflow
    import requests
    from mlflow.exceptions import MlflowException

    from_env = os.environ.get("MLFLOW_TRACKING_URI") == uri
    target = resolve(uri, fallback)
    exp = init_store(target.uri, experiment_name)
    mlflow.set_tracking_uri(target.uri)
    commit = git_commit()
    all_tags = {"rule": rule, "experiment_id": experiment_id or "", "git_commit": commit,
                "mlflow.source.git.commit": commit.removesuffix("+dirty"),
                **{f"version.{k}": v for k, v in versions().items()}, **(tags or {})}
    if source:
        all_tags.update({"mlflow.source.name": source, "mlflow.source.type": "JOB"})
    if os.environ.get(INVOCATION_ENV):
        all_tags[INVOCATION_TAG] = os.environ[INVOCATION_ENV]
    if target.fallback_from:
        all_tags[FALLBACK_TAG] = target.fallback_from
    run_name = f"{rule}:{experiment_id or label}" if (experiment_id or label) else rule
    previous = _resumable(resume)
    try:
        if previous is not None:
            attempts = int(previous.data.tags.get(RESUMED_TAG, "0")) + 1
            all_tags[RESUMED_TAG] = attempts
        tags = {k: str(v) for k, v in all_tags.items()}
        run_id = previous.info.run_id if previous is not None else _new_run(exp, run_name, tags)
        with mlflow.start_run(run_id=run_id, tags=tags if previous is not None else None) as run:
            handle = Run(run, Buffer(buffer, target.uri, run.info.run_id) if buffer else None)
            if handle.buffer is not None and previous is not None:
                handle.buffer.drop_ends()
            if params:
                _log_params_once(handle, params, previous.data.params if previous is not None else {})
            try:
                yield handle
            except Preempted as e:  # stopped on a signal with a checkpoint: KILLED, reopened by the next attempt
                handle.set_tags({PREEMPTED_TAG: f"{signal.Signals(e.signum).name} after step {e.step}"})
                _end(handle, "KILLED")
                raise
            _end(handle, "FINISHED")
    except (MlflowException, requests.RequestException) as e:
        if not is_remote(target.uri):
            raise
        if probe(target.uri, retries=0):
            raise TrackingError(_unreachable(target.uri, _reason(e), during=f"rule {rule}",
                                             from_env=from_env)) from e
        raise


if __name__ == "__main__":
    sys.exit(main())
