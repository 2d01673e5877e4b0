"""Config validation: one clear message naming the key; experiment ids and merged settings."""

import copy
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cselab.pipeline import config as cc
from cselab.pipeline import targets as ct
from cselab.errors import ConfigError
from cselab.training.objective import Method
from tests.helpers import find_shared_data, read_yaml

ROOT = Path(__file__).resolve().parents[1]


def deep_update(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in extra.items():
        out[k] = deep_update(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@pytest.fixture
def default():
    return read_yaml(ROOT / "config.yaml")


@pytest.fixture
def smoke(default):
    return deep_update(default, read_yaml(ROOT / "configs" / "smoke.yaml"))


def test_shipped_configs_are_valid(default, smoke):
    cfg = cc.validate(default)
    assert cc.experiment_ids(cfg, cfg["tables"]["table1"]["experiments"])[:5] == [
        "untrained-bert-base", "simcse-bert-base-s42", "simcse-bert-base-s43", "simcse-bert-base-s44",
        "compcse-bert-base-s42"]
    cfg = cc.validate(smoke)
    assert cc.experiment_ids(cfg, cfg["tables"]["table1"]["experiments"]) == [
        "untrained-minilm", "simcse-minilm-s42", "compcse-minilm-s42"]


def test_paper_settings(default):
    cfg = cc.validate(default)
    spec = cc.experiment_spec(cfg, "compcse-bert-base-s42")
    assert spec["model"] == "bert-base-uncased" and spec["seed"] == 42
    t = spec["training"]
    assert (t["batch_size"], t["lr"], t["max_len"], t["epochs"], t["temperature"], t["eval_steps"]) == (
        64, 3e-5, 32, 1, 0.05, 125)
    assert spec["options"] == {"partitions": 2, "aggregation": "avg", "compose": "z+", "d0": 256, "head": "mlp",
                               "head_placement": "after_aggregation", "partition_unit": "subword"}
    assert spec["auxiliaries"] == {} and spec["signature"] == "compcse" and not cc.artifacts(spec)
    assert cc.experiment_spec(cfg, "simcse-bert-large-s42")["training"]["lr"] == 1e-5
    roberta = cc.experiment_spec(cfg, "simcse-roberta-base-s42")["training"]
    assert (roberta["batch_size"], roberta["lr"]) == (512, 1e-5)
    assert cc.experiment_spec(cfg, "compcse-roberta-base-s42")["options"]["aggregation"] == "concat_halves"
    assert cc.experiment_spec(cfg, "untrained-bert-base")["seed"] is None


def test_seeds_expand_ids(smoke):
    cfg = cc.validate(deep_update(smoke, {"seeds": [1, 2]}))
    assert cc.experiment_ids(cfg, ["untrained-minilm", "simcse-minilm"]) == [
        "untrained-minilm", "simcse-minilm-s1", "simcse-minilm-s2"]
    with pytest.raises(ConfigError, match="unknown experiment id 'simcse-minilm'"):
        cc.experiment_spec(cfg, "simcse-minilm")


@pytest.mark.parametrize("patch, message", [
    ({"training": {"learnig_rate": 1e-5}}, r"unknown config key 'training\.learnig_rate'.*valid keys here: .*lr"),
    ({"trainig": {}}, r"unknown config key 'trainig' \(did you mean 'training'\?\)"),
    ({"training": {"batch_size": 0}}, r"config key 'training\.batch_size': must be an integer >= 1, got 0"),
    ({"training": {"lr": "3e-5"}}, r"config key 'training\.lr': '3e-5' is a string.*write 3\.0e-5"),
    ({"training": {"pooler": "mean"}}, r"config key 'training\.pooler': 'mean' is not one of \['cls', 'avg'\]"),
    ({"experiments": {"simcse-minilm": {"method": "simsce"}}},
     r"'experiments\.simcse-minilm\.method': unknown method 'simsce'; valid methods: compcse, diffcse, infocse, "),
    ({"methods": {"simcse": {"objective": "infonce2"}}},
     r"'methods\.simcse\.objective': unknown method 'infonce2'; valid methods: .*compcse.*simcse"),
    ({"methods": {"simcse": {"auxiliaries": {"rtd2": {"weight": 0.1}}}}},
     r"'methods\.simcse\.auxiliaries\.rtd2': unknown method 'rtd2'"),
    ({"methods": {"simcse": {"auxiliaries": {"compcse": {"weight": 0.1}}}}},
     r"'methods\.simcse\.auxiliaries\.compcse': method 'compcse' cannot be an auxiliary objective"),
    ({"methods": {"simcse": {"auxiliaries": {"simcse": {"weight": -1}}}}},
     r"'methods\.simcse\.auxiliaries\.simcse\.weight': must be a number >= 0, got -1"),
    ({"methods": {"simcse": {"options": {"head": "mlp3"}}}},
     r"'methods\.simcse\.options\.head': 'mlp3' is not one of"),
    ({"pretraining": {"mlm": {"method": "nope"}}}, r"'pretraining\.mlm\.method': unknown method 'nope'"),
    ({"tables": {"cmp": {"kind": "methods", "plm": "gpt"}}}, r"'tables\.cmp\.plm': unknown PLM 'gpt'"),
    ({"tables": {"cmp": {"kind": "sts"}}}, r"'tables\.cmp' is missing a required entry: 'experiments'"),
    ({"training": {"precision": "fp8"}}, r"'training\.precision': 'fp8' is not one of"),
    ({"training": {"unpadded": "yes"}}, r"config key 'training\.unpadded': 'yes' is not of type 'boolean'"),
    ({"experiments": {"compcse-minilm": {"options": {"aggregation": "mean"}}}},
     r"'experiments\.compcse-minilm\.options\.aggregation': 'mean' is not one of"),
    ({"experiments": {"x": {"plm": "gpt", "method": "simcse"}}}, r"'experiments\.x\.plm': unknown PLM 'gpt'"),
    ({"tables": {"table1": {"experiments": ["nope"]}}}, r"'tables\.table1\.experiments\[0\]': unknown experiment 'nope'"),
    ({"data": {"corpus": {"url": "ftp://x"}}}, r"config key 'data\.corpus\.url'"),
    ({"seeds": []}, r"config key 'seeds'"),
    ({"spans": {"batch_size": 0}}, r"config key 'spans\.batch_size': must be an integer >= 1, got 0"),
    ({"spans": {"split_adjuncts": "yes"}}, r"config key 'spans\.split_adjuncts': 'yes' is not of type 'boolean'"),
    ({"training": {"chunk_size": 0}},
     r"config key 'training\.chunk_size': must be an integer >= 1 or 'auto' or null, got 0"),
    ({"training": {"chunk_size": "whole"}},
     r"config key 'training\.chunk_size': must be an integer >= 1 or 'auto' or null, got 'whole'"),
    ({"experiments": {"simcse-minilm": {"training": {"chunk_tokens": 16}}}},
     r"config key 'experiments\.simcse-minilm\.training\.chunk_tokens': 16 tokens is less than the longest sentence "
     r"\(training\.max_len 32\)"),
    ({"training": {"chunk_size": 64, "keyed_dropout": False}},
     r"config key 'training\.chunk_size': gradient caching replays dropout keyed by row; set "
     r"training\.keyed_dropout: true or chunk_size: null"),
    ({"experiments": {"simcse-minilm": {"training": {"chunk_size": 8, "keyed_dropout": False}}}},
     r"'experiments\.simcse-minilm\.training\.chunk_size': gradient caching replays dropout keyed by row"),
    # found at planning, not after a cluster job has queued and started its processes
    # the shared section's batch, named at a training job that trains with it (an untrained one never does)
    ({"training": {"batch_size": 8, "devices": 2, "accumulation_steps": 4}},
     r"'experiments\.(?!untrained)[\w.-]+\.training\.batch_size': a batch of 8 sentences cannot be split into 2 "
     r"process\(es\) \(devices x nodes\) x 4 accumulation step\(s\)"),
    ({"experiments": {"simcse-minilm": {"training": {"batch_size": 6, "nodes": 2, "devices": 2}}}},
     r"'experiments\.simcse-minilm\.training\.batch_size': a batch of 6 sentences cannot be split into 4 "),
])
def test_bad_values_name_the_key(smoke, patch, message):
    with pytest.raises(ConfigError, match=message):
        cc.validate(deep_update(smoke, patch))


def test_a_shared_batch_too_small_alone_is_no_error_where_every_job_trains_a_larger_one(smoke):
    """The batch split is a training job's rule: the shared section alone, and untrained
    experiments (which never train), are not held to it."""
    cfg = deep_update(smoke, {"training": {"batch_size": 4, "devices": 4}})
    for plm in cfg["plms"].values():  # every job trains 32 or what its own entry says (>= 8 in smoke)
        plm.setdefault("training", {})["batch_size"] = 32
    for stage in cfg.get("pretraining", {}).values():
        stage.setdefault("training", {})["batch_size"] = 32
    for sweep in cfg.get("sweeps", {}).values():
        grid = sweep.get("grid", {})
        if "training.batch_size" in grid:
            grid["training.batch_size"] = [max(b, 8) for b in grid["training.batch_size"]]
    cc.validate(cfg)
    trained = next(n for n, e in cfg["experiments"].items() if e["method"] != "untrained")
    cfg["experiments"][trained].setdefault("training", {})["batch_size"] = 6
    with pytest.raises(ConfigError, match=r"'experiments\.[\w.-]+\.training\.batch_size': a batch of 6 sentences "
                                          r"cannot be split into 4 process"):
        cc.validate(cfg)


def test_data_dir(smoke, tmp_path):
    with pytest.raises(ConfigError, match=r"'data_dir'.*is not a directory"):
        cc.validate({**smoke, "data_dir": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match=r"'data_dir'.*holds none of wiki1m_for_simcse\.txt, wiki1m_head\.txt"):
        cc.validate({**smoke, "data_dir": str(tmp_path)})
    shared = find_shared_data()
    if shared is None:
        pytest.skip("shared data dir not found")
    real = shared.resolve()  # the checkout's ../shared may itself be a symlink
    link = tmp_path / "linked-data"
    link.symlink_to(shared, target_is_directory=True)
    for given in (shared, link):  # a data_dir reached through a symlink names the real files
        cfg = cc.validate({**smoke, "data_dir": str(given)})
        assert cfg["data"]["corpus"]["path"] == str(real / "wiki1m_head.txt")
        assert cfg["data"]["senteval"]["path"] == str(real / "senteval")


def test_tracking_uri_env_wins(smoke, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert cc.tracking_uri(smoke) == "sqlite:///results/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert cc.tracking_uri(smoke) == "http://127.0.0.1:5000"


def test_methods_table_reuses_equivalent_experiments(smoke):
    # one row per methods entry, in order: the experiment with exactly the entry's settings, else a new one
    plain = {f"plain-{m}": {"plm": "minilm", "method": m} for m in smoke["methods"]}  # each entry as it is
    cfg = cc.validate(deep_update(smoke, {"tables": {"methods": {"kind": "methods", "plm": "minilm"}},
                                          "experiments": plain}))
    rows = cfg["tables"]["methods"]["experiments"]
    assert [cfg["experiments"][e]["method"] for e in rows] == list(cfg["methods"])
    for method, exp in zip(cfg["methods"], rows):
        want = {k: v for k, v in cc.experiment_spec(cfg, f"plain-{method}-s42").items() if k not in ("name", "id")}
        assert {k: v for k, v in cc.experiment_spec(cfg, f"{exp}-s42").items() if k not in ("name", "id")} == want
        reusable = [e for e in smoke["experiments"] if smoke["experiments"][e]["method"] == method
                    and {k: v for k, v in cc.experiment_spec(cfg, f"{e}-s42").items()
                         if k not in ("name", "id")} == want]
        assert exp == (reusable[0] if reusable else f"plain-{method}"), method
    # each modified paradigm loss is a method of its own, so a row; the paradigm's baseline has no
    # experiment with exactly its defaults at smoke scale, so it gets one
    cfg = cc.validate(deep_update(smoke, {"tables": {"methods": {"kind": "methods", "plm": "minilm"}}}))
    rows = cfg["tables"]["methods"]["experiments"]
    assert rows[:3] == ["simcse-minilm", "compcse-minilm", "bench-paradigm-minilm"] and "gp-mhe-mod-minilm" in rows
    cfg = cc.validate(deep_update(smoke, {"tables": {"methods": {"kind": "methods", "plm": "minilm",
                                                                  "methods": ["simcse", "compcse"],
                                                                  "training": {"max_steps": 20}}}}))
    assert cfg["tables"]["methods"]["experiments"] == ["bench-simcse-minilm", "bench-compcse-minilm"]
    assert cc.experiment_spec(cfg, "bench-compcse-minilm-s42")["training"]["max_steps"] == 20
    assert ct.table_columns(cfg, "methods")[-3:] == ["STS avg", "STS-B dev", "transfer avg"]
    files = ct.table_inputs(cfg, "methods")["bench-simcse-minilm-s42"]
    assert [Path(f).name for f in files] == ["sts.json", "sts_pairs.npz", "stsb_dev.json", "stsb_dev_pairs.npz",
                                             "transfer.json", "transfer_pairs.npz"]


class _Aux(Method):
    """A test auxiliary with two options."""

    name = "testaux"
    roles = ("auxiliary",)

    @dataclasses.dataclass
    class Options:
        rate: float = 0.3
        mode: str = "a"


def test_auxiliaries_merge_and_drop(smoke):
    patch = {"methods": {"simcse": {"auxiliaries": {"testaux": {"weight": 0.5, "options": {"rate": 0.2}}}}},
             "experiments": {"a": {"plm": "minilm", "method": "simcse",
                                   "auxiliaries": {"testaux": {"options": {"mode": "b"}}}},
                             "b": {"plm": "minilm", "method": "simcse", "auxiliaries": {"testaux": None}},
                             "c": {"plm": "minilm", "method": "simcse", "weight": 0.0}}}
    cfg = cc.validate(deep_update(smoke, patch))
    a = cc.experiment_spec(cfg, "a-s42")
    assert a["auxiliaries"] == {"testaux": {"weight": 0.5, "options": {"rate": 0.2, "mode": "b"}}}
    assert a["signature"] == "simcse+testaux"
    assert cc.experiment_spec(cfg, "b-s42")["auxiliaries"] == {}
    assert cc.experiment_spec(cfg, "c-s42")["weight"] == 0.0
    with pytest.raises(ConfigError, match=r"'experiments\.a\.auxiliaries\.testaux\.options\.rte'"):
        cc.validate(deep_update(smoke, deep_update(patch, {"experiments": {"a": {"auxiliaries": {
            "testaux": {"options": {"rte": 1}}}}}})))
    with pytest.raises(ConfigError, match=r"'methods\.x\.objective': method 'testaux' is an auxiliary"):
        cc.validate(deep_update(smoke, {"methods": {"x": {"objective": "testaux"}}}))


def test_paradigm_figures_and_holdout(smoke):
    cfg = cc.validate(copy.deepcopy(smoke))
    assert "0.5" not in cfg["figures"]["paradigm_figure6_m"]["experiments"]  # null drops a paper point
    assert ct.figure_inputs(cfg, "paradigm_figure2") == {}  # a simulation reads nothing
    assert ct.figure_values(cfg, "paradigm_figure6_r") == {"1.0": 1.0, "2.0": 2.0}
    assert ct.figure_inputs(cfg, "paradigm_figure8")["R = 2.0"] == {
        "model": "results/experiments/gp-heldout-r200-minilm-s42/model",
        "curve": "results/experiments/gp-heldout-r200-minilm-s42/curve.csv"}
    assert ct.heldout_file(cfg, "paradigm_figure8") == "resources/corpus/split/heldout-0.1.txt"
    assert ct.figure_inputs(cfg, "paradigm_figure9") == {"baseline": {"curve": "results/experiments/gp-base-minilm-s42/curve.csv"}}
    assert ct.heldout_file(cfg, "paradigm_figure5_7") == "resources/corpus/split/heldout-0.1.txt"
    assert ct.heldout_file(cfg, "paradigm_figure6_m") is None
    assert cc.corpus_file(cc.experiment_spec(cfg, "gp-heldout-minilm-s42")) == "resources/corpus/split/train-0.1.txt"
    assert cc.corpus_file(cc.experiment_spec(cfg, "gp-base-minilm-s42")) == "resources/corpus/corpus.txt"
    bad = {
        "figures.paradigm_figure6_m.experiments.x': 'simcse-minilm' sets no options.m":
            {"figures": {"paradigm_figure6_m": {"experiments": {"x": "simcse-minilm"}}}},
        "figures.paradigm_figure5_7.experiments.x': 'gp-base-minilm' must train without the held-out slice":
            {"figures": {"paradigm_figure5_7": {"experiments": {"x": "gp-base-minilm"}}}},
        "figures.paradigm_figure8.experiments.x': 'untrained-minilm' is untrained":
            {"figures": {"paradigm_figure8": {"experiments": {"x": "untrained-minilm"}}}},
        "figures.paradigm_figure8.experiments.x': 'gp-base-minilm' must train without the held-out slice":
            {"figures": {"paradigm_figure8": {"experiments": {"x": "gp-base-minilm"}}}},
        "experiments.gp-heldout-minilm.training.holdout': a held-out split and subsampling":
            {"experiments": {"gp-heldout-minilm": {"training": {"holdout": 0.1, "subsampling": "adjacent"}}}},
    }
    for message, patch in bad.items():
        with pytest.raises(ConfigError, match=re.escape(message)):
            cc.validate(deep_update(smoke, patch))
    fig = {"kind": "component_sweep", "parameter": "m"}
    with pytest.raises(ConfigError, match="'figures.sweep.experiments': a component_sweep figure draws experiments"):
        cc.validate(deep_update(smoke, {"figures": {"sweep": fig}}))


def test_unpadded_forward_is_part_of_the_experiment(smoke):
    """training.unpadded draws dropout masks over real tokens (another random stream): switching
    it retrains, unlike the operational settings."""
    cfg = cc.validate(smoke)
    assert cc.experiment_spec(cfg, "simcse-minilm-s42")["training"]["unpadded"] is True
    assert "unpadded" not in cc.OPERATIONAL


# a value other than every shipped config's for each setting a job's spec must not hold
OTHER_VALUE = {"checkpoint_steps": 7, "compile": True, "pad_to_multiple_of": 16, "devices": 4, "nodes": 2,
               "dist_timeout_s": 60, "log_steps": 3, "dev_batch_size": 7, "eval_steps": 11, "eval_at_end": True,
               "temperature": 0.07, "pooler": "avg", "unpadded": False, "batchnorm_stats": "per_process",
               "chunk_size": 64, "chunk_tokens": 64, "collapse": {"min_effective_rank": 50.0, "max_uniformity": -3.0},
               "peak_tflops": 100.0, "owner_wait_s": 5}


def _plan(cfg: dict) -> tuple[dict, dict]:
    """Every experiment's spec (first seed) and every pretraining stage's spec per PLM."""
    experiments = {exp_id: cc.experiment_spec(cfg, exp_id)
                   for name in cfg["experiments"] for exp_id in cc.experiment_ids(cfg, [name])[:1]}
    stages = {(stage, plm): cc.pretraining_spec(cfg, stage, plm)
              for stage in cfg.get("pretraining", {}) for plm in cfg["plms"]}
    return experiments, stages


@pytest.mark.parametrize("which", ["default", "smoke"])
@pytest.mark.parametrize("key", sorted(OTHER_VALUE))
def test_a_setting_that_cannot_change_a_job_never_replans_it(default, smoke, which, key):
    """Key by key: an operational setting changes no spec; a setting a job does not use (a
    pretraining stage: STS-B dev scoring, the temperature, the pooled forward; SimCSE with its MLP
    head: BatchNorm statistics) changes only the specs of the jobs that use it."""
    base = default if which == "default" else smoke
    before = _plan(cc.validate(base))
    after = _plan(cc.validate(deep_update(base, {"training": {key: OTHER_VALUE[key]}})))
    assert after[1] == before[1], f"training.{key} re-plans a pretraining stage"
    changed = {exp_id for exp_id, spec in after[0].items() if spec != before[0][exp_id]}
    if key in cc.OPERATIONAL:
        assert not changed, f"training.{key} is operational but re-plans {sorted(changed)[:3]}"
        return
    for exp_id in changed:  # only experiments whose methods read it
        spec = before[0][exp_id]
        assert key in spec["training"], (key, exp_id)
    simcse = "simcse-bert-base-s42" if which == "default" else "simcse-minilm-s42"
    assert (simcse in changed) == (key not in ("batchnorm_stats",)), (key, sorted(changed)[:5])


def test_specs_hold_what_their_jobs_use(default):
    cfg = cc.validate(default)
    stage = cc.pretraining_spec(cfg, "infocse-pretrain", "bert-base")["training"]
    assert not set(stage) & {"eval_steps", "eval_at_end", "log_steps", "dev_batch_size", "temperature", "pooler",
                             "unpadded"}
    assert stage["warmup_ratio"] == 0.1 and stage["weight_decay"] == 0.01 and stage["precision"] == "fp16"
    simcse = cc.experiment_spec(cfg, "simcse-bert-base-s42")["training"]
    assert {"eval_steps", "temperature", "pooler", "unpadded", "precision"} <= set(simcse)
    assert not {"log_steps", "dev_batch_size", "batchnorm_stats"} & set(simcse)
    assert cc.experiment_spec(cfg, "diffcse-bert-base-s42")["training"]["batchnorm_stats"] == "global"


def test_a_figure_draws_a_tables_runs(smoke):
    cfg = cc.validate(smoke)
    assert cfg["figures"]["figure_diagnostics"]["experiments"] == {"simcse-minilm": "simcse-minilm",
                                                                   "compcse-minilm": "compcse-minilm"}
    assert ct.figure_inputs(cfg, "figure_diagnostics")["simcse-minilm"]["curve"].endswith("simcse-minilm-s42/curve.csv")
    with pytest.raises(ConfigError, match="figures.figure_diagnostics.table': unknown table 'nope'"):
        cc.validate(deep_update(smoke, {"figures": {"figure_diagnostics": {"table": "nope"}}}))


def test_seed_planner_and_protocol_inputs(smoke):
    cfg = cc.validate(deep_update(smoke, {"seeds": [1, 2, 3]}))
    inputs = ct.seed_power_inputs(cfg)
    assert list(inputs) == ["simcse-minilm", "compcse-minilm"] and ct.seed_power_baseline(cfg) == "simcse-minilm"
    assert inputs["compcse-minilm"]["STS-B dev"] == [f"results/experiments/compcse-minilm-s{s}/stsb_dev_pairs.npz"
                                                     for s in (1, 2, 3)]
    checkpoints = ct.protocol_checkpoints(cfg)
    assert list(checkpoints)[:2] == ["untrained-minilm", "simcse-minilm-s1"] and len(checkpoints) == 7
    assert checkpoints["untrained-minilm"] == "resources/plms/minilm.json"
    with pytest.raises(ConfigError, match="evaluation.seed_power.metrics"):
        cc.validate(deep_update(smoke, {"evaluation": {"seed_power": {"metrics": ["STS"]}}}))


@pytest.mark.parametrize("patch,message", [
    ({"seed_power": {"table": "nope"}}, "evaluation.seed_power.table': unknown table 'nope'"),
    ({"protocols": {"table": "nope"}}, "evaluation.protocols.table': unknown table 'nope'"),
    ({"seed_power": {"baseline": "diffcse-minilm"}}, "evaluation.seed_power.baseline': 'diffcse-minilm' is not"),
])
def test_report_tables_are_named_clearly(smoke, patch, message):
    with pytest.raises(ConfigError, match=message):
        cc.validate(deep_update(smoke, {"evaluation": patch}))


def test_a_bad_key_names_the_file_or_flag_that_set_it(tmp_path):
    """The one message of a bad setting also says where it was set: config.yaml, a
    --configfile, or --config (later wins, as Snakemake merges them)."""
    import subprocess
    import sys

    from cselab.pipeline.checks import key_origin

    sources = [("config.yaml", {"training": {"lr": 3e-5}, "tables": {"t": {"experiments": ["a", "b"]}}}),
               ("mine.yaml", {"training": {"lr": -1.0}}), ("--config", {})]
    assert key_origin("config key 'training.lr': -1.0 is less than 0", sources) == "mine.yaml"
    assert key_origin("config key 'tables.t.experiments[1]': unknown", sources) == "config.yaml"
    assert key_origin("config key 'tables.t.experiments.1': unknown", sources) == "config.yaml"
    assert key_origin("config key 'evaluation.pooler': bad", sources) is None  # a default: set nowhere
    root = Path(__file__).resolve().parents[1]
    bad = tmp_path / "bad.yaml"
    bad.write_text("experiments:\n  simcse-minilm: {plm: minilm, method: simcse, options: {head: nope}}\n")
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-s", str(root / "Snakefile"), "--directory",
                          str(tmp_path), "--configfile", str(root / "configs" / "smoke.yaml"), str(bad)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    said = out.stdout + out.stderr
    assert out.returncode != 0
    assert "config key 'experiments.simcse-minilm.options.head'" in said and "[set in bad.yaml]" in said, said[-2000:]


# -- the exit of the Snakefile's and of a job's process (skip_collection_at_exit) ------------------

def test_skip_collection_at_exit_loses_no_output_nor_status(tmp_path):
    """The process still exits with its status, its buffered output and its log file complete."""
    script = tmp_path / "exiting.py"
    log = tmp_path / "run.log"
    script.write_text(
        "import gc, logging, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from cselab.io import skip_collection_at_exit\n"
        "skip_collection_at_exit()\n"
        f"logging.basicConfig(filename={str(log)!r}, level=logging.INFO)\n"
        "logging.info('logged %d', 1)\n"
        "sys.stdout.write('x' * 100000)\n"  # left in the buffer at exit
        "cycle = []; cycle.append(cycle)\n"
        "sys.exit(3)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "x" * 100000 and not done.stderr
    assert log.read_text() == "INFO:root:logged 1\n"


def test_skip_collection_at_exit_freezes_after_exit_handlers_registered_before_it(tmp_path):
    script = tmp_path / "order.py"
    script.write_text(
        "import atexit, gc, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from cselab.io import skip_collection_at_exit\n"
        "atexit.register(lambda: print('earlier handler, frozen:', gc.get_freeze_count() > 0))\n"
        "skip_collection_at_exit()\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
    assert done.stdout == "earlier handler, frozen: True\n"


def test_a_rule_jobs_process_exits_without_the_final_collections(tmp_path):
    """:func:`cselab.pipeline.jobs.main` (every rule's script) freezes what is alive at its
    process's exit, and the job's log still ends with its last line."""
    script = tmp_path / "job.py"
    script.write_text(
        "import atexit, gc, sys\n"
        "from types import SimpleNamespace\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from cselab.pipeline.jobs import main\n"
        "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))\n"
        f"smk = SimpleNamespace(rule='noop', log=[{str(tmp_path / 'noop.log')!r}], threads=1, config={{}},\n"
        "                       output=[], wildcards={})\n"
        "main(smk, lambda smk: None)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "frozen at exit: True\n"
    assert "rule noop done in" in (tmp_path / "noop.log").read_text().splitlines()[-1]

def test_collect_less_while_planning_freezes_and_still_collects_cycles(tmp_path):
    """The Snakefile's planning thresholds: what was alive is frozen, the youngest generation runs
    less often, and a reference cycle made afterwards is still collected."""
    script = tmp_path / "planning.py"
    script.write_text(
        "import gc, sys, weakref\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from cselab.pipeline.config import PLANNING_GC_THRESHOLDS, collect_less_while_planning\n"
        "collect_less_while_planning()\n"
        "assert gc.get_freeze_count() > 0 and gc.get_threshold() == PLANNING_GC_THRESHOLDS\n"
        "class Node: pass\n"
        "a = Node(); a.self = a; alive = weakref.ref(a); del a\n"
        "kept = [Node() for _ in range(2 * PLANNING_GC_THRESHOLDS[0])]\n"  # net allocations
        "print(alive() is None)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "True\n"


def test_libyaml_reads_every_yaml_file_as_safe_load_does(default):
    """cselab.io.load_yaml (libyaml's parser) against PyYAML's own ``safe_load`` on every YAML file
    of the checkout (config, profiles, envs, the papers' published numbers); the tests' cached
    reader hands out copies."""
    import yaml

    from cselab.io import load_yaml

    assert hasattr(yaml, "CSafeLoader"), "PyYAML without libyaml: load_yaml would be safe_load itself"
    files = [p for folder in ("", "configs", "profiles", "envs", "cselab", "report", ".ci")
             for p in sorted((ROOT / folder).glob("*.yaml" if not folder else "**/*.y*ml"))]
    assert len(files) >= 10 and ROOT / "config.yaml" in files
    for path in files:
        assert load_yaml(path.read_text()) == yaml.safe_load(path.read_text()), path
    default["training"]["lr"] = "changed by this test"
    assert read_yaml(ROOT / "config.yaml") == yaml.safe_load((ROOT / "config.yaml").read_text())
