"""Typed settings (cselab/settings): the dataclasses are the single source of the config's
schema, its defaults and its documentation; the checked-in schema and docs are what they
generate, every default passes its own schema and is the paper config's, and a config may leave
out a key with a default."""

import copy
import dataclasses
import inspect
from pathlib import Path

import pytest

from cselab.errors import ConfigError
from cselab.pipeline import config as cc
from cselab.settings import base, training_settings
from cselab.pipeline import settings_docs as generate
from cselab.settings import config as config_module
from cselab.settings import entries, evaluation, sections, training
from tests.helpers import read_yaml

ROOT = Path(__file__).resolve().parents[1]
CLASSES = sorted({cls for module in (config_module, entries, evaluation, sections, training)
                  for _, cls in inspect.getmembers(module, dataclasses.is_dataclass)}, key=lambda c: c.__name__)


@pytest.fixture
def paper():
    return read_yaml(ROOT / "config.yaml")


def test_checked_in_schema_and_docs_are_generated():
    for path, text in ((generate.SCHEMA_PATH, generate.schema_text()), (generate.DOCS_PATH, generate.docs_text())):
        assert path.read_text() == text, (f"{path.relative_to(ROOT)} is stale: the settings dataclasses changed; "
                                          "run `python -m cselab.pipeline.settings_docs`")


def test_a_stale_schema_is_reported(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "config.schema.json"
    stale.write_text(generate.schema_text().replace('"minimum": 4', '"minimum": 5', 1))
    monkeypatch.setattr(generate, "SCHEMA_PATH", stale)
    monkeypatch.setattr(generate, "ROOT", tmp_path)
    monkeypatch.setattr(generate, "DOCS_PATH", tmp_path / "settings.md")
    (tmp_path / "settings.md").write_text(generate.docs_text())
    assert generate.main(["--check"]) == 1
    assert "config.schema.json is stale: run `python -m cselab.pipeline.settings_docs`" in capsys.readouterr().err


def test_the_schema_says_it_is_generated():
    schema = cc.load_schema()
    assert "python -m cselab.pipeline.settings_docs" in schema["$comment"]
    assert schema["$defs"]["training"] == base.schema_of(training.Training, partial=True)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_default_passes_its_own_schema(cls):
    base.check_defaults(cls)


def test_every_figure_kinds_option_defaults_pass_their_schema():
    from cselab.reporting.kinds import figure_kinds

    for kind in figure_kinds().values():
        base.check_defaults(kind.options)
        assert base.to_plain(kind.typed({})) == kind.defaults(), kind.name


def test_the_defaults_are_the_paper_configs(paper):
    """Where config.yaml sets a defaulted key, the dataclass default is its value."""
    filled = base.fill_defaults(config_module.Config, {})

    def walk(ours, theirs, where):
        for key, value in ours.items():
            if key in theirs:
                if isinstance(value, dict) and isinstance(theirs[key], dict) and value and theirs[key]:
                    walk(value, theirs[key], f"{where}.{key}")
                else:
                    assert value == theirs[key], f"{where}.{key}: default {value!r}, config.yaml {theirs[key]!r}"

    walk(filled, paper, "")
    # and config.yaml sets every section's settings (nothing filled in for the paper config)
    assert base.fill_defaults(config_module.Config, paper) == paper


def test_a_config_may_leave_out_a_default(paper):
    cut = copy.deepcopy(paper)
    del cut["training"]["dropout"], cut["evaluation"]["transfer"]["seed"], cut["spans"], cut["hub"]
    del cut["training"]["collapse"]
    cfg = cc.validate(cut)
    assert cfg["training"]["dropout"] == 0.1 and cfg["evaluation"]["transfer"]["seed"] == 1111
    assert cfg["spans"]["shards"] == 16 and cfg["hub"]["token_env"] == "HF_TOKEN"
    assert cfg["training"]["collapse"] == {"min_effective_rank": 2.0, "max_uniformity": -0.1}
    assert cc.experiment_spec(cfg, "simcse-bert-base-s42") == cc.experiment_spec(cc.validate(paper),
                                                                                  "simcse-bert-base-s42")
    assert "max_tokens" not in cfg["evaluation"]  # an unset key stays unset: its absence means something


@pytest.mark.parametrize("patch, message", [
    ({"training": {"dropout": 2}}, r"^config key 'training\.dropout': must be a number in \[0, 1\], got 2$"),
    ({"evaluation": {"transfer": {"mode": "slow"}}},
     r"^config key 'evaluation\.transfer\.mode': 'slow' is not one of \['test', 'fast'\]$"),
    # an override of collapse replaces it whole, so it states both thresholds
    ({"experiments": {"simcse-bert-base": {"training": {"collapse": {"min_effective_rank": 1.0}}}}},
     r"^config key 'experiments\.simcse-bert-base\.training\.collapse' is missing a required entry: "
     r"'max_uniformity'"),
    ({"cost_plan": {"node": {"gpu": 8}}}, r"^unknown config key 'cost_plan\.node\.gpu' \(did you mean 'gpus'\?\)"),
])
def test_a_bad_value_names_the_key(paper, patch, message):
    def update(base_, extra):
        for k, v in extra.items():
            base_[k] = update(base_[k], v) if isinstance(v, dict) and isinstance(base_.get(k), dict) else v
        return base_

    with pytest.raises(ConfigError, match=message):
        cc.validate(update(copy.deepcopy(paper), patch))


def test_typed_training_settings(paper):
    cfg = cc.validate(paper)
    spec = cc.pretraining_spec(cfg, "infocse-pretrain", "bert-base")
    assert "pooler" not in spec["training"] and "log_steps" not in spec["training"]  # a job's spec: a subset
    t = training_settings(spec["training"])
    assert (t.lr, t.batch_size, t.warmup_ratio, t.weight_decay) == (1e-4, 1024, 0.1, 0.01)
    assert (t.pooler, t.log_steps, t.chunk_size) == ("cls", 10, "auto")  # left out of the spec: the defaults
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.lr = 1.0
    with pytest.raises(ConfigError, match=r"unknown config key 'training\.learnig_rate'"):
        training_settings({"learnig_rate": 1e-5})
    full = base.from_dict(config_module.Config, cfg)
    assert full.evaluation.transfer.tasks == ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
    assert full.plms["bert-base"].training == {"lr": 3e-5}  # an override stays the keys it gives
