"""What a person sees of an invocation: one line per job start and end, the jobs' own progress
lines, each failure once (its message, the job, its log), a user error without Snakemake's frame,
and at the end the files built and the command that opens MLflow. Everything else, Snakemake's
full job blocks included, stays in Snakemake's log (``.snakemake/log/``).

It is Snakemake's logger plugin ``cselab`` (``snakemake_logger_plugin_cselab``, named by the
workflow profile ``profiles/default``). A dry run, ``--verbose``, ``--printshellcmds`` or
``--debug-dag`` keeps Snakemake's own console.

It also keeps ``results/progress.md`` while jobs run: per rule the jobs planned, done, running,
failed and left (Snakemake's own plan), the GPU- and CPU-hours spent (Snakemake's benchmark
files) beside the cost plan's estimate, an ETA, and each failure with the last lines of its log;
at the end the same numbers go on one MLflow run of the invocation (rule ``invocation``).
``python -m cselab.pipeline.console [folder]`` prints it, during a run or after.

The plugin loads this file on its own, by its path, before the workflow is read: it imports
nothing of cselab until the invocation ends, so the workflow imports the library from its own
checkout.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from snakemake_interface_logger_plugins.base import LogHandlerBase
from snakemake_interface_logger_plugins.settings import LogHandlerSettingsBase

#: the tracking URI and experiment of the workflow's MLflow runs, as the workflow read them from its config
URI_ENV = "CSELAB_TRACKING_URI"
EXPERIMENT_ENV = "CSELAB_MLFLOW_EXPERIMENT"
FALLBACK_ENV = "CSELAB_MLFLOW_FALLBACK"
#: the invocation's command and id (cselab.pipeline.tracking's COMMAND_ENV and INVOCATION_ENV: this
#: file imports nothing of cselab, tests/test_console.py holds them equal)
COMMAND_ENV, INVOCATION_ENV = "CSELAB_COMMAND", "CSELAB_INVOCATION"
#: the invocation's progress, in the working folder (kept while jobs run, final at its end)
PROGRESS_MD = "results/progress.md"
#: the cost plan whose estimates stand beside the hours spent (rule cost_plan, docs/cost.md)
COST_PLAN_CSV = "results/cost_plan.csv"

#: plain Snakemake lines a person needs (an executor's job ids: where a cluster job's log is);
#: every other one stays in Snakemake's log
_KEPT = re.compile(r"^(Nothing to be done|Complete log|SLURM run ID|Job \d+ has been submitted)")
#: flags of an invocation that neither plans nor runs jobs (unlock, lint, reports, listings, DAG
#: pictures): Snakemake's own console prints what they ask for
NO_JOB_FLAGS = ("--unlock", "--lint", "--list", "-l", "--list-target-rules", "--lt", "--summary", "-S",
                "--detailed-summary", "-D", "--report", "--touch", "-t", "--dag", "--rulegraph", "--filegraph",
                "--d3dag", "--cleanup-metadata", "--cm", "--list-changes", "--lc", "--delete-all-output",
                "--delete-temp-output", "--conda-create-envs-only", "--containerize", "--archive", "--export-cwl")
#: a terminal's "back to the line's start and erase it": a job's progress line on a terminal is one
#: line updated in place (cselab.io.LiveLineHandler; cselab.io.ERASE_LINE is the same); every console line replaces it
ERASE_LINE = "\r\x1b[K"
#: the class of the errors the workflow raises for a user's mistake (a config value, a missing file)
USER_ERROR = "UserError"
#: Snakemake's class for what a rule's input function raised (a user error there names its job)
INPUT_FUNCTION_ERROR = "InputFunctionException"
#: Snakemake's class for its closing "at least one job did not complete", after a failed job's own line
WORKFLOW_ERROR = "WorkflowError"
#: Snakemake 9.27 gives its logger an exception's class name and its formatted text, not the
#: exception: the rule and wildcards of a failed input function are read from that text
_INPUT_FUNCTION_JOB = re.compile(r"^\S+ in rule (?P<rule>\S+) in file .*?(?:\nWildcards:\n(?P<wildcards>(?:  .*\n?)*))?"
                                 r"(?:Traceback:|$)", re.S)


def job_label(rule: str, wildcards: dict | None) -> str:
    """``rule key=value ...``: how a job is named on the console and in its progress lines."""
    return " ".join([rule, *(f"{k}={v}" for k, v in (wildcards or {}).items())])


def clock(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour."""
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def failure_message(logs: list[str]) -> str:
    """A failed job's own message, from its log: the last error the job logged (a user error's
    one line), or a traceback's last line (an unexpected exception), else its last warning (a
    job stopped by a signal says where it stopped)."""
    for path in logs:
        try:
            lines = Path(path).read_text(errors="replace").splitlines()
        except OSError:
            continue
        level = " ERROR " if any(" ERROR " in line for line in lines) else " WARNING "
        errors = [i for i, line in enumerate(lines) if level in line]
        if not errors:
            continue
        first = lines[errors[-1]].split(level, 1)[1]
        rest = [line for line in lines[errors[-1] + 1:] if line.strip()]
        if rest and rest[0].startswith("Traceback"):
            return rest[-1].strip()
        return " ".join([first, *(line.strip() for line in rest)])
    return "it ended without a message (see its log)"


def raised_user_error() -> str | None:
    """The message of the user error the workflow raised (:class:`cselab.pipeline.invocation.UserError`
    keeps it: the record holds only its class's name and Snakemake's formatted text), or None."""
    invocation = sys.modules.get("cselab.pipeline.invocation")
    return getattr(getattr(invocation, "UserError", None), "last", None)


def is_user_error(record) -> bool:
    """A user's mistake: a :data:`USER_ERROR` the workflow raised while planning, or one a rule's
    input function raised (Snakemake wraps it in :data:`INPUT_FUNCTION_ERROR`)."""
    kind = getattr(record, "exception", "")
    message = raised_user_error()
    return kind == USER_ERROR or (kind == INPUT_FUNCTION_ERROR and message is not None
                                  and message.splitlines()[0] in record.getMessage())


def user_error_text(record) -> str:
    """A user error's message alone (the one it was raised with), without Snakemake's frame and
    the traceback of the workflow's own lines; one raised by an input function names its job."""
    message = raised_user_error() or record.getMessage()
    if getattr(record, "exception", "") != INPUT_FUNCTION_ERROR:
        return message
    found = _INPUT_FUNCTION_JOB.match(record.getMessage())
    if not found:
        return message
    return f"{' '.join(message.split())} (job {job_label(found['rule'], _wildcards(found['wildcards'] or ''))})"


def _wildcards(block: str) -> dict:
    return dict(line.strip().split("=", 1) for line in block.splitlines() if "=" in line)


@dataclass
class _Job:
    label: str
    started: float
    inputs: list[str]
    outputs: list[str]
    logs: list[str]
    rule: str = ""
    benchmark: str | None = None
    gpus: int = 0


@dataclass
class RuleTally:
    """One rule's jobs in this invocation, and the hours its finished jobs took."""

    planned: int = 0
    done: int = 0
    running: int = 0
    failed: int = 0
    seconds: list[float] = field(default_factory=list)
    gpu_s: float = 0.0
    cpu_s: float = 0.0

    @property
    def left(self) -> int:
        return max(0, self.planned - self.done - self.running - self.failed)


def benchmark_seconds(path: str | None) -> tuple[float, float] | None:
    """Wall and CPU seconds of a finished job from its Snakemake benchmark file (``s``, ``cpu_time``)."""
    try:
        head, row = Path(path).read_text().splitlines()[:2] if path else ("", "")
        values = dict(zip(head.split("\t"), row.split("\t")))
        return float(values["s"]), float(values.get("cpu_time") or 0.0)
    except (OSError, ValueError, KeyError):
        return None


def log_tail(logs: list[str], n: int = 8) -> list[str]:
    """The last ``n`` lines of a job's log."""
    for path in logs:
        try:
            return Path(path).read_text(errors="replace").splitlines()[-n:]
        except OSError:
            continue
    return []


@dataclass
class Console:
    """The console's state over one invocation: the jobs started, finished and failed."""

    jobs: dict[int, _Job] = field(default_factory=dict)
    finished: list[int] = field(default_factory=list)
    done: list[int] = field(default_factory=list)
    failed: int = 0
    ended: bool = False
    rules: dict[str, RuleTally] = field(default_factory=dict)
    failures: list[tuple[str, str, list[str], list[str]]] = field(default_factory=list)
    started: float | None = None
    most_running: int = 1
    pending: str | None = None  # an exception's frame, until the next record says whose it is

    def line(self, record: logging.LogRecord) -> str | None:
        """The console's text for one of Snakemake's records, or None to leave it to the log."""
        event = getattr(record, "event", None)
        pending, self.pending = self.pending, None  # an exception's frame that no job error followed: shown
        if pending is not None and event is not None and event.value == "job_error":
            pending = None
        handler = getattr(self, f"_on_{event.value if event else 'plain'}", None)
        text = handler(record) if handler else None
        return "\n".join(t for t in (pending, text) if t) or None

    def flush(self) -> str | None:
        """What is left to show at the end (an exception's frame no job error followed)."""
        pending, self.pending = self.pending, None
        return pending

    def _on_plain(self, record) -> str | None:
        text = record.getMessage() if record.msg is not None else ""
        if record.levelno >= logging.WARNING or _KEPT.match(text):
            return text
        return None

    def _on_run_info(self, record) -> str | None:
        stats = dict(getattr(record, "stats", {}) or {})
        total = stats.pop("total", sum(stats.values()))
        self.started = self.started or time.time()
        for rule, n in stats.items():
            self.rules.setdefault(rule, RuleTally()).planned = n
        counts = ", ".join(f"{rule} {n}" for rule, n in stats.items())
        return f"{_now()} {total} job{'s' * (total != 1)} to run: {counts}"

    def _on_job_info(self, record) -> str | None:
        jobid = record.jobid
        resources = getattr(record, "resources", None) or {}
        gpus = resources.get("gpu", 0) if hasattr(resources, "get") else getattr(resources, "gpu", 0)
        self.jobs[jobid] = _Job(job_label(record.rule_name, record.wildcards), time.monotonic(),
                                list(record.input or []), list(record.output or []), list(record.log or []),
                                record.rule_name, getattr(record, "benchmark", None), int(gpus or 0))
        tally = self.rules.setdefault(record.rule_name, RuleTally())
        tally.running += 1
        self.most_running = max(self.most_running, sum(t.running for t in self.rules.values()))
        return f"{_now()} start  {self.jobs[jobid].label}"

    def _on_job_finished(self, record) -> str | None:
        self.finished.append(record.job_id)
        return None  # written with the count that follows (the progress record)

    def _on_progress(self, record) -> str | None:
        lines = []
        for jobid in self.finished:
            job = self.jobs.get(jobid)
            self.done.append(jobid)
            if job:
                self._count_done(job)
                lines.append(f"{_now()} done   {job.label} ({clock(time.monotonic() - job.started)}; "
                             f"{record.done} of {record.total} jobs)")
        self.finished = []
        if record.done == record.total and not self.failed and not self.ended:
            self.ended = True
            lines += self.summary()
        return "\n".join(lines) or None

    def _on_job_error(self, record) -> str | None:
        self.failed += 1
        job = self.jobs.get(record.jobid)
        label = job.label if job else job_label(record.rule_name, {})
        logs = list(record.log or [])
        tally = self.rules.setdefault(record.rule_name, RuleTally())
        tally.running, tally.failed = max(0, tally.running - 1), tally.failed + 1
        self.failures.append((label, failure_message(logs), logs, log_tail(logs)))
        where = f" (job {label}; log {', '.join(logs)})" if logs else f" (job {label})"
        return f"{_now()} cselab error in rule {record.rule_name}: {failure_message(logs)}{where}"

    def _on_error(self, record) -> str | None:
        """An exception Snakemake reports: a user error's message alone; a failed job's frame (Snakemake
        reports the job's exception just before the job's error) waits for that error, which says it
        (:meth:`_on_job_error`); Snakemake's closing error after a failed job repeats it."""
        if is_user_error(record):
            return user_error_text(record)
        kind = getattr(record, "exception", None)
        if kind == WORKFLOW_ERROR and self.failed:
            return None
        if kind:
            self.pending = record.getMessage()
            return None
        return record.getMessage()

    def _count_done(self, job: _Job) -> None:
        tally = self.rules.setdefault(job.rule, RuleTally())
        tally.running, tally.done = max(0, tally.running - 1), tally.done + 1
        wall, cpu = benchmark_seconds(job.benchmark) or (time.monotonic() - job.started, 0.0)
        tally.seconds.append(wall)
        tally.gpu_s += wall * job.gpus
        tally.cpu_s += cpu

    def summary(self) -> list[str]:
        """The last lines: the files this invocation built for the person (those of the jobs
        whose outputs no other job read: the targets) and how to compare its runs."""
        read = {path for job in self.jobs.values() for path in job.inputs}
        last = [self.jobs[j] for j in self.done if j in self.jobs and not read.intersection(self.jobs[j].outputs)]
        built = [path for job in last for path in job.outputs]
        shown = ", ".join(built[:8]) + (f" and {len(built) - 8} more" if len(built) > 8 else "")
        uri = os.environ.get("MLFLOW_TRACKING_URI") or os.environ.get(URI_ENV, "sqlite:///results/mlflow.db")
        lines = [f"{_now()} built: {shown}"] if built else []
        return lines + [f"compare the runs: mlflow ui --backend-store-uri {uri}"]


def _now() -> str:
    return time.strftime("[%H:%M:%S]")


# -- results/progress.md ---------------------------------------------------------------------------


def cost_plan_per_job(path: str | Path = COST_PLAN_CSV) -> dict[str, tuple[float, float, float]]:
    """Per rule, the cost plan's (job, GPU, CPU) hours for one job, where a plan was written."""
    import csv

    try:
        with open(path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if r.get("rule") != "TOTAL" and float(r.get("jobs") or 0) > 0]
    except (OSError, ValueError):
        return {}
    return {r["rule"]: tuple(float(r[k]) / float(r["jobs"]) for k in ("job_hours", "gpu_hours", "cpu_hours"))
            for r in rows}


def eta_seconds(rules: dict[str, RuleTally], plan: dict[str, tuple], parallel: int) -> float | None:
    """Seconds until the jobs left (and half of those running) end: each rule's mean job time so
    far (else the cost plan's), ``parallel`` jobs at a time; None while a rule's time is unknown."""
    work = 0.0
    for rule, t in rules.items():
        if not t.left and not t.running:
            continue
        mean = sum(t.seconds) / len(t.seconds) if t.seconds else plan[rule][0] * 3600 if rule in plan else None
        if mean is None:
            return None
        work += mean * (t.left + t.running / 2)
    return work / max(1, parallel)


def progress_markdown(c: Console, command: str, state: str, plan: dict[str, tuple]) -> str:
    """The progress report: per rule the jobs planned, done, running, failed and left, hours spent
    beside the cost plan's, the ETA and each failure with the last lines of its log."""
    header = ["rule", "jobs", "done", "running", "failed", "left", "GPU-h spent", "CPU-h spent",
              "cost plan GPU-h", "cost plan CPU-h"]
    rows, total = [], RuleTally()
    for rule, t in c.rules.items():
        est = plan.get(rule)
        rows.append([rule, t.planned, t.done, t.running, t.failed, t.left, f"{t.gpu_s / 3600:.3f}",
                     f"{t.cpu_s / 3600:.3f}", f"{est[1] * t.planned:.3f}" if est else "-",
                     f"{est[2] * t.planned:.3f}" if est else "-"])
        for key in ("planned", "done", "running", "failed", "gpu_s", "cpu_s"):
            setattr(total, key, getattr(total, key) + getattr(t, key))
    known = [r for r in c.rules if r in plan]
    rows.append(["TOTAL", total.planned, total.done, total.running, total.failed, total.left,
                 f"{total.gpu_s / 3600:.3f}", f"{total.cpu_s / 3600:.3f}",
                 f"{sum(plan[r][1] * c.rules[r].planned for r in known):.3f}" if known else "-",
                 f"{sum(plan[r][2] * c.rules[r].planned for r in known):.3f}" if known else "-"])
    eta = eta_seconds(c.rules, plan, c.most_running)
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(c.started or time.time()))
    pending = total.left + total.running
    if not pending:
        when = "No job left."
    elif eta is None:
        when = f"ETA unknown for the {pending} jobs left or running, until a job of each of their rules has ended."
    else:
        when = (f"ETA {clock(eta)} for the {pending} jobs left or running (each rule's mean job time so far, "
                f"else the cost plan's; {c.most_running} at a time).")
    lines = [f"# Progress of `{command}`", "",
             f"Started {started}, updated {time.strftime('%H:%M:%S')}: {state}. {when}", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(x) for x in row) + " |" for row in rows]
    lines += ["", "Jobs: Snakemake's plan for this invocation (jobs built before it are not counted). Hours "
              "spent: the finished jobs' Snakemake benchmark files (wall s x GPUs held; cpu_time). Cost plan: "
              f"{COST_PLAN_CSV}'s hours per job of the rule x these jobs"
              + ("" if plan else " (no plan here: `snakemake results/cost_plan.csv` writes one)") + "."]
    for label, message, logs, tail in c.failures:
        lines += ["", f"## Failed: {label}", "", f"{message} (log {', '.join(logs) or '-'})", "", "```", *tail, "```"]
    return "\n".join(lines) + "\n"


def progress_metrics(c: Console) -> dict[str, float]:
    """The report's numbers for the invocation's MLflow run."""
    out: dict[str, float] = {}
    for rule, t in c.rules.items():
        for key in ("planned", "done", "failed", "left"):
            out[f"jobs.{rule}.{key}"] = getattr(t, key)
    out.update({"jobs_planned": sum(t.planned for t in c.rules.values()),
                "jobs_done": sum(t.done for t in c.rules.values()),
                "jobs_failed": sum(t.failed for t in c.rules.values()),
                "gpu_hours": sum(t.gpu_s for t in c.rules.values()) / 3600,
                "cpu_hours": sum(t.cpu_s for t in c.rules.values()) / 3600})
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m cselab.pipeline.console [folder]``: print the folder's progress report."""
    folder = Path((argv if argv is not None else sys.argv[1:])[0] if (argv or sys.argv[1:]) else ".")
    path = folder / PROGRESS_MD
    if not path.is_file():
        print(f"no invocation has written {path} yet (every snakemake run of the workflow keeps it)")
        return 1
    print(path.read_text(), end="")
    return 0


def isatty(stream) -> bool:
    """Whether ``stream`` is a terminal (False for one without a file)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@dataclass
class LogHandlerSettings(LogHandlerSettingsBase):
    """The console has no settings of its own (Snakemake's ``--quiet``, ``--verbose`` apply)."""


class LogHandler(LogHandlerBase):
    """Snakemake's console as :class:`Console` writes it; Snakemake's own where it asks for
    detail (a dry run's plan, ``--verbose``, ``--printshellcmds``, ``--debug-dag``)."""

    def __post_init__(self) -> None:
        s = self.common_settings
        self.plain = bool(s.dryrun or s.verbose or s.printshellcmds or s.debug_dag
                          or any(arg.split("=")[0] in NO_JOB_FLAGS for arg in sys.argv[1:]))
        self.silent = "all" in {str(q).lower().split(".")[-1] for q in (s.quiet or ())}
        self.tracks = not s.dryrun  # a run keeps results/progress.md and logs its MLflow run
        self.console = Console()
        self.stream = sys.stdout if s.stdout else sys.stderr
        self.erase = ERASE_LINE if not self.plain and isatty(self.stream) else ""
        self.closed, self.folder, self.plan = False, None, None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.console.line(record)  # the state, whatever is shown
            if is_user_error(record):
                text = user_error_text(record)  # in a dry run too
            elif self.plain:
                text = self.format(record)
            elif self.silent and record.levelno < logging.ERROR:
                text = None
            if text:
                self.stream.write(self.erase + text + "\n")
                self.stream.flush()
            if self.tracks and self.console.jobs and getattr(record, "event", None) is not None:
                self.write_progress("running")  # from the first job on (a plan stopped at its start writes none)
        except Exception:  # the console never stops a run
            self.handleError(record)

    def write_progress(self, state: str) -> None:
        command = os.environ.get(COMMAND_ENV) or "snakemake " + " ".join(sys.argv[1:])
        if self.folder is None:  # the workflow's folder (--directory), where Snakemake works once it plans
            self.folder = Path.cwd()
        path = self.folder / PROGRESS_MD
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".md.tmp")
        if self.plan is None:  # read once per invocation, not at every job's event
            self.plan = cost_plan_per_job(self.folder / COST_PLAN_CSV)
        tmp.write_text(progress_markdown(self.console, command, state, self.plan))
        tmp.replace(path)

    def close(self) -> None:
        """The invocation's end: the final report and its MLflow run (rule ``invocation``)."""
        left = self.console.flush()
        if left and not self.plain:
            self.stream.write(self.erase + left + "\n")
        if not self.closed and self.tracks and self.console.jobs:
            self.closed = True
            failed = sum(t.failed for t in self.console.rules.values())
            left = sum(t.left + t.running for t in self.console.rules.values())
            self.write_progress(f"ended, {failed} job{'s' * (failed != 1)} failed" if failed else
                                f"ended with {left} jobs not run" if left else "ended, every job done")
            here = os.getcwd()
            try:
                os.chdir(self.folder)  # where the workflow's relative paths (a local fallback store) point
                self.log_run()
            except Exception as e:  # the run's results stand; only its summary run is missing
                self.stream.write(f"cselab: the invocation's MLflow run was not logged: {e}\n")
            finally:
                os.chdir(here)
        super().close()

    def log_run(self) -> None:
        from cselab.pipeline.tracking import mlflow_run

        uri = os.environ.get("MLFLOW_TRACKING_URI") or os.environ.get(URI_ENV)
        if not uri or self.folder is None:
            return
        if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_absolute():
            uri = f"sqlite:///{self.folder / uri[len('sqlite:///'):]}"  # the workflow folder's store, wherever this is
        with mlflow_run(uri=uri, experiment_name=os.environ.get(EXPERIMENT_ENV, "cselab"), rule="invocation",
                        fallback=os.environ.get(FALLBACK_ENV, "none"),
                        label=os.environ.get(INVOCATION_ENV, "invocation"), source="Snakefile") as run:
            run.log_metrics(progress_metrics(self.console))
            run.log_artifact(self.folder / PROGRESS_MD)

    @property
    def writes_to_stream(self) -> bool:
        return True

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return not self.plain  # Snakemake's own filter and formatter where its console is kept

    @property
    def has_formatter(self) -> bool:
        return not self.plain

    @property
    def needs_rulegraph(self) -> bool:
        return False


if __name__ == "__main__":
    sys.exit(main())
