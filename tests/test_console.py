"""cselab's console (cselab/pipeline/console.py, Snakemake's logger plugin ``cselab``): what each
of Snakemake's records becomes, a failed job's message read from its log, a user error without
Snakemake's frame, and a job's stderr (progress and warnings only). The console of real runs:
tests/test_workflow.py and tests/test_faults.py."""

import io
import logging
import subprocess
import sys
from types import SimpleNamespace

from snakemake_interface_logger_plugins.common import LogEvent

import cselab.io as cselab_io
from cselab.io import CONSOLE, Progress
from cselab.pipeline import console
from cselab.pipeline.jobs import console_handler


def record(event=None, msg="", level=logging.INFO, **fields) -> logging.LogRecord:
    rec = logging.LogRecord("snakemake.logging", level, __file__, 1, msg, None, None)
    if event is not None:
        rec.event = event
    rec.__dict__.update(fields)
    return rec


def job_info(jobid, rule, wildcards, inputs, outputs, logs=()):
    return record(LogEvent.JOB_INFO, jobid=jobid, rule_name=rule, wildcards=wildcards, input=list(inputs),
                  output=list(outputs), log=list(logs))


def test_a_run_is_its_plan_one_line_per_job_start_and_end_and_what_it_built(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv(console.URI_ENV, "sqlite:///results/mlflow.db")
    c = console.Console()
    out = [c.line(record(LogEvent.RUN_INFO, stats={"train": 1, "table": 1, "total": 2})),
           c.line(record(msg="Building DAG of jobs...")),
           c.line(job_info(1, "train", {"exp": "simcse-s1"}, ["corpus.txt"], ["m/model", "m/curve.csv"])),
           c.line(record(LogEvent.JOB_FINISHED, job_id=1)),
           c.line(record(LogEvent.PROGRESS, done=1, total=2)),
           c.line(job_info(2, "table", {"table": "table1"}, ["m/model"], ["results/table1.csv", "results/table1.md"])),
           c.line(record(LogEvent.JOB_FINISHED, job_id=2)),
           c.line(record(LogEvent.PROGRESS, done=2, total=2))]
    assert out[0].endswith("2 jobs to run: train 1, table 1") and out[1] is None
    assert out[2].endswith("start  train exp=simcse-s1") and out[3] is None
    assert out[4].endswith("done   train exp=simcse-s1 (0:00; 1 of 2 jobs)")
    last = out[7].splitlines()
    assert last[0].endswith("done   table table=table1 (0:00; 2 of 2 jobs)")
    assert last[1].endswith("built: results/table1.csv, results/table1.md")  # not the model a job read, nor its curve
    assert last[2] == "compare the runs: mlflow ui --backend-store-uri sqlite:///results/mlflow.db"
    assert c.line(record(msg="Nothing to be done (all requested files are present and up to date).")).startswith("Nothing")
    assert c.line(record(msg="a warning", level=logging.WARNING)) == "a warning"
    submitted = "Job 3 has been submitted with SLURM jobid 12 (log: /x/slurm_logs/rule_train/12.log)."
    assert c.line(record(msg=submitted)) == submitted  # where a cluster job's log is


def test_a_failed_job_is_one_line_with_its_message_job_and_log(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("2026-11-27 10:00:00,000 cselab INFO loading\n"
                   "2026-11-27 10:00:01,000 cselab ERROR Corpus file x is empty (data.corpus.path); point it\n"
                   "at the real corpus.\n")
    c = console.Console()
    c.line(job_info(3, "train", {"exp": "a"}, [], ["m"], [str(log)]))
    frame = c.line(record(LogEvent.ERROR, level=logging.ERROR, exception="RuleException",
                          msg='RuleException:\nCalledProcessError in file "rules/train.smk", line 3:\nCommand x'))
    line = c.line(record(LogEvent.JOB_ERROR, level=logging.ERROR, jobid=3, rule_name="train", log=[str(log)]))
    assert frame is None
    assert line.endswith(f"cselab error in rule train: Corpus file x is empty (data.corpus.path); point it at the "
                         f"real corpus. (job train exp=a; log {log})")
    assert c.line(record(LogEvent.ERROR, level=logging.ERROR, exception="WorkflowError",
                         msg="WorkflowError:\nAt least one job did not complete successfully.")) is None
    assert c.line(record(LogEvent.PROGRESS, done=0, total=2)) is None  # no summary after a failure


def test_an_unexpected_exception_is_its_last_traceback_line(tmp_path):
    log = tmp_path / "j.log"
    log.write_text("2026 cselab ERROR rule train failed\nTraceback (most recent call last):\n  File \"x\", line 1\n"
                   "ZeroDivisionError: division by zero\n")
    assert console.failure_message([str(log)]) == "ZeroDivisionError: division by zero"
    assert console.failure_message([str(tmp_path / "missing.log")]).startswith("it ended without a message")
    stopped = tmp_path / "stopped.log"
    stopped.write_text("2026 cselab INFO step 3\n2026 cselab.pipeline WARNING rule train stopped by SIGTERM after "
                       "step 39: a checkpoint holds the run\n")
    assert console.failure_message([str(stopped)]) == "rule train stopped by SIGTERM after step 39: a checkpoint holds the run"


def test_a_user_error_is_its_message_alone():
    """Recognised by its class: the message it was raised with, whatever Snakemake's frame around it."""
    from cselab.pipeline.invocation import UserError
    from cselab.pipeline.tracking import COMMAND_ENV, INVOCATION_ENV

    message = "invalid configuration: config key 'training.lr': must be a number"
    UserError(message)
    text = f'UserError in file "/x/rules/common.smk", line 36:\n{message}\n  File "/x/rules/common.smk", line 36, in <module>'
    c = console.Console()
    rec = record(LogEvent.ERROR, level=logging.ERROR, exception=console.USER_ERROR, msg=text)
    assert c.line(rec) == message
    # raised in a rule's input function: Snakemake wraps it; the message names the job
    UserError("experiment 'u' is untrained\nits evaluations read its PLM")
    text = ('InputFunctionException in rule export_onnx in file "/x/rules/export.smk", line 9:\nError:\n  UserError:\n'
            "    experiment 'u' is untrained\n    its evaluations read its PLM\nWildcards:\n  exp=u\nTraceback:\n"
            '  File "/x/rules/export.smk", line 12, in <lambda>')
    rec = record(LogEvent.ERROR, level=logging.ERROR, exception=console.INPUT_FUNCTION_ERROR, msg=text)
    assert console.is_user_error(rec)
    assert c.line(rec) == "experiment 'u' is untrained its evaluations read its PLM (job export_onnx exp=u)"
    other = record(LogEvent.ERROR, level=logging.ERROR, exception=console.INPUT_FUNCTION_ERROR,
                   msg="InputFunctionException in rule x in file y, line 1:\nError:\n  KeyError: 'exp'\n")
    assert not console.is_user_error(other)  # a bug in an input function is no user error: shown whole
    assert c.line(other) is None and "KeyError: 'exp'" in c.flush()
    assert UserError.__name__ == console.USER_ERROR
    assert (console.COMMAND_ENV, console.INVOCATION_ENV) == (COMMAND_ENV, INVOCATION_ENV)  # its own copies


def test_an_exception_no_job_error_follows_is_shown_whole():
    """Snakemake reports a failed job's exception just before the job's error, which says it; an
    exception that no job error follows is shown, before the next line or at the end."""
    c = console.Console()
    assert c.line(record(LogEvent.ERROR, level=logging.ERROR, exception="MissingInputException",
                         msg="MissingInputException in rule x:\nMissing input files")) is None
    shown = c.line(record(msg="a warning", level=logging.WARNING))
    assert shown == "MissingInputException in rule x:\nMissing input files\na warning"
    assert c.flush() is None


def test_a_jobs_stderr_shows_its_progress_and_warnings_named_by_the_job(capsys):
    smk = SimpleNamespace(rule="train", wildcards={"exp": "simcse-s1"})
    handler = console_handler(smk)
    root, logger = logging.getLogger(), logging.getLogger("cselab.test_console")
    level, root.level = root.level, logging.INFO
    root.addHandler(handler)
    try:
        logger.info("not for the console")
        logger.error("said once, by Snakemake's console from the log")
        logging.getLogger("transformers.x").warning("a library's warning stays in the log")
        logger.warning("a warning")
        Progress(logger, "training", 10, "steps").close()
    finally:
        root.removeHandler(handler)
        root.level = level
    lines = capsys.readouterr().err.splitlines()
    assert [x.split("] ", 1)[1] for x in lines] == [
        "train exp=simcse-s1: a warning",
        "train exp=simcse-s1: training: 0 of 10 steps (0%), 0.0 steps/s, 0:00 elapsed, ETA unknown",
        "train exp=simcse-s1: training: 0 of 10 steps (0%), 0.0 steps/s, 0:00 elapsed, done"]
    assert CONSOLE == {"console": True}
    assert cselab_io.ERASE_LINE == console.ERASE_LINE  # console.py's own copy (it imports nothing of cselab)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_one_updating_progress_line_and_the_log_file_plain_lines(tmp_path, monkeypatch):
    """On a terminal a job's progress is one line rewritten in place (between the plain lines too),
    a warning ends it, and Snakemake's console's next line replaces it; the log file and a
    stderr that is no terminal get the plain lines alone."""
    import cselab.io
    from cselab.pipeline.jobs import log_file_handler

    monkeypatch.setattr(cselab.io, "live_every", None)  # as it was, after the test
    smk = SimpleNamespace(rule="train", wildcards={"exp": "simcse-s1"})
    term, pipe = Terminal(), io.StringIO()
    handlers = [console_handler(smk, term), console_handler(smk, pipe), log_file_handler(tmp_path / "job.log")]
    assert cselab.io.live_every == 2.0  # set by the terminal's handler
    monkeypatch.setattr(cselab.io, "live_every", 0.0)
    root, logger = logging.getLogger(), logging.getLogger("cselab.test_console")
    level, root.level = root.level, logging.INFO
    for h in handlers:
        root.addHandler(h)
    try:
        progress = Progress(logger, "training", 10, "steps", every=3600.0)
        progress.update(5)
        logger.warning("a warning")
        progress.update(6)
        progress.close()
    finally:
        for h in handlers:
            root.removeHandler(h)
            h.close()
        root.level = level
    shown = term.getvalue()
    assert shown.count(console.ERASE_LINE) == 5 and shown.count("\n") == 1  # the warning's line alone ends
    parts = [x.split("] ", 1)[1] for x in shown.split(console.ERASE_LINE)[1:]]
    assert [x.split(": ", 1)[1][:17] for x in parts] == ["training: 0 of 10", "training: 5 of 10", "a warning\n",
                                                      "training: 6 of 10", "training: 6 of 10"]
    assert parts[-1].endswith("done") and "ETA" in parts[3]
    plain = [x.split("] ", 1)[1] for x in pipe.getvalue().splitlines()]
    assert len(plain) == 3 and "5 of 10" not in pipe.getvalue() and console.ERASE_LINE not in pipe.getvalue()
    logged = (tmp_path / "job.log").read_text()
    assert logged.count("training: ") == 2 and "a warning" in logged and "5 of 10" not in logged


def test_snakemakes_console_replaces_a_terminals_progress_line(monkeypatch):
    def handler(stream, **settings):
        monkeypatch.setattr(sys, "stderr", stream)
        common = SimpleNamespace(**{"dryrun": False, "verbose": False, "printshellcmds": False, "debug_dag": False,
                                    "quiet": None, "stdout": False, **settings})
        h = console.LogHandler(common, None)
        h.tracks = False
        h.emit(record(LogEvent.RUN_INFO, msg="Job stats:", stats={"train": 1, "total": 1}))
        return stream.getvalue()

    on_terminal, in_a_file = handler(Terminal()), handler(io.StringIO())
    assert on_terminal.startswith(console.ERASE_LINE + "[") and on_terminal.endswith("] 1 job to run: train 1\n")
    assert in_a_file.startswith("[") and in_a_file.endswith("] 1 job to run: train 1\n")
    assert handler(Terminal(), dryrun=True) == "Job stats:\n"  # Snakemake's own console: left as it is


def test_the_plugin_is_installed_and_leaves_the_library_to_the_workflow():
    """Snakemake finds the plugin; loading it imports no ``cselab`` module, so a workflow in
    another checkout imports its own library."""
    code = ("import sys, snakemake_logger_plugin_cselab as p; "
            "assert not any(m == 'cselab' or m.startswith('cselab.') for m in sys.modules), sorted(sys.modules); "
            "from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry; "
            "print(LoggerPluginRegistry().get_plugin('cselab').log_handler.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0 and proc.stdout.strip() == "LogHandler", proc.stderr


def test_progress_counts_each_rules_jobs_hours_and_eta_against_the_cost_plan(tmp_path):
    """results/progress.md: per rule planned / done / running / failed / left from Snakemake's
    plan and events, hours from the benchmark files, the cost plan's estimate beside them, an
    ETA from each rule's mean job time, each failure with its log's last lines."""
    bench = tmp_path / "train.tsv"
    bench.write_text("s\th:m:s\tmax_rss\tcpu_time\n360.0\t0:06:00\t100\t720.0\n")
    log = tmp_path / "eval.log"
    log.write_text("2026 cselab INFO reading\n2026 cselab ERROR STS12 changed after preparation\n")
    plan = tmp_path / "cost_plan.csv"
    plan.write_text("rule,jobs,job_hours,gpu_hours,cpu_hours\ntrain,4,4.0,8.0,16.0\nevaluate_sts,2,0.2,0.2,0.4\n"
                    "TOTAL,6,4.2,8.2,16.4\n")
    c = console.Console()
    c.line(record(LogEvent.RUN_INFO, stats={"train": 3, "evaluate_sts": 2, "total": 5}))
    c.line(record(LogEvent.JOB_INFO, jobid=1, rule_name="train", wildcards={"exp": "a"}, input=[], output=["m"],
                  log=[], benchmark=str(bench), resources={"gpu": 2}))
    c.line(record(LogEvent.JOB_INFO, jobid=2, rule_name="train", wildcards={"exp": "b"}, input=[], output=["n"],
                  log=[], benchmark=None, resources={"gpu": 2}))
    c.line(record(LogEvent.JOB_FINISHED, job_id=1))
    c.line(record(LogEvent.PROGRESS, done=1, total=5))
    c.line(record(LogEvent.JOB_INFO, jobid=3, rule_name="evaluate_sts", wildcards={"exp": "a"}, input=["m"],
                  output=["s"], log=[str(log)], benchmark=None, resources={}))
    c.line(record(LogEvent.JOB_ERROR, level=logging.ERROR, jobid=3, rule_name="evaluate_sts", log=[str(log)]))
    per_job = console.cost_plan_per_job(plan)
    assert per_job["train"] == (1.0, 2.0, 4.0)
    text = console.progress_markdown(c, "snakemake all", "running", per_job)
    rows = {r.split(" | ")[0][2:]: r.split(" | ")[1:] for r in text.splitlines() if r.startswith("| ")}
    assert rows["train"] == ["3", "1", "1", "0", "1", "0.200", "0.200", "6.000", "12.000 |"]
    assert rows["evaluate_sts"] == ["2", "0", "0", "1", "1", "0.000", "0.000", "0.200", "0.400 |"]
    assert rows["TOTAL"][:5] == ["5", "1", "1", "1", "2"] and rows["TOTAL"][-2:] == ["6.200", "12.400 |"]
    # train: 1 left + 1 running / 2 at its mean 360 s; evaluate_sts: 1 left at the plan's 0.1 h; 2 at a time
    assert console.eta_seconds(c.rules, per_job, 2) == (360 * 1.5 + 360 * 1) / 2
    assert "ETA 7:30 for the 3 jobs left or running" in text
    assert "## Failed: evaluate_sts exp=a" in text and "STS12 changed after preparation (log " in text
    assert console.eta_seconds(c.rules, {}, 2) is None  # evaluate_sts: no job ended, no plan
    metrics = console.progress_metrics(c)
    assert metrics["jobs.train.done"] == 1 and metrics["jobs_failed"] == 1 and metrics["gpu_hours"] == 0.2


def test_the_progress_command_prints_the_report(tmp_path, capsys):
    assert console.main([str(tmp_path)]) == 1 and "no invocation has written" in capsys.readouterr().out
    (tmp_path / "results").mkdir()
    (tmp_path / console.PROGRESS_MD).write_text("# Progress of `snakemake all`\n")
    assert console.main([str(tmp_path)]) == 0 and capsys.readouterr().out == "# Progress of `snakemake all`\n"


def test_a_lazy_progress_says_nothing_for_a_short_loop_and_counts_without_a_total():
    lines = []
    sink = SimpleNamespace(info=lambda fmt, *args, **kw: lines.append(fmt % args))
    short = Progress(sink, "encoding", 10, "sentences", lazy=60.0)
    short.update(10)
    short.close()
    assert lines == []  # a short encoding: no line, and no start or end line ever
    long = Progress(sink, "searching the corpus", None, "documents", every=0.0, lazy=0.0)
    long.update(5)
    long.close()
    assert lines == [lines[0]] and lines[0].startswith("searching the corpus: 5 documents, ")
    assert "ETA" not in lines[0] and "done" not in lines[0]


def test_a_training_workers_console_is_its_jobs_and_its_log_file_gets_plain_lines(tmp_path, monkeypatch):
    """A multi-process training's rank 0, started by a job on a terminal: the job's updating line
    on the terminal, the plain lines alone in the job's log."""
    import cselab.io
    from cselab.training.distributed import _worker_logging

    monkeypatch.setattr(cselab.io, "live_every", None)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv(cselab.io.CONSOLE_LABEL_ENV, "train exp=simcse-s1")
    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        _worker_logging(str(tmp_path / "job.log"))
        monkeypatch.setattr(cselab.io, "live_every", 0.0)
        logger = logging.getLogger("cselab.test_console")
        logger.info("not for the console")
        progress = Progress(logger, "training", 10, "steps", every=3600.0)
        progress.update(5)
        progress.close()
    finally:
        for h in root.handlers:
            h.close()
        root.handlers[:], root.level = handlers, level
    shown = term.getvalue()
    assert shown.count(console.ERASE_LINE) == 3 and "] train exp=simcse-s1: training: 5 of 10" in shown
    assert "not for the console" not in shown
    logged = (tmp_path / "job.log").read_text()
    assert "not for the console" in logged and logged.count("training: ") == 2  # its start and end: no live line
