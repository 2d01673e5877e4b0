"""What a job reads of how to run: the operational settings (:mod:`cselab.settings.operational`)
of the config Snakemake hands it, typed, through one function, :func:`operations`. A job's spec
(its params) holds what it computes; this holds how: tracking, plugins, encoding batches and the
embedding cache, retrieval's precision and blocks, the training run's processes, checkpoints,
logging and compile. Nothing here is validated again beyond these settings: the invocation that
planned the job validated the config once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cselab.settings import from_dict, training_settings
from cselab.settings.operational import BEIR, EVALUATION
from cselab.settings.sections import Mlflow
from cselab.settings.spec import ExperimentSpec
from cselab.settings.training import OPERATIONAL as TRAINING_OPERATIONAL


@dataclass(frozen=True)
class Operations:
    """A job's operational settings. ``training``: the OPERATIONAL training settings of the job's
    experiment or pretraining stage (empty for other jobs); ``config``: the whole config, for the
    one job whose output is about the config itself (the cost plan's dry run)."""

    tracking_uri: str
    mlflow: Mlflow
    plugins: tuple[str, ...]
    encoding: dict[str, Any]
    beir: dict[str, Any]
    training: dict[str, Any] = field(default_factory=dict)
    config: dict = field(default_factory=dict, repr=False)


def operations(smk, spec: ExperimentSpec | dict | None = None, stage: bool = False) -> Operations:
    """The job's operational settings, from ``smk.config``; ``spec``: a training job's spec (its
    experiment's, or with ``stage`` its pretraining stage's, operational training settings)."""
    import os

    config = dict(smk.config)
    mlflow = from_dict(Mlflow, config.get("mlflow") or {}, where="mlflow")
    evaluation = config.get("evaluation") or {}
    beir = evaluation.get("beir") or {}
    training = {}
    if spec is not None:
        spec = ExperimentSpec.of(spec)
        training = stage_training(config, spec.name) if stage else experiment_training(config, spec)
        training_settings(training)  # typed: a bad value is one message naming the key
    return Operations(tracking_uri=os.environ.get("MLFLOW_TRACKING_URI") or mlflow.tracking_uri, mlflow=mlflow,
                      plugins=tuple(config.get("plugins") or ()),
                      encoding={k: evaluation[k] for k in EVALUATION if evaluation.get(k) is not None},
                      beir={k: beir[k] for k in BEIR if k in beir}, training=training, config=config)


def experiment_training(config: dict, spec: ExperimentSpec) -> dict[str, Any]:
    """The OPERATIONAL training settings of an experiment, merged as its spec was: ``training`` <
    its PLM's < its method's < its own entry's (a sweep's point and a methods table's experiment
    take their base experiment's entry, or none)."""
    entry = _experiment_entry(config, spec.name)
    merged = {**(config.get("training") or {}),
              **((config.get("plms") or {}).get(spec.plm) or {}).get("training", {}),
              **((config.get("methods") or {}).get(spec.method) or {}).get("training", {}),
              **(entry.get("training") or {})}
    return {k: merged[k] for k in TRAINING_OPERATIONAL if k in merged}


def stage_training(config: dict, stage: str) -> dict[str, Any]:
    """The OPERATIONAL training settings of a pretraining stage: ``training`` < the stage's own."""
    merged = {**(config.get("training") or {}),
              **((config.get("pretraining") or {}).get(stage) or {}).get("training", {})}
    return {k: merged[k] for k in TRAINING_OPERATIONAL if k in merged}


def _experiment_entry(config: dict, name: str) -> dict:
    """``experiments.<name>`` as written; a sweep's point (``<base>@...``, or a name its sweep
    gives a point) has its base's."""
    experiments = config.get("experiments") or {}
    if name in experiments:
        return experiments[name] or {}
    for sweep in (config.get("sweeps") or {}).values():
        if name in ((sweep or {}).get("names") or {}).values() and (sweep or {}).get("base") in experiments:
            return experiments[sweep["base"]] or {}
    base = name.split("@")[0]
    return experiments.get(base) or {}
