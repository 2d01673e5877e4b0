# Shared set-up: make the library importable, validate the config, name experiments.
import sys
from pathlib import Path

sys.path.insert(0, workflow.basedir)  # scripts find the library via workflow_scripts/cselab_path.py

from snakemake.exceptions import WorkflowError

from cselab import config as cselab_config
from cselab.errors import CselabError

try:
    CFG = cselab_config.validate(config)
except CselabError as e:
    raise WorkflowError(f"invalid configuration: {e}")


SENTEVAL_TASKS = cselab_config.senteval_tasks(CFG)
SPANS = CFG.get("spans", {})
ENCODER = {**cselab_config.encoder_settings(CFG), "cache": CFG["evaluation"].get("cache", True)}


wildcard_constraints:
    exp="[A-Za-z0-9][A-Za-z0-9._-]*",
    plm="[A-Za-z0-9][A-Za-z0-9._-]*",
    dataset="[A-Za-z0-9][A-Za-z0-9._-]*",
    table="|".join(CFG["tables"]),
    figure="|".join(CFG.get("figures", {})) or "no-figures",
    strategy="adjacent|overlapping|subsuming",


def experiment_spec(exp):
    try:
        return cselab_config.experiment_spec(CFG, exp)
    except CselabError as e:
        raise WorkflowError(str(e))


def table_ids(table):
    return cselab_config.experiment_ids(CFG, CFG["tables"][table]["experiments"])


def table_inputs(table):
    return cselab_config.table_inputs(CFG, table)


def beir_local_path(dataset):
    """A local copy of a BEIR dataset (data.beir.path/<dataset>), or None to download it."""
    root = CFG["data"]["beir"].get("path")
    return str(Path(root) / dataset) if root else None


def model_input(wildcards):
    """A trained experiment's best checkpoint, or the resolved PLM for an untrained one."""
    spec = experiment_spec(wildcards.exp)
    if spec["seed"] is None:
        return f"resources/plms/{spec['plm']}.json"
    return f"results/experiments/{wildcards.exp}/model"


def table_rows(table):
    """What the table rule needs to know about each experiment id (a rerun trigger too).

    ``options`` carries ``subsampling`` too: published settings are matched on it.
    """
    keep = ("name", "plm", "model", "method", "objective", "seed")
    rows = []
    for i, files in table_inputs(table).items():
        spec = experiment_spec(i)
        options = {**spec["options"], "subsampling": spec["training"].get("subsampling", "none")} if spec["seed"] is not None else {}
        rows.append({**{k: spec[k] for k in keep}, "options": options, "id": i, "files": files})
    return rows


def training_corpus(wildcards):
    return cselab_config.corpus_file(experiment_spec(wildcards.exp))


def figure_experiments(figure):
    """[(label, experiment id, input key)] in legend order."""
    ids = cselab_config.figure_experiments(CFG, figure)
    return [(label, exp_id, f"exp{n}") for n, (label, exp_id) in enumerate(ids.items())]


def figure_inputs(figure):
    paths = cselab_config.figure_inputs(CFG, figure)
    return {f"exp{n}": path for n, path in enumerate(paths.values())}


onstart:
    from cselab.tracking import init_store, resolve_tracking_uri

    try:  # an unreachable tracking server stops the workflow here, before any job
        init_store(resolve_tracking_uri(CFG), CFG["mlflow"]["experiment_name"])
    except CselabError as e:
        raise WorkflowError(str(e))
