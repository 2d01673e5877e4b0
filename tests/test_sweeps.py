"""Sweeps, the config layer (cselab/pipeline/sweeps.py): each grid point an ordinary experiment
with a stable, readable id, an equal experiment reused, and one message naming the sweep and the
key for each bad input. No training, no Snakemake run."""

import copy
import re
from pathlib import Path

import pytest

from cselab.errors import ConfigError
from cselab.pipeline import config as cc
from cselab.pipeline.sweeps import format_value, short_keys, sweep_experiment_ids
from tests.helpers import read_yaml

ROOT = Path(__file__).resolve().parents[1]
LR_BATCH = ["simcse-minilm@lr=1e-05+batch_size=16", "simcse-minilm@lr=1e-05+batch_size=32",
            "simcse-minilm@lr=3e-05+batch_size=16", "simcse-minilm"]  # lr 3e-5, batch 32: simcse-minilm's own


def deep_update(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in extra.items():
        out[k] = deep_update(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@pytest.fixture(scope="module")
def smoke_raw():
    default = read_yaml(ROOT / "config.yaml")
    return deep_update(default, read_yaml(ROOT / "configs" / "smoke.yaml"))


@pytest.fixture
def smoke(smoke_raw):
    return copy.deepcopy(smoke_raw)


def with_sweep(cfg: dict, name: str = "s", **sweep) -> dict:
    """``cfg`` with sweep ``name`` besides its own (whose named points its tables and figures list)."""
    cfg["sweeps"] = {**cfg.get("sweeps", {}), name: sweep}
    return cfg


def points(cfg: dict, name: str) -> list[str]:
    return [p["experiment"] for p in cfg["sweeps"][name]["points"]]


def test_the_smoke_sweep_is_four_points_of_two_seeds(smoke):
    cfg = cc.validate(smoke)
    sweep = cfg["sweeps"]["smoke-lr-batch"]
    assert points(cfg, "smoke-lr-batch") == LR_BATCH
    assert [p["values"] for p in sweep["points"]][:2] == [{"training.lr": 1e-5, "training.batch_size": 16},
                                                          {"training.lr": 1e-5, "training.batch_size": 32}]
    assert (sweep["seeds"], sweep["metric"], sweep["tables"]) == ([42, 43], "stsb_dev", [])
    ids = sweep_experiment_ids(cfg, "smoke-lr-batch")
    assert len(ids) == 8 and ids[:2] == ["simcse-minilm@lr=1e-05+batch_size=16-s42",
                                        "simcse-minilm@lr=1e-05+batch_size=16-s43"]
    for exp_id, (lr, batch) in zip(ids[::2], [(1e-5, 16), (1e-5, 32), (3e-5, 16), (3e-5, 32)]):
        spec = cc.experiment_spec(cfg, exp_id)
        assert (spec["training"]["lr"], spec["training"]["batch_size"], spec["seed"]) == (lr, batch, 42)
        assert cc.parse_id(cfg, exp_id)[1] == 42
    # no table lists a point: the default target plans nothing new
    assert not any("@" in e for t in cfg["tables"].values() for e in t["experiments"])


def test_the_paper_sweep_is_simcse_grid():
    cfg = cc.validate(read_yaml(ROOT / "config.yaml"))
    paper = points(cfg, "simcse-bert-base")  # SimCSE's choice (batch 64, lr 3e-5) is simcse-bert-base itself
    assert len(paper) == 12 and paper[:3] == ["simcse-bert-base@batch_size=64+lr=1e-05", "simcse-bert-base",
                                              "simcse-bert-base@batch_size=64+lr=5e-05"]
    assert sweep_experiment_ids(cfg, "simcse-bert-base")[:4] == [
        "simcse-bert-base@batch_size=64+lr=1e-05-s42", "simcse-bert-base@batch_size=64+lr=1e-05-s43",
        "simcse-bert-base@batch_size=64+lr=1e-05-s44", "simcse-bert-base-s42"]
    assert len(sweep_experiment_ids(cfg, "simcse-bert-base")) == 12 * 3
    assert not any("@" in e for t in cfg["tables"].values() for e in t["experiments"])


def test_ids_are_stable_readable_wildcards(smoke):
    assert [format_value(v, "k") for v in (3.0e-5, 0.00003, 16, 16.0, 0.1, True, None, "cls", -2.5)] == \
        ["3e-05", "3e-05", "16", "16", "0.1", "true", "null", "cls", "-2.5"]
    with pytest.raises(ConfigError, match="config key 'k': 'a b' cannot name a point"):
        format_value("a b", "k")
    assert short_keys(["training.lr", "auxiliaries.rtd.weight", "options.mask_ratio",
                       "auxiliaries.rtd.options.mask_ratio"]) == \
        {"training.lr": "lr", "auxiliaries.rtd.weight": "weight", "options.mask_ratio": "mask_ratio",
         "auxiliaries.rtd.options.mask_ratio": "rtd.mask_ratio"}
    # the same number written otherwise: the same ids and specs
    other = copy.deepcopy(smoke)
    other["sweeps"]["smoke-lr-batch"]["grid"]["training.lr"] = [0.00001, 0.00003]
    a, b = cc.validate(smoke), cc.validate(other)
    assert sweep_experiment_ids(a, "smoke-lr-batch") == sweep_experiment_ids(b, "smoke-lr-batch")
    # every id matches rules/common.smk's exp wildcard and survives a cluster job's --target-jobs
    from snakemake.target_jobs import parse_target_jobs_cli_args
    from snakemake_interface_executor_plugins.utils import TargetSpec, encode_target_jobs_cli_args

    pattern = re.search(r'^\s*exp="([^"]+)"', (ROOT / "rules" / "common.smk").read_text(), re.M)[1]
    for exp_id in sweep_experiment_ids(a, "smoke-lr-batch"):
        assert re.fullmatch(pattern, exp_id)
        encoded = encode_target_jobs_cli_args([TargetSpec("train", {"exp": exp_id})])
        assert parse_target_jobs_cli_args(encoded)[0].wildcards_dict == {"exp": exp_id}


def test_adding_a_value_or_a_seed_changes_no_point(smoke):
    before = cc.validate(smoke)
    grown = copy.deepcopy(smoke)
    grown["sweeps"]["smoke-lr-batch"]["grid"]["training.lr"].append(5.0e-5)
    grown["sweeps"]["smoke-lr-batch"]["seeds"].append(44)
    after = cc.validate(grown)
    new = set(after["experiments"]) - set(before["experiments"])
    assert new == {"simcse-minilm@lr=5e-05+batch_size=16", "simcse-minilm@lr=5e-05+batch_size=32"}
    assert set(before["experiments"]) <= set(after["experiments"])
    assert points(after, "smoke-lr-batch")[:4] == LR_BATCH
    for exp_id in sweep_experiment_ids(before, "smoke-lr-batch"):
        assert cc.experiment_spec(after, exp_id) == cc.experiment_spec(before, exp_id)
    assert len(sweep_experiment_ids(after, "smoke-lr-batch")) == 6 * 3


def test_a_point_equal_to_an_experiment_reuses_it(smoke):
    # plm + method instead of base; lr 3e-5 is minilm's own: simcse-minilm, no new experiment
    cfg = cc.validate(with_sweep(smoke, plm="minilm", method="simcse", grid={"training.lr": [3.0e-5, 1.0e-5]}))
    assert points(cfg, "s") == ["simcse-minilm", "simcse-minilm@lr=1e-05"]
    assert "simcse-minilm@lr=3e-05" not in cfg["experiments"]
    # an option and an auxiliary's weight; the base's own values reuse the base
    cfg = cc.validate(with_sweep(smoke, base="diffcse-minilm", seeds=[1],
                                 grid={"auxiliaries.rtd.weight": [5.0e-3, 0.0, 0.01], "options.head": ["batchnorm"]}))
    assert points(cfg, "s") == ["diffcse-minilm", "diff-lam0-minilm", "diffcse-minilm@weight=0.01+head=batchnorm"]
    spec = cc.experiment_spec(cfg, "diffcse-minilm@weight=0.01+head=batchnorm-s1")
    assert spec["auxiliaries"]["rtd"]["weight"] == 0.01 and spec["auxiliaries"]["rtd"]["options"]["mask_ratio"] == 0.3
    # two sweeps sharing a point: one experiment, both sweeps' seeds
    smoke["sweeps"].update(a={"base": "simcse-minilm", "grid": {"training.lr": [1.0e-5]}, "seeds": [1]},
                           b={"base": "simcse-minilm", "grid": {"training.lr": [1.0e-5, 2.0e-5]}, "seeds": [2]})
    cfg = cc.validate(smoke)
    assert cfg["experiments"]["simcse-minilm@lr=1e-05"]["seeds"] == [1, 2]
    assert sweep_experiment_ids(cfg, "a") == ["simcse-minilm@lr=1e-05-s1"]


def test_a_table_may_name_a_sweep(smoke):
    smoke["tables"]["table1"]["experiments"].insert(1, "sweep:smoke-lr-batch")
    smoke["sweeps"]["smoke-lr-batch"]["tables"] = ["table2"]
    cfg = cc.validate(smoke)
    assert cfg["tables"]["table1"]["experiments"] == ["untrained-minilm", "simcse-minilm", "compcse-minilm"]
    assert cfg["sweeps"]["smoke-lr-batch"]["tables"] == ["table2", "table1"]
    # a sweep's own `tables` show the winner as their last row
    assert cfg["sweeps"]["smoke-lr-batch"]["rows"] == {"table1": 1, "table2": len(cfg["tables"]["table2"]["experiments"])}


@pytest.mark.parametrize("sweep, message", [
    ({"base": "simcse-minilm", "grid": {"training.lrate": [1]}},
     r"'sweeps.s.grid.training.lrate': 'training.lrate' is no training setting; valid: .*lr"),
    ({"base": "simcse-minilm", "grid": {"options.d0": [96]}},
     r"'sweeps.s.grid.options.d0': 'options.d0' is no option of method 'simcse'; valid: head"),
    ({"base": "simcse-minilm", "grid": {"auxiliaries.rtd.weight": [0.1]}},
     r"'sweeps.s.grid.auxiliaries.rtd.weight': 'auxiliaries.rtd.weight' names no auxiliary objective of "
     r"'simcse-minilm'"),
    ({"base": "diffcse-minilm", "grid": {"auxiliaries.rtd.options.ratio": [0.1]}},
     r"'sweeps.s.grid.auxiliaries.rtd.options.ratio': .* is no option of auxiliary 'rtd'; valid: .*mask_ratio"),
    ({"base": "simcse-minilm", "grid": {"lr": [0.1]}}, r"'sweeps.s.grid.lr': 'lr' is no setting a sweep changes"),
    ({"base": "simcse-minilm", "grid": {}}, r"'sweeps.s.grid': the grid is empty"),
    ({"base": "simcse-minilm", "grid": {"training.lr": []}},
     r"'sweeps.s.grid.training.lr': \[\] is no list of values; give at least one value"),
    ({"base": "simcse-minilm", "grid": {"training.lr": [1.0e-5]}, "metric": "stsb_test"},
     r"'sweeps.s.metric': no evaluation produces 'stsb_test'; valid: .*stsb_dev"),
    ({"base": "simcse-minilm", "grid": {"training.lr": [-1.0e-5]}}, r"'sweeps.s.grid.training.lr'"),
    ({"base": "simcse-minilm", "grid": {"training.batch_size": ["big"]}}, r"'sweeps.s.grid.training.batch_size'"),
    ({"base": "compcse-minilm", "grid": {"options.d0": [0]}}, r"'sweeps.s.grid.options.d0'"),
    ({"base": "simcse-minilm", "grid": {"training.chunk_size": [8]}, "seeds": [1]},
     r"'sweeps.s.grid.training.chunk_size': gradient caching replays dropout"),
    ({"base": "simcse-minilm", "grid": {"training.lr": [1.0e-5]}, "tables": ["nope"]},
     r"'sweeps.s.tables\[0\]': unknown table 'nope'"),
    ({"base": "simcse-minilm", "grid": {"training.lr": [1.0e-5]}, "tables": ["table_methods"]},
     r"'sweeps.s.tables\[0\]': a methods table names no experiments 'table_methods'"),
    ({"base": "nope", "grid": {"training.lr": [1.0e-5]}}, r"'sweeps.s.base': unknown experiment 'nope'"),
    ({"base": "untrained-minilm", "grid": {"training.lr": [1.0e-5]}}, r"'sweeps.s.base': .* is untrained"),
    ({"grid": {"training.lr": [1.0e-5]}}, r"'sweeps.s' is missing a required entry: 'base'"),
    ({"base": "simcse-minilm", "grid": {"training.lr": [1.0e-5]}, "points": []},
     r"'sweeps.s.points' is filled in by the workflow"),
])
def test_each_bad_sweep_is_one_message_naming_the_key(smoke, sweep, message):
    smoke["experiments"]["simcse-minilm"]["training"] = {"keyed_dropout": False}  # (for chunk_size)
    with pytest.raises(ConfigError, match=message):
        cc.validate(with_sweep(smoke, **sweep))


def test_two_sweeps_with_one_id_and_other_settings_and_a_missing_sweep_are_refused(smoke):
    bad = copy.deepcopy(smoke)
    bad["sweeps"].update(a={"base": "diffcse-minilm", "grid": {"weight": [0.5]}},
                         b={"base": "diffcse-minilm", "grid": {"auxiliaries.rtd.weight": [0.5]}})
    with pytest.raises(ConfigError, match=r"'sweeps.b.grid': its point 'diffcse-minilm@weight=0.5' is a point of "
                                          r"sweep 'a' too, with other settings"):
        cc.validate(bad)
    smoke["tables"]["table1"]["experiments"].append("sweep:missing")
    with pytest.raises(ConfigError, match=r"'tables.table1.experiments\[3\]': unknown sweep 'missing'; defined "
                                          r"under 'sweeps': .*simcse-bert-base, smoke-lr-batch"):
        cc.validate(smoke)


def test_named_points_keep_their_names_and_settings(smoke):
    """``names``: the ablation points written by hand before the sweeps existed keep their names
    (their results and the tables' and figures' rows), with the settings they had."""
    cfg = cc.validate(copy.deepcopy(smoke))
    assert points(cfg, "compcse-d0-minilm") == ["comp-d0-96-minilm", "comp-d0-192-minilm", "compcse-minilm"]
    assert sweep_experiment_ids(cfg, "compcse-d0-minilm") == ["comp-d0-96-minilm-s42", "comp-d0-192-minilm-s42",
                                                              "compcse-minilm-s42"]
    assert points(cfg, "diffcse-lambda-minilm") == ["diff-lam0-minilm", "diffcse-minilm", "diff-lam5e-2-minilm"]
    assert "comp-d0-96-minilm" in cfg["tables"]["table6"]["experiments"]
    assert not any("@" in p for n, s in cfg["sweeps"].items() if s.get("names") for p in points(cfg, n))
    # the same specs as the entries written by hand
    by_hand = copy.deepcopy(smoke)
    for sweep in ("compcse-d0-minilm", "diffcse-lambda-minilm", "gp-heldout-r-minilm"):
        del by_hand["sweeps"][sweep]
    by_hand["experiments"].update({
        "comp-d0-96-minilm": {"plm": "minilm", "method": "compcse", "options": {"d0": 96}},
        "comp-d0-192-minilm": {"plm": "minilm", "method": "compcse", "options": {"d0": 192}},
        "diff-lam0-minilm": {"plm": "minilm", "method": "diffcse", "auxiliaries": {"rtd": {"weight": 0.0}}},
        "diff-lam5e-2-minilm": {"plm": "minilm", "method": "diffcse", "auxiliaries": {"rtd": {"weight": 5.0e-2}}},
        "gp-heldout-r200-minilm": {"plm": "minilm", "method": "paradigm", "training": {"holdout": 0.1},
                                   "options": {"loss": "paradigm", "gd": True, "ratio": 2.0}}})
    old = cc.validate(by_hand)
    for exp_id in ("comp-d0-96-minilm-s42", "comp-d0-192-minilm-s42", "diff-lam0-minilm-s42",
                   "diff-lam5e-2-minilm-s42", "gp-heldout-r200-minilm-s42"):
        assert cc.experiment_spec(cfg, exp_id) == cc.experiment_spec(old, exp_id)
    assert cc.experiment_spec(cfg, "comp-d0-96-minilm-s42")["options"]["d0"] == 96
    # ... and a hand-written entry with the same settings beside the sweep is the same experiment
    both = copy.deepcopy(by_hand)
    both["sweeps"] = copy.deepcopy(smoke["sweeps"])
    assert points(cc.validate(both), "compcse-d0-minilm") == points(cfg, "compcse-d0-minilm")
    # a point of a grid of two keys, written as its name writes it; the other points keep <base>@...
    named = cc.validate(with_sweep(smoke, base="simcse-minilm", seeds=[1],
                                   grid={"training.lr": [1.0e-5, 2.0e-5], "training.batch_size": [16]},
                                   names={"lr=2e-05+batch_size=16": "simcse-small-minilm"}))
    assert points(named, "s") == ["simcse-minilm@lr=1e-05+batch_size=16", "simcse-small-minilm"]
    spec = cc.experiment_spec(named, "simcse-small-minilm-s1")
    assert (spec["training"]["lr"], spec["training"]["batch_size"], spec["seed"]) == (2.0e-5, 16, 1)
    # an experiment as if written by hand (the base's seeds); the sweep runs its own seeds of it
    assert "seeds" not in named["experiments"]["simcse-small-minilm"]
    assert sweep_experiment_ids(named, "s") == ["simcse-minilm@lr=1e-05+batch_size=16-s1", "simcse-small-minilm-s1"]
    # a named point equal to another experiment is its own, as if written by hand (an unnamed one: that experiment)
    twin = cc.validate(with_sweep(smoke, base="compcse-minilm", grid={"options.d0": [None, 48]},
                                  names={"d0=null": "compcse-again-minilm"}))
    assert points(twin, "s") == ["compcse-again-minilm", "compcse-minilm@d0=48"]
    assert cc.experiment_spec(twin, "compcse-again-minilm-s42")["options"] == \
        cc.experiment_spec(twin, "compcse-minilm-s42")["options"]


@pytest.mark.parametrize("names, message", [
    ({"d0=97": "x-minilm"}, r"'sweeps.s.names.d0=97': no point of the grid is written 'd0=97'; its points: d0=48, "
                            r"d0=64$"),
    ({"d0=48.0": "x-minilm"}, r"'sweeps.s.names.d0=48.0': no point of the grid is written 'd0=48.0'"),
    ({"d0=48": "x-minilm", "d0=64": "x-minilm"}, r"'sweeps.s.names.d0=64': 'x-minilm' names point 'd0=48' too"),
    ({"d0=48": "simcse-minilm"}, r"'sweeps.s.names.d0=48': 'simcse-minilm' is an experiment with other settings"),
    ({"d0=48": "untrained-minilm"}, r"'sweeps.s.names.d0=48': 'untrained-minilm' is an experiment with other"),
    ({"d0=48": "comp-d0-96-minilm"}, r"'sweeps.s.names.d0=48': 'comp-d0-96-minilm' is an experiment with other"),
    ({"d0=48": "a b"}, r"'sweeps.s.names.d0=48': 'a b' does not match"),
])
def test_each_bad_name_is_one_message_naming_the_sweep_and_the_point(smoke, names, message):
    sweep = {"base": "compcse-minilm", "grid": {"options.d0": [48, 64]}}
    with pytest.raises(ConfigError, match=message):
        cc.validate(with_sweep(smoke, **sweep, names=names))


def test_two_sweeps_giving_one_name_to_other_settings_are_refused(smoke):
    smoke["sweeps"].update(a={"base": "compcse-minilm", "grid": {"options.d0": [48]}, "names": {"d0=48": "x-minilm"}},
                           b={"base": "compcse-minilm", "grid": {"options.d0": [64]}, "names": {"d0=64": "x-minilm"}})
    with pytest.raises(ConfigError, match=r"'sweeps.b.names.d0=64': 'x-minilm' is an experiment with other settings "
                                          r"already \(under 'experiments' or another sweep's names\)"):
        cc.validate(smoke)
