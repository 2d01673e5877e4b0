"""What one ``snakemake`` invocation does before it plans, called by ``rules/common.smk``: the
config validated once (a bad key named with the file or flag that set it), what the command
line asks for (a dry run, no jobs at all, or a run), the invocation's id and command for its
jobs' MLflow runs, the folder's lock, and the checks that keep a run from building on a changed
corpus or a damaged model. Each raises :class:`~cselab.errors.CselabError` with one message; the
glue turns it into :class:`UserError` (Snakemake's ``WorkflowError``, shown by the console as the
message alone).
"""

from __future__ import annotations

import os
import shlex
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from snakemake.exceptions import WorkflowError

from cselab.errors import ConfigError, CselabError, DataError
from cselab.pipeline import console, outputs
from cselab.pipeline.tracking import COMMAND_ENV, INVOCATION_ENV


class UserError(WorkflowError):
    """A user's mistake found while the workflow is read (a config value, a missing file): the
    console (:mod:`cselab.pipeline.console`) shows its message alone, the log keeps where.
    Snakemake's logger receives only an exception's class name and its formatted text, so the
    message raised last is kept here for the console (:attr:`last`)."""

    last: str | None = None

    def __init__(self, message: str):
        super().__init__(message)
        UserError.last = str(message)

#: flags of an invocation that neither plans nor runs jobs (unlock, lint, reports, listings, DAG pictures)
NO_JOB_FLAGS = console.NO_JOB_FLAGS
#: where the invocation's lock and state live
STATE_DIR = ".snakemake/cselab"
#: set to 1, training jobs ask for their GPUs whatever this machine has (the cost plan's dry run)
GPUS_ENV = "CSELAB_GPUS"


@dataclass(frozen=True)
class Invocation:
    """What the command line asks for. ``main``: the invocation itself, not a cluster job
    re-reading the Snakefile; ``dry_run``: it plans (``-n`` alone or in a short-flag group);
    ``no_jobs``: it neither plans nor runs jobs. :meth:`forces` says whether it forces a rule or a file."""

    args: tuple[str, ...]
    main: bool
    dry_run: bool
    no_jobs: bool
    gpus: bool = True

    @classmethod
    def of(cls, args: list[str], main: bool) -> "Invocation":
        dry = is_dry_run(args)
        no_jobs = any(a.split("=")[0] in NO_JOB_FLAGS for a in args)
        return cls(tuple(args), main, dry, no_jobs, asks_for_gpus(args))

    def forces(self, name: str) -> bool:
        """Whether ``--forcerun``/``-R`` names ``name`` (a rule or an output file; a target alone
        does not force it, as Snakemake's argparse reads the option's values), or ``-F``."""
        listed, forced = False, set()
        for arg in self.args:
            flag, _, value = arg.partition("=")
            if flag in ("--forcerun", "-R"):
                listed = True
                forced.update(filter(None, [value]))
            elif arg.startswith("-"):
                listed = False
            elif listed:
                forced.add(arg)
        return name in forced or any(a in ("-F", "--forceall") for a in self.args)

    @property
    def forced_corpus(self) -> bool:
        """It re-prepares the corpus."""
        return self.forces("prepare_corpus")

    @property
    def executing(self) -> bool:
        """It runs jobs: cselab's checks before planning may change files (take the lock, move a
        damaged model aside); a dry run's never do."""
        return self.main and not self.dry_run and not self.no_jobs

    @property
    def checks(self) -> bool:
        """It plans or runs: the checks before planning apply."""
        return self.main and not self.no_jobs


def is_dry_run(args) -> bool:
    """Whether Snakemake's arguments ``args`` ask for a dry run (``-n`` alone or in a short-flag group)."""
    return any(a in ("--dry-run", "--dryrun") or (a.startswith("-") and not a.startswith("--") and "n" in a[1:])
               for a in args)


def asks_for_gpus(args: list[str]) -> bool:
    """Whether training jobs ask for GPUs (their ``gpu`` resource): where this machine has one (a
    GPU node running its jobs itself), or where the command names an executor or a profile (a
    cluster's: its jobs run on GPU nodes). A plain ``--cores`` run on a machine without a GPU
    neither asks for nor shows one."""
    import glob

    from cselab.pipeline.recovery import cluster

    planned = os.environ.get(GPUS_ENV) == "1"  # the cost plan's dry run prices GPU nodes
    return cluster(args) or planned or bool(glob.glob("/dev/nvidia[0-9]*"))


def config_sources(configfiles: list[str], given: list[str], overrides: dict) -> list[tuple[str, dict]]:
    """The config's sources in Snakemake's order (later wins): the workflow's ``config.yaml``, each
    ``--configfile`` (``given``), then ``--config``'s values."""
    from cselab.io import load_yaml

    files = [p for p in configfiles if p not in given] + list(given)
    loaded = []
    for path in files:
        with open(path) as fh:
            loaded.append((os.path.relpath(path), load_yaml(fh.read()) or {}))
    return loaded + [("--config", dict(overrides))]


def validated(config: dict, sources) -> dict:
    """The config validated, once for the invocation; a bad value is one ConfigError naming the
    key and where it was set (``sources``: a callable returning :func:`config_sources`)."""
    from cselab.pipeline.checks import key_origin
    from cselab.pipeline.config import validate

    try:
        return validate(config)
    except CselabError as e:
        origin = key_origin(str(e), sources())
        raise ConfigError(f"invalid configuration: {e}" + (f" [set in {origin}]" if origin else "")) from None


def user_error(e: BaseException) -> CselabError:
    """What the workflow's start says of ``e``: a user error as it is, a file that cannot be written
    (a full or read-only disk) as one :class:`~cselab.errors.StorageError` naming it; anything else
    is raised again (a traceback: not the user's)."""
    from cselab.errors import storage_error

    if isinstance(e, CselabError):
        return e
    named = storage_error(e)
    if named is None:
        raise e
    return named


def hand_to_jobs(config: dict, cfg: dict) -> None:
    """Snakemake's ``config`` (what each job receives) becomes the validated ``cfg``, keeping the
    config as given under :data:`cselab.pipeline.operations.GIVEN`: a job reads its settings
    from the config its plan was made of, through the same functions, validated once."""
    import copy

    from cselab.pipeline.operations import GIVEN

    given = copy.deepcopy({k: v for k, v in config.items() if k != GIVEN})
    config.clear()
    config.update(copy.deepcopy(cfg), **{GIVEN: given})


def set_up(run: Invocation, cfg: dict) -> None:
    """Before planning: the invocation's id and command for its jobs, a cluster job's signal,
    the folder's lock, the corpus and the trained models checked."""
    if not run.main:  # SLURM's warning before the time limit is for the training process, which checkpoints
        import signal

        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    # one id per invocation, inherited by its jobs (and by SLURM jobs, which re-read the Snakefile
    # with the submitting environment), and its command, which a model card quotes
    os.environ.setdefault(INVOCATION_ENV, time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:8])
    os.environ.setdefault(COMMAND_ENV, shlex.join(["snakemake", *run.args]))
    os.environ[console.URI_ENV] = cfg["mlflow"]["tracking_uri"]  # the console's last line opens it,
    os.environ[console.EXPERIMENT_ENV] = cfg["mlflow"]["experiment_name"]  # its invocation run goes there
    os.environ[console.FALLBACK_ENV] = cfg["mlflow"]["fallback"]  # or where the jobs' runs fall back to
    if run.executing:  # a second invocation stops before it touches anything
        from cselab.pipeline.locks import hold_invocation

        previous = hold_invocation(STATE_DIR, os.environ.get(COMMAND_ENV), os.environ[INVOCATION_ENV])
    if run.checks:  # the last invocation died (kill -9): what it left is finished or cleared first
        from cselab.pipeline.locks import INVOCATION_INFO, last_holder
        from cselab.pipeline.recovery import recover

        last = previous if run.executing else last_holder(Path(STATE_DIR) / INVOCATION_INFO)
        recover(last, STATE_DIR, cfg, run.executing, os.environ[INVOCATION_ENV])
    if run.checks and not run.forced_corpus:
        check_corpus_source(cfg)
    if run.checks:
        check_prepared(run)
        check_derived(run)
        damaged = set_aside_damaged_models(run.executing)
        restore_training_outputs(run.executing, skip=damaged)
        for hint in damaged_stages():
            print(f"cselab: {hint}", file=sys.stderr)
        set_aside_damaged_reports(cfg, run.executing)
        for hint in [*deleted_experiments(cfg), *lost_results(cfg, asked=run.args)]:
            print(f"cselab: {hint}", file=sys.stderr)


def check_corpus_source(cfg: dict) -> None:
    """A local corpus replaced in place since it was prepared (its size, or its bytes when its
    mtime moved): nothing plans on results trained on the old one until the user says which to keep."""
    from cselab.data.integrity import corpus_source_changed

    path = cfg["data"]["corpus"].get("path")
    change = corpus_source_changed(outputs.CORPUS_MANIFEST, path)
    if change:
        raise CselabError(
            f"the corpus {path} changed since rule prepare_corpus prepared it ({change}). Rerun with --forcerun "
            "prepare_corpus to prepare it again and retrain exactly the experiments that read it (add -n to list "
            "them first), or restore the file")


#: the records of prepared data that planning checks (each parses; the corpus's manifest also
#: against the prepared corpus's bytes), and the rule that writes each
PREPARED_RECORDS = (("resources/corpus/manifest.json", "prepare_corpus"), ("resources/plms/*.json", "resolve_plm"),
                    ("resources/senteval/reads/*.json", "senteval_reads"),
                    ("resources/senteval/manifest.json", "prepare_senteval"),
                    ("resources/beir/*/manifest.json", "prepare_beir"),
                    ("resources/stsb_retrieval/manifest.json", "prepare_stsb_retrieval"))


def check_prepared(run: Invocation) -> None:
    """The prepared data's records (every one that exists) parse, and the prepared corpus holds the
    bytes its manifest records, unless the command forces the rule that writes them. Checked here,
    before Snakemake plans: a damaged record or a changed corpus makes Snakemake plan the jobs that
    read it, and a job that then stops on it has had its outputs (an intact model) removed first."""
    import glob
    import json

    from cselab.data.integrity import verify_corpus

    for pattern, rule in PREPARED_RECORDS:
        if run.forces(rule):
            continue
        for record in sorted(glob.glob(pattern)):
            try:
                info = json.loads(Path(record).read_text())
                if not isinstance(info, dict):
                    raise ValueError(f"a JSON {type(info).__name__}, not an object")
                if rule == "prepare_corpus" and Path(outputs.CORPUS).is_file():
                    verify_corpus(record, outputs.CORPUS)
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise DataError(f"{record} is damaged ({type(e).__name__}: {e}); rule {rule} writes it: rebuild it "
                                f"with snakemake --forcerun {rule} <your target> (add -n to see what that reruns "
                                "first)") from None


#: data derived from the prepared corpus that trainings read, each recorded beside it
#: (``<file>.sha256``) by the rule that writes it
DERIVED_DATA = ((outputs.path(outputs.CORPUS_TRAIN_SPLIT, fraction="*"), "split_corpus"),
                (outputs.path(outputs.CORPUS_HELDOUT_SPLIT, fraction="*"), "split_corpus"),
                (outputs.SPANS, "segment_corpus"), (outputs.path(outputs.SUBSAMPLED, strategy="*"), "subsample"))


def check_derived(run: Invocation) -> None:
    """Each file of :data:`DERIVED_DATA` against its record, unless the command forces it or its
    rule: a damaged or edited one is newer than the trainings that read it, so Snakemake would
    plan them again, removing their intact models, and train them on it."""
    import glob

    from cselab.evaluation.records import check_recorded

    for pattern, rule in DERIVED_DATA:
        for path in sorted(glob.glob(pattern)):
            if not (run.forces(rule) or run.forces(path)):
                check_recorded(path)


def set_aside_damaged_models(move: bool) -> list[Path]:
    """Trained models damaged since training ended (a file missing, truncated or changed):
    moved aside (``move``), so rule train rebuilds each when a job reads it (this invocation or a
    later one), or named on stderr (a dry run changes no file); returns the models found damaged."""
    from cselab.models.checkpoints import damaged_model

    damaged = []
    for model in sorted(Path(".").glob(outputs.path(outputs.MODEL, exp="*"))):
        problem = damaged_model(model)
        if not problem:
            continue
        damaged.append(model)
        set_aside(problem, str(model), [model], "rule train rebuilds it when a job reads it (the results "
                  "evaluated before the damage are kept)", move)
    return damaged


def damaged_stages() -> list[str]:
    """One message per pretraining stage's model damaged since its stage ended. Unlike a trained
    model, a stage is not moved aside: Snakemake would build it again and then retrain every
    training a target needs that starts from it, intact ones included. A training that would start
    from it stops at its start with the same message (``cselab.pipeline.jobs.train``)."""
    from cselab.models.checkpoints import damaged_model, damaged_stage_message

    hints = []
    for stage in sorted(Path(".").glob(outputs.path(outputs.PRETRAINED, stage="*", plm="*"))):
        problem = damaged_model(stage)
        if problem:
            hints.append(damaged_stage_message(stage, problem))
    return hints


def restore_training_outputs(copy: bool, skip: list[Path] = ()) -> list[Path]:
    """A training's curve, summary or plot deleted or damaged beside its intact model: copied back
    (``copy``) from the copies the model's folder keeps (``model/training/``, in its record), so
    Snakemake does not plan the training again (which removes the model first), or named on stderr
    (a dry run changes no file); returns the outputs found wrong. A damaged model (``skip``:
    those :func:`set_aside_damaged_models` found) is trained again, its outputs with it."""
    import shutil

    from cselab.models.checkpoints import damaged_model, training_copies_to_restore

    trained = [m for m in sorted(Path(".").glob(outputs.path(outputs.MODEL, exp="*"))) if m not in skip]
    stages = [m for m in sorted(Path(".").glob(outputs.path(outputs.PRETRAINED, stage="*", plm="*")))
              if not damaged_model(m)]
    wrong = []
    for model in trained + stages:
        for source, out, problem in training_copies_to_restore(model):
            wrong.append(out)
            if copy:
                shutil.copy2(source, out)
            print(f"cselab: {out} {problem}; {'restored' if copy else 'a real run restores it'} from the copy "
                  f"its training kept in {source.parent}/ (the model is intact: it is not trained again)",
                  file=sys.stderr)
    return wrong


def set_aside(problem: str, what: str, paths: list[Path], rebuild: str, move: bool) -> None:
    """Move ``paths`` (the damaged output ``what``; those that exist) aside as ``<path>.damaged-<time>``
    and say so with ``problem`` and how it is ``rebuild``-t, or only say what a real run would do."""
    if not move:
        print(f"cselab: {problem}; a real run moves {what} aside, and {rebuild}", file=sys.stderr)
        return
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for path in paths:
        if path.exists():
            os.rename(path, f"{path}.damaged-{stamp}")
    print(f"cselab: {problem}; moved {what} aside (.damaged-{stamp}): {rebuild}", file=sys.stderr)


#: what a report job writes together and records beside each file: (config section, the files'
#: patterns, their wildcard, the rule)
REPORTS = (("tables", (outputs.TABLE_CSV, outputs.TABLE_MD), "table", "table"),
           ("figures", (outputs.FIGURE_PNG, outputs.FIGURE_CSV), "figure", "figure"))


def set_aside_damaged_reports(cfg: dict, move: bool) -> list[str]:
    """Built tables and figures that are no longer what their job wrote (a file cut, edited, or
    its other half missing), checked against the records the job wrote beside them: moved aside
    (``move``), so Snakemake builds the table or figure again when it is asked for, or named on
    stderr (a dry run changes no file); returns their names. One without records is left as it is."""
    from cselab.evaluation.records import record_path, report_problem

    damaged = []
    for section, patterns, wildcard, rule in REPORTS:
        for name in cfg.get(section, {}):
            files = [outputs.path(pattern, **{wildcard: name}) for pattern in patterns]
            if not any(record_path(f).is_file() for f in files):
                continue
            problems = [problem for problem in map(report_problem, files) if problem]
            if not problems:
                continue
            damaged.append(name)
            set_aside(f"the {rule} {name} is damaged ({'; '.join(problems)})", "it",
                      [path for f in files for path in (Path(f), record_path(f))],
                      f"rule {rule} builds it again when it is asked for", move)
    return damaged


def deleted_experiments(cfg: dict) -> list[str]:
    """One hint per experiment whose folder was deleted under the tables built from it. Snakemake
    rebuilds a missing file only where the target that needs it is out of date: a table that
    exists is not, so the deleted runs would stay gone. Asking for the experiment's summary as a
    target retrains it, and the tables follow. Only a folder that existed: one whose run the table
    shows (its experiment and seed in the table's rows), not a seed or an experiment added since."""
    from cselab.pipeline import experiments, targets

    tables: dict[str, list[str]] = {}
    for table in cfg["tables"]:
        built = outputs.path(outputs.TABLE_CSV, table=table)
        if not Path(built).is_file():
            continue
        shown = table_runs(built)
        for exp_id in experiments.experiment_ids(cfg, targets.table_experiments(cfg, table)):
            folder = Path(outputs.path(outputs.EXPERIMENT_DIR, exp=exp_id))
            if experiments.is_trained(cfg, exp_id) and not folder.exists() and _shown(cfg, exp_id, shown):
                tables.setdefault(exp_id, []).append(built)
    return [f"{outputs.path(outputs.EXPERIMENT_DIR, exp=exp_id)}/ was deleted, but {', '.join(built)} "
            f"{'was' if len(built) == 1 else 'were'} built from it; Snakemake does not rebuild what is missing under "
            f"a result that exists. To retrain it, add its summary to the targets: snakemake ... "
            f"{outputs.path(outputs.TRAIN_SUMMARY, exp=exp_id)} {' '.join(built)}" for exp_id, built in tables.items()]


def lost_results(cfg: dict, asked: tuple[str, ...] = ()) -> list[str]:
    """One hint per result file that is gone while its record stays (``<file>.sha256``: a job
    wrote it once; a forced evaluation that failed, for one, had it removed first) and a built
    table reads it, in an experiment folder that is still there (a deleted folder has its own
    hint, :func:`deleted_experiments`), unless the command line ``asked`` for it. As there,
    Snakemake does not rebuild it under the table."""
    from cselab.evaluation.records import record_path
    from cselab.pipeline import targets

    asked_for = {os.path.normpath(a) for a in asked}
    tables: dict[str, list[str]] = {}
    for table in cfg["tables"]:
        built = outputs.path(outputs.TABLE_CSV, table=table)
        if not Path(built).is_file():
            continue
        for exp_id, files in targets.table_inputs(cfg, table).items():
            if not Path(outputs.path(outputs.EXPERIMENT_DIR, exp=exp_id)).is_dir():
                continue
            for lost in (f for f in files if not Path(f).exists() and record_path(f).is_file()
                         and os.path.normpath(f) not in asked_for):
                tables.setdefault(lost, []).append(built)
    return [f"{lost} is gone (its record {record_path(lost).name} is there: a job wrote it once), but "
            f"{', '.join(built)} {'was' if len(built) == 1 else 'were'} built from it; Snakemake does not rebuild "
            f"what is missing under a result that exists. To build it again, add it to the targets: snakemake ... "
            f"{lost} {' '.join(built)}" for lost, built in tables.items()]


def table_runs(csv_path: str | Path) -> set[tuple[str, str]]:
    """(experiment, seed) of every run a built table shows (its ``experiment`` and ``seeds`` columns)."""
    import csv

    try:
        with open(csv_path, newline="") as fh:
            return {(row.get("experiment", ""), seed) for row in csv.DictReader(fh)
                    for seed in (row.get("seeds") or "").split()}
    except (OSError, csv.Error, UnicodeDecodeError):
        return set()


def _shown(cfg: dict, exp_id: str, shown: set[tuple[str, str]]) -> bool:
    from cselab.pipeline.experiments import typed_spec

    spec = typed_spec(cfg, exp_id)
    return (spec.name, str(spec.seed)) in shown


#: result file -> why it is damaged (None: sound), checked once an invocation (:func:`checked_results`)
_CHECKED: dict[str, str | None] = {}


def checked_results(files, run: Invocation, rebuild: Callable[[str], None]):
    """``files`` (a list, or a dict of them) that a job reads, as its rule's input function
    returns them, each evaluation result among them checked once an invocation
    (:func:`cselab.evaluation.records.result_problem`): a damaged or edited one is named on stderr
    and handed to ``rebuild`` (the workflow forces the job that wrote it), so this invocation
    builds it again before anything reads it; what reads it is not removed before that."""
    from cselab.evaluation.records import recorded_rule, result_problem

    if not run.checks:
        return files
    for path in (files.values() if isinstance(files, dict) else files):
        for one in ([path] if isinstance(path, str) else path):
            if one in _CHECKED or not outputs.is_result_file(one):
                continue
            _CHECKED[one] = problem = result_problem(one)
            if problem:
                rebuild(one)
                rule = f"rule {recorded_rule(one)}" if recorded_rule(one) else "its evaluation"
                print(f"cselab: the result {one} is damaged ({problem}); {rule} builds it again "
                      f"{'in this run' if run.executing else 'in a real run'}, before what reads it", file=sys.stderr)
    return files
