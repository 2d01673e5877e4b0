# Shared set-up: make the library importable, validate the config, name experiments.
import sys

sys.path.insert(0, workflow.basedir)  # scripts find the library via workflow_scripts/cselab_path.py

from snakemake.exceptions import WorkflowError

from cselab import config as cselab_config
from cselab.errors import CselabError

try:
    CFG = cselab_config.validate(config)
except CselabError as e:
    raise WorkflowError(f"invalid configuration: {e}")


wildcard_constraints:
    exp="[A-Za-z0-9][A-Za-z0-9._-]*",
    plm="[A-Za-z0-9][A-Za-z0-9._-]*",


def experiment_spec(exp):
    try:
        return cselab_config.experiment_spec(CFG, exp)
    except CselabError as e:
        raise WorkflowError(str(e))


def table_ids(table):
    return cselab_config.experiment_ids(CFG, CFG["tables"][table]["experiments"])


def model_input(wildcards):
    """A trained experiment's best checkpoint, or the resolved PLM for an untrained one."""
    spec = experiment_spec(wildcards.exp)
    if spec["seed"] is None:
        return f"resources/plms/{spec['plm']}.json"
    return f"results/experiments/{wildcards.exp}/model"


def table_rows(table):
    """What the table rule needs to know about each experiment id (a rerun trigger too)."""
    keep = ("name", "plm", "model", "method", "objective", "options", "seed")
    return [{k: experiment_spec(i)[k] for k in keep} for i in table_ids(table)]


onstart:
    from cselab.tracking import init_store

    init_store(cselab_config.tracking_uri(CFG), CFG["mlflow"]["experiment_name"])
