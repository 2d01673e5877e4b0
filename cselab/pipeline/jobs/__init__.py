"""Rule jobs: one module per rule family (:mod:`.data`, :mod:`.train`, :mod:`.evaluate`,
:mod:`.report`), one function per rule, each one MLflow run.

``workflow_scripts/<rule>.py`` calls :func:`main` with its job function. Jobs take plain paths and
dicts from the ``snakemake`` object and call the library; a user error (:class:`CselabError`)
becomes one clear line on stderr and in the job's log, not a traceback.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Callable

import cselab.io
from cselab.errors import CselabError, named_storage_errors
from cselab.pipeline import recovery
from cselab.io import quiet_third_party_loggers
from cselab.pipeline.operations import operations  # noqa: F401 (the jobs' one reader of how to run)
from cselab.training.preemption import REQUEUE_EXIT, Preempted, requeue_slurm_job

log = logging.getLogger("cselab")



def run(smk, experiment_id: str | None = None, params: dict | None = None, label: str | None = None,
        resume: str | None = None, buffer: Path | None = None):
    """The job's MLflow run (its source is the rule's own script); a remote tracking server is
    checked first (``mlflow.fallback``); ``resume``: an interrupted attempt's run to continue;
    ``buffer``: where calls wait out a tracking outage (training jobs)."""
    from cselab.pipeline.tracking import mlflow_run

    ops = operations(smk)
    mlflow = ops.mlflow
    return mlflow_run(uri=ops.tracking_uri, fallback=mlflow.fallback,
                      experiment_name=mlflow.experiment_name, rule=smk.rule, experiment_id=experiment_id,
                      params=params, label=label, tags={"snakemake.jobid": getattr(smk, "jobid", "")},
                      source=f"workflow_scripts/{smk.cselab_job}.py", resume=resume, buffer=buffer)


def encoder_settings(smk) -> dict:
    """The encoder settings of an evaluating job: its spec's (pooler, truncation) with the
    operational ones (batch sizes, the embedding cache)."""
    return {**smk.params.settings, **operations(smk).encoding}


#: when the job's process started
PROCESS_START: list[float | None] = [None]


def process_seconds() -> float:
    """Wall seconds since this job's process started (its interpreter start and imports included)."""
    if PROCESS_START[0] is None:
        import psutil

        PROCESS_START[0] = psutil.Process().create_time()
    return time.time() - PROCESS_START[0]


def time_breakdown(phases: dict[str, float], log_prefix: str) -> dict[str, float]:
    """Where a job's process spent its time: ``phases`` (the loop's, :class:`Trainer.phase`)
    plus the start of the process and the rest (MLflow, model load outside them, saving the
    outputs); logged as one line and returned for the summary and the MLflow run."""
    total = process_seconds()
    phases = {"start": _CLOCK.get("start", 0.0), **phases}
    out = {k: round(v, 2) for k, v in phases.items()}
    out["other"] = round(max(0.0, total - sum(phases.values())), 2)
    out["total"] = round(total, 2)
    work = out.get("train_steps", 0.0) + out.get("dev_eval", 0.0) + out.get("evaluate", 0.0)
    out["outside_work"] = round(total - work, 2)
    log.info("%s: %s", log_prefix, ", ".join(f"{k} {v:.1f} s" for k, v in out.items()))
    return out


_CLOCK: dict[str, float] = {}  # "start": seconds from the process's start to the job function


def set_threads(threads: int) -> None:
    """The job's CPU threads for torch, without importing it: a job that never needs torch (a
    table, a figure drawn from results) does not pay its import; one that does reads the
    variables when it first imports torch."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(max(1, threads))
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(max(1, threads))


def _own_usage() -> str:
    """The job's CPU seconds and peak memory, its own and its child processes' (a multi-process
    training's workers)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    return f"; cpu {cpu:.1f} s, peak {max(own.ru_maxrss, children.ru_maxrss) / 1024:.0f} MiB"


#: a job's log file: every record in full
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def console_handler(smk, stream=None) -> logging.Handler:
    """The job's stderr, which the person at the console reads (:func:`cselab.io.console_stream_handler`:
    progress lines and cselab's warnings, each named by its job, ``[12:03:41] train exp=...: ...``;
    one updating line on a terminal). Python's warnings and other libraries' records go to the
    log file alone; errors reach the console once, from the log, through Snakemake's console
    (:mod:`cselab.pipeline.console`). The processes the job starts (a multi-process training's
    workers) name their lines alike (:data:`cselab.io.CONSOLE_LABEL_ENV`)."""
    return cselab.io.console_stream_handler(console_label(smk), stream or sys.stderr)


def console_label(smk) -> str:
    """How the console names the job: its rule and wildcards (``train exp=simcse-bert-base-s42``)."""
    from cselab.pipeline.console import job_label

    return job_label(smk.rule, dict(getattr(smk, "wildcards", {}).items()))


def log_file_handler(path: str | Path) -> logging.Handler:
    """The job's log file: every record in full (:data:`LOG_FORMAT`), a terminal's updating
    progress line excepted."""
    handler = logging.FileHandler(path, mode="a")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.addFilter(cselab.io.not_live)
    return handler


def main(smk, job: Callable) -> None:
    """Run ``job(smk)`` for a Snakemake ``script:``, in the rule job's own process: log to the
    rule's log file, clear user errors; the last line of the log says how long the job took,
    whether it imported torch, and the process's CPU seconds and peak memory (what Snakemake's
    benchmark file records too)."""
    # MLflow's check for a Databricks job imports IPython where it is installed (0.5 s a run)
    os.environ.setdefault("MLFLOW_ENABLE_SGC_RUN_RESUMPTION_FOR_DATABRICKS_JOBS", "false")
    cselab.io.skip_collection_at_exit()  # torch's, transformers' and MLflow's modules: 1.2 CPU-s less at exit
    started = time.perf_counter()
    _CLOCK["start"] = process_seconds()  # interpreter, Snakemake's script preamble, the imports above
    handlers: list[logging.Handler] = [console_handler(smk)]
    os.environ[cselab.io.CONSOLE_LABEL_ENV] = console_label(smk)  # for the processes it starts
    if smk.log:
        Path(smk.log[0]).parent.mkdir(parents=True, exist_ok=True)
        Path(smk.log[0]).write_text("")  # a fresh log, then appended to by every writer (O_APPEND): the
        handlers.append(log_file_handler(smk.log[0]))  # training processes of a job write there too
    logging.basicConfig(level=logging.INFO, handlers=handlers, force=True)
    logging.captureWarnings(True)
    quiet_third_party_loggers()
    set_threads(int(smk.threads))
    smk.cselab_job = job.__name__
    try:
        # how to run (never what to compute), for job functions outside the pipeline (evaluation kinds)
        smk.cselab_operations = operations(smk)
        if smk.cselab_operations.plugins:  # a plugin's kinds and methods, registered as when the job was planned
            from cselab.pipeline.config import load_plugins

            load_plugins(list(smk.cselab_operations.plugins))
        # a full or read-only disk: one line naming the file and the cause; the job's record says which
        # jobs an invocation killed outright left (cselab.pipeline.recovery)
        with named_storage_errors(), recovery.job_record(smk, recovery.STATE_DIR):
            job(smk)
        log.info("rule %s done in %.1f s (torch %s%s)", smk.rule, time.perf_counter() - started,
                 "imported" if "torch" in sys.modules else "not imported", _own_usage())
    except CselabError as e:
        log.error("%s", e)  # the console's one line for the failure quotes it from the log
        sys.exit(1)
    except Preempted as e:
        requeued = requeue_slurm_job()
        log.warning("rule %s %s%s", smk.rule, e, "; SLURM requeued the job" if requeued else "")
        sys.exit(REQUEUE_EXIT)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:
        log.exception("rule %s failed", smk.rule)  # the traceback in the job's log; the console quotes its last line
        sys.exit(1)
