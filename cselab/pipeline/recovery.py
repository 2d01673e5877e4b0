"""An invocation that died (``kill -9`` of ``snakemake``, a node that went down) is recognised by
the next one in its folder, which finishes what the dead one left before it plans:

- the dead one is its folder's last invocation (``.snakemake/cselab/invocation.json``, pid and
  command) that never said it ended (:func:`cselab.pipeline.locks.mark_ended`, at a normal exit of any kind);
- every job records itself while it runs (:func:`job_record`: ``.snakemake/cselab/jobs/<pid>.json``,
  its rule, outputs and invocation), so the next invocation says which jobs the dead one left:
  still running (orphans: Snakemake's job processes outlive it), finished, or incomplete;
- an orphan is stopped (SIGTERM: a training checkpoints at the step it is in and ends its MLflow
  run KILLED, which the next attempt reopens) and waited for;
- Snakemake's incomplete markers of the dead invocation's outputs are cleared: for outputs that are
  complete and verified (a trained model against its ``files.json``, a result against its record)
  the outputs are kept, so a training an orphan finished is never trained again; partial outputs
  are removed, so their job runs again (a training resumes from its checkpoint). Snakemake's stale
  lock files go too: no ``--unlock`` or ``--rerun-incomplete`` by hand;
- the dead invocation's MLflow runs still RUNNING end KILLED, and a KILLED run of the invocation
  itself is logged; each is tagged with this invocation, its successor.

All of it with a few lines on stderr; a dry run only says what a run would do.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from cselab.errors import CselabError
from cselab.pipeline.locks import invocation_held

#: where Snakemake keeps its state (its incomplete markers and lock files), and cselab its own
SNAKEMAKE_DIR = Path(".snakemake")
STATE_DIR = SNAKEMAKE_DIR / "cselab"
#: where each running job records itself (:func:`job_record`)
JOBS_DIR = "jobs"
#: the tags that link a dead invocation's runs to the invocation after it
SUCCESSOR_TAG = "cselab.successor_invocation"
#: how long an orphan stopped by SIGTERM may take to end (a training finishes its step and checkpoints)
STOP_WAIT_S = float(os.environ.get("CSELAB_ORPHAN_STOP_WAIT_S", "300"))


@contextlib.contextmanager
def job_record(smk, state_dir: str | Path) -> Iterator[None]:
    """Record the running job (its pid and start, rule, wildcards, outputs, invocation) in
    ``state_dir/jobs/<pid>.json`` for its block; a job killed outright leaves the record behind."""
    from cselab.io import write_json
    from cselab.pipeline.tracking import INVOCATION_ENV

    path = Path(state_dir) / JOBS_DIR / f"{os.getpid()}.json"
    record = {"pid": os.getpid(), "started": _started(os.getpid()), "host": socket.gethostname(), "rule": smk.rule,
              "wildcards": dict(getattr(smk, "wildcards", {}).items()), "outputs": [str(o) for o in smk.output],
              "invocation": os.environ.get(INVOCATION_ENV, "")}
    with contextlib.suppress(OSError):  # a full or read-only disk: the job itself says so
        write_json(path, record)
    ended = "failed"
    try:
        yield
        ended = "done"
    finally:  # kept until the next invocation's start: an orphan that ends is still named
        with contextlib.suppress(OSError):
            write_json(path, {**record, "ended": ended})


def _started(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def alive(pid: int, started: float | None) -> bool:
    """Whether the process ``pid`` that started at ``started`` still runs (not a later one with its
    pid, nor a zombie no parent reaped)."""
    import psutil

    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and (started is None or
                                                             abs(process.create_time() - started) < 1.0)
    except psutil.Error:
        return False


def cluster(args) -> bool:
    """The command hands its jobs to an executor or a profile (a cluster's: each job its own batch job)."""
    return (any(a.split("=")[0] in ("--executor", "-e", "--profile", "--workflow-profile") for a in args)
            or bool(os.environ.get("SNAKEMAKE_PROFILE")))


@dataclass
class LeftJob:
    """A job a dead invocation left: its record and what became of it."""

    record: dict
    state: str = "incomplete"  # "running", "finished" or "incomplete"

    @property
    def label(self) -> str:
        wildcards = ", ".join(f"{k}={v}" for k, v in self.record.get("wildcards", {}).items())
        return f"{self.record.get('rule', '?')}{f' {wildcards}' if wildcards else ''}"


@dataclass
class Dead:
    """A dead invocation: its record (``invocation.json``) and the jobs it left."""

    record: dict
    jobs: list[LeftJob] = field(default_factory=list)

    @property
    def label(self) -> str:
        r = self.record
        return f"{r.get('what', 'snakemake')} (host {r.get('host')}, pid {r.get('pid')}, since {r.get('since')})"


def dead_invocation(previous: dict | None, state_dir: str | Path, holding: bool) -> Dead | None:
    """The folder's last invocation (``previous``: its record, read before this one claimed it)
    when it died: it never said it ended, and this one holds the folder's lock (``holding``) or
    found it free (a dry run). Its jobs are classified (:func:`classify`)."""
    if not previous or previous.get("ended") or previous.get("pid") == os.getpid():
        return None
    if not holding and invocation_held(state_dir):
        return None
    dead = Dead(previous)
    for path in sorted((Path(state_dir) / JOBS_DIR).glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("invocation") == previous.get("invocation"):
            dead.jobs.append(classify(LeftJob({**record, "file": str(path)})))
    return dead


def classify(job: LeftJob) -> LeftJob:
    """What became of a left job: its process still runs; its outputs are complete and verified
    (:func:`outputs_complete`); or neither."""
    record = job.record
    if not record.get("ended") and record.get("host", socket.gethostname()) == socket.gethostname() \
            and alive(int(record["pid"]), record.get("started")):
        job.state = "running"
    else:
        job.state = "finished" if outputs_complete(record.get("outputs", [])) else "incomplete"
    return job


def outputs_complete(outputs: list[str]) -> bool:
    """Whether a job's outputs are all there and verified: a trained model folder against its
    ``files.json``, an evaluation's result against its record, any other file present (cselab
    writes every output whole or not at all)."""
    from cselab.evaluation.records import record_path, result_problem
    from cselab.models.checkpoints import FILES_RECORD, damaged_model
    from cselab.pipeline.outputs import is_result_file

    for out in map(Path, outputs):
        if not out.exists():
            return False
        if out.is_dir() and (out / FILES_RECORD).is_file():
            if damaged_model(out) is not None:
                return False
        elif out.is_dir() and out.name == "model":
            return False  # a model folder without its record: training did not end
        elif is_result_file(str(out)) and (not record_path(out).is_file() or result_problem(out)):
            return False
    return True


def stop_orphans(dead: Dead, wait_s: float = STOP_WAIT_S) -> None:
    """SIGTERM every orphan of ``dead`` (a training checkpoints at the step it is in and leaves) and
    wait for each to end; one that does not is one :class:`CselabError` naming it."""
    running = [j for j in dead.jobs if j.state == "running"]
    for job in running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(job.record["pid"]), signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    for job in running:
        while alive(int(job.record["pid"]), job.record.get("started")):
            if time.monotonic() > deadline:
                raise CselabError(f"job {job.label} of the dead invocation {dead.label} still runs (pid "
                                  f"{job.record['pid']}) {wait_s:g} s after SIGTERM; stop it (kill "
                                  f"{job.record['pid']}) and rerun")
            time.sleep(0.2)
        classify(job)


def incomplete_markers() -> dict[str, Path]:
    """Snakemake's incomplete markers (``.snakemake/incomplete``): output path -> marker file."""
    folder = SNAKEMAKE_DIR / "incomplete"
    out = {}
    for marker in folder.rglob("*") if folder.is_dir() else ():
        if marker.is_file() and marker.name != "migration_underway":
            parts = marker.relative_to(folder).parts  # a long name is split into "@"-prefixed parts
            try:
                out[base64.urlsafe_b64decode("".join(p.lstrip("@") for p in parts)).decode()] = marker
            except (ValueError, UnicodeDecodeError):
                continue
    return out


def clear_snakemake_state(dead: Dead) -> tuple[list[str], list[str]]:
    """Snakemake's stale lock files and incomplete markers removed: an incomplete output that is
    complete and verified is kept, any other is removed (its job runs again). Returns (kept,
    removed) outputs."""
    import shutil

    jobs_of = {out: job for job in dead.jobs for out in job.record.get("outputs", [])}
    kept, removed = [], []
    for output, marker in incomplete_markers().items():
        job = jobs_of.get(output)
        complete = outputs_complete(job.record["outputs"] if job else [output])
        if not complete and Path(output).exists():
            shutil.rmtree(output) if Path(output).is_dir() else Path(output).unlink()
        (kept if complete else removed).append(output)
        marker.unlink(missing_ok=True)
    for lock in (SNAKEMAKE_DIR / "locks").glob("*.lock") if (SNAKEMAKE_DIR / "locks").is_dir() else ():
        lock.unlink(missing_ok=True)
    return kept, removed


def prune_job_records(state_dir: str | Path) -> None:
    """Remove the records of jobs that no longer run (the invocation that starts now keeps its
    own; those of a dead one were read before)."""
    for path in (Path(state_dir) / JOBS_DIR).glob("*.json"):
        try:
            record = json.loads(path.read_text())
            if record.get("ended") or not alive(int(record["pid"]), record.get("started")):
                path.unlink()
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)


def retire_runs(dead: Dead, cfg: dict, successor: str) -> int:
    """The dead invocation's MLflow runs still RUNNING end KILLED, tagged with their successor (this
    invocation), and the dead invocation gets its own run (rule ``invocation``), KILLED; returns the
    runs ended. A store that cannot be reached changes nothing (the jobs say so when they start)."""
    from mlflow.tracking import MlflowClient

    from cselab.pipeline.tracking import INVOCATION_TAG, resolve_tracking_uri

    invocation = dead.record.get("invocation")
    if not invocation:
        return 0
    store_log = logging.getLogger("mlflow.store.db.utils")  # it logs a store error's traceback, then raises it
    level = store_log.level
    store_log.setLevel(logging.CRITICAL)
    try:
        client = MlflowClient(resolve_tracking_uri(cfg))
        exp = client.get_experiment_by_name(cfg["mlflow"]["experiment_name"])
        if exp is None:
            return 0
        runs = client.search_runs([exp.experiment_id], f"tags.`{INVOCATION_TAG}` = '{invocation}'")
        ended = 0
        for run in runs:
            client.set_tag(run.info.run_id, SUCCESSOR_TAG, successor)
            if run.info.status == "RUNNING":
                client.set_terminated(run.info.run_id, status="KILLED")
                ended += 1
        own = client.create_run(exp.experiment_id, run_name=f"invocation:{invocation}", tags={
            "rule": "invocation", INVOCATION_TAG: invocation, SUCCESSOR_TAG: successor,
            "cselab.command": dead.record.get("what", ""), "cselab.died": "no end recorded; its process is gone"})
        client.set_terminated(own.info.run_id, status="KILLED")
        return ended
    except Exception as e:  # noqa: BLE001 (MLflow's and the store's own errors alike)
        print(f"cselab: the dead invocation's MLflow runs were not marked KILLED ({str(e).splitlines()[0]})",
              file=sys.stderr)
        return 0
    finally:
        store_log.setLevel(level)


def recover(previous: dict | None, state_dir: str | Path, cfg: dict, executing: bool, successor: str) -> Dead | None:
    """Everything above for the folder's last invocation when it died, with its lines on stderr;
    a dry run (``executing`` False) only says what a run would do. A dead invocation that handed its
    jobs to a cluster (an executor, a profile) is only named: its jobs may still run there."""
    dead = dead_invocation(previous, state_dir, holding=executing)
    if dead is None:
        if executing:
            prune_job_records(state_dir)
        return None
    if cluster(dead.record.get("what", "").split()):
        print(f"cselab: the last invocation in this folder died without ending: {dead.label}; its jobs ran on a "
              "cluster and may still run: check them, then rerun with --rerun-incomplete", file=sys.stderr)
        return dead
    left = "; ".join(f"{j.label}: {j.state}" + (f" (orphan pid {j.record['pid']})" if j.state == "running" else "")
                     for j in dead.jobs) or "no job records"
    print(f"cselab: the last invocation in this folder died without ending: {dead.label}. Its jobs: {left}",
          file=sys.stderr)
    if not executing:
        print("cselab: a real run stops its orphans (a training checkpoints), keeps what they finished and "
              "clears Snakemake's lock and incomplete markers", file=sys.stderr)
        return dead
    stop_orphans(dead)
    kept, removed = clear_snakemake_state(dead)
    prune_job_records(state_dir)
    ended = retire_runs(dead, cfg, successor)
    print(f"cselab: cleared Snakemake's lock and {len(kept) + len(removed)} incomplete marker(s): kept "
          f"{len(kept)} output(s) complete and verified ({', '.join(kept) or 'none'}), removed {len(removed)} partial "
          f"one(s) ({', '.join(removed) or 'none'}), whose jobs run again (a training resumes from its checkpoint); "
          f"{ended} of its MLflow run(s) ended KILLED", file=sys.stderr)
    return dead
