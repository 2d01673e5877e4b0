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
ENCODER = {**cselab_config.encoder_settings(CFG), "cache": CFG["evaluation"].get("cache", True)}


wildcard_constraints:
    exp="[A-Za-z0-9][A-Za-z0-9._-]*",
    plm="[A-Za-z0-9][A-Za-z0-9._-]*",
    dataset="[A-Za-z0-9][A-Za-z0-9._-]*",
    table="|".join(CFG["tables"]),


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
    """What the table rule needs to know about each experiment id (a rerun trigger too)."""
    keep = ("name", "plm", "model", "method", "objective", "options", "seed")
    return [{**{k: experiment_spec(i)[k] for k in keep}, "id": i, "files": files}
            for i, files in table_inputs(table).items()]


onstart:
    from cselab.tracking import init_store

    init_store(cselab_config.tracking_uri(CFG), CFG["mlflow"]["experiment_name"])
