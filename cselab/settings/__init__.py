"""Typed settings: frozen dataclasses are the single source of the config's schema, its
defaults and its documentation (:mod:`cselab.settings.base`). ``python -m
cselab.pipeline.settings_docs`` writes ``cselab/schema/config.schema.json`` and ``docs/settings.md``
from them. Imports no torch (the workflow reads it when it plans)."""

import dataclasses

from cselab.settings.base import fill_defaults, from_dict, per_config, schema_of, to_plain
from cselab.settings.config import Config
from cselab.settings.evaluation import Evaluation
from cselab.settings.sections import Spans
from cselab.settings.spec import Component, ExperimentSpec
from cselab.settings.training import Training

#: the typed training settings (the name the loop and the methods know them by)
TrainingSettings = Training


def fill_config_defaults(config: dict) -> dict:
    """``config`` (checked against the schema) with every missing key that has a default filled in."""
    return fill_defaults(Config, config)


def training_settings(d: dict) -> Training:
    """A job's (or a section's) training settings, typed; a key the dict leaves out (a job's spec
    holds only the settings its output depends on) takes its default."""
    return from_dict(Training, d, where="training")


@per_config
def typed_config(cfg: dict) -> Config:
    """The validated config (:func:`cselab.pipeline.config.validate`) typed, cached per dict (the
    validated config is read-only). A plugin evaluation kind's ``evaluation.<kind>`` settings are
    left out: the kind reads them from the dict."""
    known = {f.name for f in dataclasses.fields(Evaluation)}
    evaluation = {k: v for k, v in cfg.get("evaluation", {}).items() if k in known}
    return from_dict(Config, {**cfg, "evaluation": evaluation})


def evaluation_settings(d: dict) -> Evaluation:
    """The ``evaluation`` section, typed (missing keys: their defaults)."""
    return from_dict(Evaluation, d, where="evaluation")


def spans_settings(d: dict) -> Spans:
    """The ``spans`` section, typed alone: planning reads its shard count without typing the
    whole config (0.01 s)."""
    return from_dict(Spans, d, where="spans")


__all__ = ["Component", "Config", "Evaluation", "ExperimentSpec", "Training", "TrainingSettings",
           "evaluation_settings", "fill_config_defaults", "fill_defaults", "from_dict", "schema_of", "spans_settings", "to_plain",
           "training_settings",
           "typed_config"]
