"""What planning builds once and reuses (issues 39 and 41): an experiment's typed spec per validated
config, and the typed ``evaluation.beir`` settings per value; reused, they equal what is built anew."""

import copy

import pytest

from cselab.data.beir import beir_settings, retrieval_resources
from cselab.pipeline import config as cc
from cselab.pipeline.experiments import typed_spec
from cselab.settings import from_dict
from cselab.settings.evaluation import Beir
from cselab.settings.spec import ExperimentSpec
from tests.helpers import ROOT, read_yaml


@pytest.fixture(scope="module")
def cfg():
    return cc.validate(read_yaml(ROOT / "config.yaml"))


def test_a_typed_spec_is_built_once_per_config(cfg):
    ids = cc.experiment_ids(cfg, list(cfg["experiments"]))
    for exp_id in ids[:20]:
        spec = typed_spec(cfg, exp_id)
        assert spec == ExperimentSpec.from_dict(cc.experiment_spec(cfg, exp_id))
        assert typed_spec(cfg, exp_id) is spec
    other = copy.deepcopy(cfg)  # another config (a new dict): its own specs
    assert typed_spec(other, ids[0]) is not typed_spec(cfg, ids[0])
    assert typed_spec(other, ids[0]) == typed_spec(cfg, ids[0])


def test_beir_settings_are_typed_once_per_value(cfg):
    beir = cfg["evaluation"]["beir"]
    settings = beir_settings(beir)
    assert settings == from_dict(Beir, beir, where="evaluation.beir")
    assert beir_settings(copy.deepcopy(beir)) is settings
    assert beir_settings(settings) is settings
    changed = {**beir, "chunk_size": beir_settings(beir).chunk_size * 2}
    assert beir_settings(changed).chunk_size == 2 * settings.chunk_size
    assert retrieval_resources(["scifact"], beir) == retrieval_resources(["scifact"], settings)
