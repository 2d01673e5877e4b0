"""Preemption-safe training: a stop signal ends a run at a step boundary with a checkpoint.

SIGTERM (a scheduler's kill, Snakemake stopping its jobs), SIGINT (Ctrl-C) and SIGUSR1 (SLURM's
warning before the time limit, ``--signal=B:USR1@<s>`` in the profile) set a flag; the training
loop finishes the step it is in, writes a checkpoint and raises :class:`Preempted`. The job ends
its MLflow run as KILLED with its last metrics, asks SLURM to requeue it when it runs in a SLURM
job, and exits with :data:`REQUEUE_EXIT`; the next attempt resumes from the checkpoint (losing
no step) and reopens the same MLflow run. A second signal while stopping is the default action
again (a user pressing Ctrl-C twice gets out at once).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from typing import Iterator

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
#: the exit status of a preempted job (EX_TEMPFAIL): "resume me", not a failure of the job's own
REQUEUE_EXIT = 75


class Preempted(Exception):
    """Training stopped on a signal after writing a checkpoint at ``step``."""

    def __init__(self, step: int | None, signum: int):
        self.step, self.signum = step, signum
        after = f" after step {step}" if step is not None else ""
        super().__init__(f"stopped by {signal.Signals(signum).name}{after}: a checkpoint holds the run; "
                         "rerunning the same target resumes it from there")


class StopFlag:
    """Set by a stop signal; read by the loop once per step (no system call, no sync)."""

    def __init__(self):
        self.signum: int | None = None

    def __bool__(self) -> bool:
        return self.signum is not None


@contextlib.contextmanager
def stop_on_signals() -> Iterator[StopFlag]:
    """Install the handlers for the block (main thread only; elsewhere the flag never sets)."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum, frame):
        if flag:  # a second signal: the default action
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        flag.signum = signum
        log.warning("%s received: finishing this step, writing a checkpoint, then stopping",
                    signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def ignoring_warning_signal() -> Iterator[None]:
    """SIGUSR1 ignored for the block (main thread only): a process that only launches or waits
    for training processes (a torchrun agent) must outlive SLURM's warning signal, which is theirs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)


def requeue_slurm_job() -> bool:
    """Ask SLURM to requeue this job (inside a SLURM job only): it goes back to the queue, keeps
    its id, and Snakemake's executor sees it pending again, so no retry is spent."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return False
    try:
        subprocess.run(["scontrol", "requeue", job], check=True, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("could not requeue SLURM job %s (%s): the next attempt or a rerun resumes the checkpoint", job, e)
        return False
    log.info("SLURM job %s requeued: it resumes from the checkpoint", job)
    return True
