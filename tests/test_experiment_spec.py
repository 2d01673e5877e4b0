"""The typed experiment spec (cselab/settings/spec.py): built from a job's spec dict, it gives
the same dict back (a training job's params and checkpoints' fingerprint), and reads by attribute."""

import json

import pytest

from cselab.errors import ConfigError
from cselab.pipeline import config as cc
from cselab.settings.spec import Component, ExperimentSpec
from tests.helpers import ROOT, read_yaml


@pytest.fixture(scope="module")
def cfg():
    return cc.validate(read_yaml(ROOT / "config.yaml"))


def same(a: dict, b: dict) -> bool:
    """Equal, with the same keys in the same order at every level (as JSON writes them)."""
    return json.dumps(a) == json.dumps(b)


def test_every_configured_spec_round_trips(cfg):
    ids = cc.experiment_ids(cfg, list(cfg["experiments"]))
    specs = [cc.experiment_spec(cfg, i) for i in ids]
    specs += [cc.pretraining_spec(cfg, stage, plm) for stage in cfg.get("pretraining", {}) for plm in cfg["plms"]]
    assert any(not s["training"] for s in specs)  # the untrained PLM's: no training settings
    for d in specs:
        spec = ExperimentSpec.from_dict(d)
        assert same(spec.to_dict(), d), d["id"]
        assert ExperimentSpec.from_dict(spec.to_dict()) == spec
        assert ExperimentSpec.of(spec) is spec


def test_attributes_and_training_defaults(cfg):
    trained = next(i for i in cc.experiment_ids(cfg, list(cfg["experiments"])) if cc.is_trained(cfg, i))
    d = cc.experiment_spec(cfg, trained)
    spec = ExperimentSpec.from_dict(d)
    assert (spec.id, spec.plm, spec.seed, spec.objective) == (d["id"], d["plm"], d["seed"], d["objective"])
    assert spec.trained and spec.training.lr == d["training"]["lr"]
    assert spec.holds("lr") and not spec.holds("checkpoint_steps")  # operational: never in a spec
    assert spec.training.checkpoint_steps is not None  # ... yet typed, its default
    assert spec.components()[0] == Component(d["objective"], d["weight"], d["options"])
    assert [c.method for c in spec.components()[1:]] == list(d["auxiliaries"])


def test_a_spec_written_by_hand_gives_back_only_its_keys():
    d = {"objective": "simcse", "weight": 1.0, "options": {}, "training": {"batch_size": 8, "lr": 1e-3}}
    spec = ExperimentSpec.from_dict(d)
    assert same(spec.to_dict(), d)
    assert spec.training.batch_size == 8 and spec.training.max_len == 32 and spec.auxiliaries == {}
    assert not spec.holds("max_len")


def test_the_typed_spec_is_frozen_and_its_dict_a_copy():
    d = {"objective": "simcse", "options": {"head": "mlp"}, "training": {}}
    spec = ExperimentSpec.from_dict(d)
    with pytest.raises(AttributeError):
        spec.seed = 1
    spec.to_dict()["options"]["head"] = "none"
    d["options"]["head"] = "none"
    assert spec.options == {"head": "mlp"}


@pytest.mark.parametrize("d", [{"weight": 1.0}, {"objective": "simcse", "colour": "red"}, ["simcse"]])
def test_a_malformed_spec_is_one_message(d):
    with pytest.raises(ConfigError):
        ExperimentSpec.from_dict(d)


def test_the_spec_types_without_torch():
    import subprocess
    import sys

    code = ("import sys; from cselab.settings.spec import ExperimentSpec; "
            "ExperimentSpec.from_dict({'objective': 'simcse', 'training': {'lr': 0.1}}); "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
