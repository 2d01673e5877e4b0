# Shared set-up: make the library importable, validate the config, name experiments.
# Everything here asks the library (cselab.pipeline): paths from outputs, settings from config.
import functools
import math
import os
from pathlib import Path
import re
import sys

# the library is importable (the Snakefile puts workflow.basedir first on sys.path); the scripts
# find it via workflow_scripts/cselab_path.py

from snakemake.exceptions import IncompleteCheckpointException

from cselab.data import beir as cselab_beir
from cselab.data import senteval as cselab_senteval
from cselab.errors import CselabError
from cselab.pipeline import config as cselab_config
from cselab.pipeline import experiments as cselab_experiments
from cselab.pipeline import invocation as cselab_invocation
from cselab.pipeline.invocation import UserError
from cselab.pipeline import jobspecs as JOBS
from cselab.pipeline import outputs as OUT
from cselab.pipeline import targets as cselab_targets
from cselab.pipeline.tracking import COMMAND_ENV
from cselab.settings import ExperimentSpec, typed_config

# Before planning (cselab.pipeline.invocation): the config validated once, the invocation's id,
# lock and command line, the corpus and the trained models checked. One message on a problem.
INVOCATION = cselab_invocation.Invocation.of(sys.argv[1:], workflow.is_main_process)
try:
    CFG = cselab_invocation.validated(config, lambda: cselab_invocation.config_sources(
        [str(p) for p in workflow.configfiles], [str(p) for p in workflow.config_settings.configfiles],
        workflow.config_settings.config))
    cselab_invocation.set_up(INVOCATION, CFG)
except (CselabError, OSError) as e:  # a full or read-only results/ included: one line naming it
    raise UserError(str(cselab_invocation.user_error(e)))
# the jobs' config is the validated one (defaults filled in, sweeps and methods tables expanded,
# as snakemake.utils.validate fills in defaults in place), beside the config as given (the cost plan's)
cselab_invocation.hand_to_jobs(config, CFG)

SPANS = CFG.get("spans", {})


wildcard_constraints:
    exp="[A-Za-z0-9][A-Za-z0-9._@=+-]*",  # a sweep's point: <base>@<key>=<value>+... (cselab/pipeline/sweeps.py)
    plm="[A-Za-z0-9][A-Za-z0-9._-]*",
    stage="[A-Za-z0-9][A-Za-z0-9._-]*",
    dataset="[A-Za-z0-9][A-Za-z0-9._-]*",
    table="|".join(CFG["tables"]),
    figure="|".join(CFG.get("figures", {})) or "no-figures",
    sweep="|".join(CFG.get("sweeps") or {}) or "no-sweeps",
    strategy="adjacent|overlapping|subsuming",
    fraction=r"0\.[0-9]+",
    reads="|".join(cselab_senteval.READS),


def cfg_call(fn, *args, **kwargs):
    """A library call on the config, with a user error as one UserError line."""
    try:
        return fn(CFG, *args, **kwargs)
    except CselabError as e:
        raise UserError(str(e))


# What the rules' inputs and resources ask of the library (a job's params: cselab.pipeline.jobspecs);
# pure functions of CFG (validated once), each built once per invocation and only read.
def typed_experiment_spec(exp):
    """The experiment's spec, typed (:class:`cselab.settings.ExperimentSpec`; the library keeps it)."""
    return cfg_call(cselab_experiments.typed_spec, exp)


def trained_experiment_spec(exp):
    """The spec of an experiment that trains (an untrained one: one message, nothing planned)."""
    return cfg_call(cselab_experiments.trained_spec, exp)


@functools.cache
def pretraining_spec(stage, plm):
    return cfg_call(cselab_config.pretraining_spec, stage, plm)


def artifacts(spec):
    """The upstream artifacts (pretraining-stage outputs) a spec's methods declared: role -> path."""
    try:
        return cselab_config.artifacts(spec)
    except CselabError as e:
        raise UserError(str(e))


@functools.cache
def training_world(exp=None, stage=None):
    """(devices per node, nodes) of a training job: operational settings, not in its params."""
    ops = cfg_call(cselab_config.operational_settings, exp, stage)
    return ops.get("devices", 1), ops.get("nodes", 1)


def sweep_winner(name):
    """The winner of sweep `name` (cselab.reporting.sweeps.read_winner) once its checkpoint has
    run or is up to date; None before (a table asking is re-planned after it)."""
    from cselab.reporting.sweeps import read_winner

    try:
        csv = checkpoints.sweep.get(sweep=name).output.csv
    except IncompleteCheckpointException:
        return None
    try:
        return read_winner(csv)
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"sweep {name}: cannot read its winner from {csv}: {e}")


def training_inputs(spec):
    """What a training job reads: its corpus, the resolved PLM and the declared artifacts."""
    spec = ExperimentSpec.of(spec)
    return {"corpus": cselab_config.corpus_file(spec), "plm": OUT.path(OUT.PLM, plm=spec.plm),
            **{f"artifact_{role}": path for role, path in artifacts(spec).items()}}


def checked(files):
    """Result files a job reads (a list or a dict), each checked once an invocation: a damaged or
    edited one is named, and the job that wrote it is forced, so it is built again before this job
    reads it (cselab.pipeline.invocation.checked_results). Snakemake's own forcing, as
    ``--forcerun <file>`` would: the DAG being built takes the file among those it forces.
    ``workflow.dag.forcefiles`` is no documented API: it is what ``--forcerun`` fills in Snakemake
    9.27 (constraints.txt pins it); tests/test_faults.py's damaged-result cases fail if it moves."""
    return cselab_invocation.checked_results(files, INVOCATION, lambda path: workflow.dag.forcefiles.add(path))


def senteval_reads(*names):
    """The records of the SentEval files a job reads (cselab.data.senteval.READS): its data input."""
    return [OUT.path(OUT.SENTEVAL_READS, reads=name) for name in names]


def senteval_reads_inputs(reads):
    """What the senteval_reads job of ``reads`` reads (None: the prepare_senteval job, every file)
    reads: the files themselves (a local tree, data.senteval.path: a changed one reruns the job
    and, after it, the jobs that read them), or, for senteval_reads, the downloaded tree's manifest
    (one archive)."""
    path = CFG["data"]["senteval"].get("path")
    if not path:
        return {"manifest": OUT.SENTEVAL_MANIFEST} if reads else {}
    sets = JOBS.job_params(CFG, "senteval_reads", {"reads": reads})["sets"] if reads else None
    return {"files": cfg_call(lambda cfg: cselab_senteval.planned_files(path, sets))}


def model_input(wildcards):
    return cfg_call(cselab_targets.model_input, wildcards.exp)


def mteb_sources(exp):
    """(kind, result file, data manifest) of an experiment's MTEB result files."""
    return cfg_call(cselab_targets.mteb_sources, exp)


# BEIR evaluation jobs: one per checkpoint and corpus. Datasets that share a corpus
# (evaluation.beir.shared_corpora: FEVER and Climate-FEVER) are one job (evaluate_beir_shared_*).
BEIR_GROUPS = cselab_beir.shared_corpus_groups(CFG["evaluation"]["beir"])
BEIR_SHARED = {name: members for name, members in BEIR_GROUPS.items() if len(members) > 1}
BEIR_ALONE = "|".join(  # the datasets evaluate_beir leaves to a shared job
    re.escape(m) for members in BEIR_SHARED.values() for m in members) or "(?!)"


def figure_inputs(figure):
    """Per experiment what the figure's kind reads (``exp<n>_<read>``), plus the held-out corpus
    slice if it needs one."""
    files = cselab_targets.figure_inputs(CFG, figure)
    heldout = cselab_targets.heldout_file(CFG, figure)
    inputs = {f"exp{n}_{read}": path for n, reads in enumerate(files.values()) for read, path in reads.items()}
    return {**inputs, **({"heldout": heldout} if heldout else {})}


onstart:
    from cselab.pipeline.locks import hold_invocation
    from cselab.pipeline.tracking import init_store, relocate_artifacts, resolve_tracking_uri

    try:  # one live invocation per folder (Snakemake's own lock files can be deleted under it)
        if workflow.is_main_process:
            hold_invocation(cselab_invocation.STATE_DIR, os.environ.get(COMMAND_ENV))
    except (CselabError, OSError) as e:
        raise UserError(str(cselab_invocation.user_error(e)))

    try:  # an unreachable tracking server stops the workflow here, before any job
        uri = resolve_tracking_uri(CFG)
        moved = relocate_artifacts(uri)  # a moved or copied folder: its artifacts are its own again
        if moved:
            print(f"cselab: {moved}", file=sys.stderr)
        init_store(uri, typed_config(CFG).mlflow.experiment_name)
    except (CselabError, OSError) as e:  # a read-only results/ (its .mlflow.lock) included: one line
        raise UserError(str(cselab_invocation.user_error(e)))
