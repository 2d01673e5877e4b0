# Shared set-up: make the library importable, validate the config, name experiments.
# Everything here asks the library (cselab.pipeline): paths from outputs, settings from config.
import functools
import math
import os
from pathlib import Path
import re
import shlex
import sys
import time
import uuid

# the library is importable (the Snakefile puts workflow.basedir first on sys.path); the scripts
# find it via workflow_scripts/cselab_path.py

from snakemake.exceptions import WorkflowError

from cselab.data import beir as cselab_beir
from cselab.data.senteval import KNOWN_TASKS
from cselab.errors import CselabError
from cselab.pipeline import config as cselab_config
from cselab.pipeline import experiments as cselab_experiments
from cselab.pipeline import outputs as OUT
from cselab.pipeline import targets as cselab_targets
from cselab.pipeline.tracking import COMMAND_ENV, INVOCATION_ENV
from cselab.settings import ExperimentSpec, typed_config

def _config_sources():
    """The config's sources in Snakemake's order (later wins): the workflow's config.yaml, each
    --configfile, then --config's values."""
    import yaml

    given = [str(p) for p in workflow.config_settings.configfiles]
    files = [str(p) for p in workflow.configfiles if str(p) not in given] + given
    loaded = []
    for path in files:
        with open(path) as fh:
            loaded.append((os.path.relpath(path), yaml.safe_load(fh) or {}))
    return loaded + [("--config", dict(workflow.config_settings.config))]


try:
    CFG = cselab_config.validate(config)
except CselabError as e:
    from cselab.pipeline.checks import key_origin

    _origin = key_origin(str(e), _config_sources())
    raise WorkflowError(f"invalid configuration: {e}" + (f" [set in {_origin}]" if _origin else ""))

# Inside a cluster job (not the invocation that submits): SLURM's warning signal before the time
# limit (--signal=USR1@<s>, profiles/slurm) is for the training process, which checkpoints and
# requeues (cselab.training.preemption); the snakemake process around it must outlive it.
if not workflow.is_main_process:
    import signal

    signal.signal(signal.SIGUSR1, signal.SIG_IGN)

# One id per snakemake invocation, inherited by its jobs (and by SLURM jobs, which re-read this
# file with the submitting environment): every MLflow run of the invocation is tagged with it.
os.environ.setdefault(INVOCATION_ENV, time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:8])
# and its command line, which a model card quotes as the command that reproduces it
os.environ.setdefault(COMMAND_ENV, shlex.join(["snakemake", *sys.argv[1:]]))

# Whether this main-process invocation plans (a dry run: -n alone or in a short-flag group) or
# neither plans nor runs jobs (unlock, lint, reports, listings, DAG pictures): cselab's checks
# before planning skip the latter and never change a file in the former.
_ARGS = sys.argv[1:]
DRY_RUN = any(a in ("--dry-run", "--dryrun") or (a.startswith("-") and not a.startswith("--") and "n" in a[1:])
              for a in _ARGS)
NO_JOBS = any(a.split("=")[0] in ("--unlock", "--lint", "--list", "-l", "--list-target-rules", "--lt", "--summary",
                                 "-S", "--detailed-summary", "-D", "--report", "--touch", "-t", "--dag", "--rulegraph",
                                 "--filegraph", "--d3dag", "--cleanup-metadata", "--cm", "--list-changes", "--lc",
                                 "--delete-all-output", "--delete-temp-output", "--conda-create-envs-only",
                                 "--containerize", "--archive", "--export-cwl") for a in _ARGS)
EXECUTING = workflow.is_main_process and not DRY_RUN and not NO_JOBS

# The invocation that runs jobs holds the folder's lock from here on (onstart takes it too, for
# API use): a second one stops before it touches anything.
if EXECUTING:
    from cselab.pipeline.locks import hold_invocation

    try:
        hold_invocation(".snakemake/cselab", os.environ.get(COMMAND_ENV))
    except CselabError as e:
        raise WorkflowError(str(e))

# A local corpus replaced in place since it was prepared (its size, or its bytes when its mtime
# moved): nothing plans on results trained on the old one until the user says which to keep.
_FORCED = "prepare_corpus" in _ARGS or any(a in ("-F", "--forceall") for a in _ARGS)
if workflow.is_main_process and not NO_JOBS and not _FORCED:
    from cselab.data.integrity import corpus_source_changed

    _corpus_change = corpus_source_changed(OUT.CORPUS_MANIFEST, CFG["data"]["corpus"].get("path"))
    if _corpus_change:
        raise WorkflowError(
            f"the corpus {CFG['data']['corpus']['path']} changed since rule prepare_corpus prepared it "
            f"({_corpus_change}). Rerun with --forcerun prepare_corpus to prepare it again and retrain exactly the "
            "experiments that read it (add -n to list them first), or restore the file")

# every SentEval task, whatever the tables need: the manifest is an input of training (STS-B dev)
# and must not change when a table is added
SENTEVAL_TASKS = list(KNOWN_TASKS)
SPANS = CFG.get("spans", {})
ENCODER = cselab_config.encoder_settings(CFG)


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


def cfg_call(fn, *args, **kwargs):
    """A library call on the config, with a user error as one WorkflowError line."""
    try:
        return fn(CFG, *args, **kwargs)
    except CselabError as e:
        raise WorkflowError(str(e))


# The specs and training worlds below are pure functions of CFG (fixed once validated), asked for
# by several input functions, params and resources of each job: each is built once per invocation
# (functools.cache; a typed spec in the library's cache), and its callers only read it.
@functools.cache
def experiment_spec(exp):
    return cfg_call(cselab_config.experiment_spec, exp)


def typed_experiment_spec(exp):
    """:func:`experiment_spec`, typed (:class:`cselab.settings.ExperimentSpec`; the library keeps it)."""
    return cfg_call(cselab_experiments.typed_spec, exp)


@functools.cache
def pretraining_spec(stage, plm):
    return cfg_call(cselab_config.pretraining_spec, stage, plm)


def artifacts(spec):
    """The upstream artifacts (pretraining-stage outputs) a spec's methods declared: role -> path."""
    try:
        return cselab_config.artifacts(spec)
    except CselabError as e:
        raise WorkflowError(str(e))


@functools.cache
def training_world(exp=None, stage=None):
    """(devices per node, nodes) of a training job: operational settings, not in its params."""
    ops = cfg_call(cselab_config.operational_settings, exp, stage)
    return ops.get("devices", 1), ops.get("nodes", 1)


def training_inputs(spec):
    """What a training job reads: its corpus, the resolved PLM and the declared artifacts."""
    spec = ExperimentSpec.of(spec)
    return {"corpus": cselab_config.corpus_file(spec), "plm": OUT.path(OUT.PLM, plm=spec.plm),
            **{f"artifact_{role}": path for role, path in artifacts(spec).items()}}


def model_input(wildcards):
    return cfg_call(cselab_targets.model_input, wildcards.exp)


# A trained model damaged since training ended (a file missing, truncated or changed; checked by
# size, and by sha256 when its mtime moved): moved aside before planning, so this invocation
# retrains it before anything reads it (no job fails on it, no retry is spent).
if workflow.is_main_process and not NO_JOBS:
    from cselab.models.checkpoints import damaged_model

    for _model in sorted(Path(".").glob(OUT.path(OUT.MODEL, exp="*"))):
        _problem = damaged_model(_model)
        if _problem and not EXECUTING:
            print(f"cselab: {_problem}; a real run moves {_model} aside and retrains it first", file=sys.stderr)
        elif _problem:
            _aside = f"{_model}.damaged-{time.strftime('%Y%m%d-%H%M%S')}"
            os.rename(_model, _aside)
            print(f"cselab: {_problem}; moved {_model} to {_aside}: rule train rebuilds it in this run",
                  file=sys.stderr)


def mteb_sources(exp):
    """(kind, result file, data manifest) of an experiment's MTEB result files."""
    return cfg_call(cselab_targets.mteb_sources, exp)


def beir_local_path(dataset):
    """A local copy of a BEIR dataset (data.beir.path/<dataset>), or None to download it."""
    root = CFG["data"]["beir"].get("path")
    return str(Path(root) / dataset) if root else None


def prepared_beir():
    """The configured BEIR datasets already prepared: dataset -> data folder."""
    folders = {d: OUT.path(OUT.BEIR_DATA, dataset=d) for d in CFG["evaluation"]["beir"]["datasets"]}
    return {d: folder for d, folder in folders.items() if Path(folder).is_dir()}


# BEIR evaluation jobs: one per checkpoint and corpus. Datasets that share a corpus
# (evaluation.beir.shared_corpora: FEVER and Climate-FEVER) are one job (evaluate_beir_shared_*).
BEIR_GROUPS = cselab_beir.shared_corpus_groups(CFG["evaluation"]["beir"])
BEIR_SHARED = {name: members for name, members in BEIR_GROUPS.items() if len(members) > 1}
BEIR_SHARED_RULE = {name: "evaluate_beir_shared_%s" % re.sub(r"\W", "_", name) for name in BEIR_SHARED}
# what can change a result (the job's params); precision, query_block, shared_corpora and
# resources only change how it runs, so the job reads them from the config: a change reruns nothing
BEIR_SCORED = cselab_beir.retrieval_params(CFG["evaluation"]["beir"])
BEIR_ALONE = "|".join(  # the datasets evaluate_beir leaves to a shared job
    re.escape(m) for members in BEIR_SHARED.values() for m in members) or "(?!)"


def beir_resources(members):
    return cselab_beir.retrieval_resources(members, CFG["evaluation"]["beir"])


def figure_entries(figure):
    """[(label, experiment id, input key prefix)] in legend order."""
    ids = cselab_targets.figure_experiments(CFG, figure)
    return [(label, exp_id, f"exp{n}") for n, (label, exp_id) in enumerate(ids.items())]


def figure_inputs(figure):
    """Per experiment what the figure's kind reads (``exp<n>_<read>``), plus the held-out corpus
    slice if it needs one."""
    files = cselab_targets.figure_inputs(CFG, figure)
    heldout = cselab_targets.heldout_file(CFG, figure)
    inputs = {f"exp{n}_{read}": path for n, reads in enumerate(files.values()) for read, path in reads.items()}
    return {**inputs, **({"heldout": heldout} if heldout else {})}


onstart:
    from cselab.pipeline.locks import hold_invocation
    from cselab.pipeline.tracking import init_store, resolve_tracking_uri

    try:  # one live invocation per folder (Snakemake's own lock files can be deleted under it)
        if workflow.is_main_process:
            hold_invocation(".snakemake/cselab", os.environ.get(COMMAND_ENV))
    except CselabError as e:
        raise WorkflowError(str(e))

    try:  # an unreachable tracking server stops the workflow here, before any job
        init_store(resolve_tracking_uri(CFG), typed_config(CFG).mlflow.experiment_name)
    except CselabError as e:
        raise WorkflowError(str(e))
