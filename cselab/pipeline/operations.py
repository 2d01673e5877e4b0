"""What a job reads of how to run: the operational settings (:mod:`cselab.settings.operational`)
of the config Snakemake hands it, through one function, :func:`operations`. A job's spec (its
params) holds what it computes; this holds how: tracking, plugins, encoding batches and the
embedding cache, retrieval's precision and blocks, the training run's processes, checkpoints,
logging and compile.

The config a job receives is the invocation's validated one (``rules/common.smk`` puts it in
Snakemake's ``config``, as ``snakemake.utils.validate`` fills in defaults): a training job's
operational settings come from :func:`cselab.pipeline.experiments.operational_settings`, the same
merge its spec was made with. Nothing is validated again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cselab.settings import from_dict
from cselab.settings.operational import BEIR, EVALUATION
from cselab.settings.sections import Mlflow

#: the key of Snakemake's config that keeps the config as the invocation was given it (the cost
#: plan's dry run plans that; the other keys are the validated config)
GIVEN = "cselab_config_as_given"


@dataclass(frozen=True)
class Operations:
    """A job's operational settings. ``training``: the OPERATIONAL training settings of the job's
    experiment or pretraining stage (empty for other jobs); ``config``: the config as given, for
    the one job whose output is about the config itself (the cost plan's dry run)."""

    tracking_uri: str
    mlflow: Mlflow
    plugins: tuple[str, ...]
    encoding: dict[str, Any]
    beir: dict[str, Any]
    training: dict[str, Any] = field(default_factory=dict)
    config: dict = field(default_factory=dict, repr=False)


def operations(smk, exp_id: str | None = None, stage: str | None = None) -> Operations:
    """The job's operational settings, from ``smk.config`` (the validated config); a training
    job's experiment ``exp_id`` or pretraining ``stage``: their operational training settings too."""
    import os

    from cselab.pipeline.experiments import operational_settings

    config = dict(smk.config)
    mlflow = from_dict(Mlflow, config.get("mlflow") or {}, where="mlflow")
    evaluation = config.get("evaluation") or {}
    beir = evaluation.get("beir") or {}
    training = {}
    if exp_id is not None or stage is not None:
        training = operational_settings(config, exp_id, stage)
    return Operations(tracking_uri=os.environ.get("MLFLOW_TRACKING_URI") or mlflow.tracking_uri, mlflow=mlflow,
                      plugins=tuple(config.get("plugins") or ()),
                      encoding={k: evaluation[k] for k in EVALUATION if evaluation.get(k) is not None},
                      beir={k: beir[k] for k in BEIR if k in beir}, training=training,
                      config=config.get(GIVEN, config))
