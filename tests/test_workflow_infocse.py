"""InfoCSE and DiffCSE through Snakemake on a tiny random BERT: the stage-1 pretraining rule runs
once per PLM before the trainings that declared it (InfoCSE's stage 2, DiffCSE's generator for a
PLM without an MLM head; not for the ablation without it), the stage's export seeds stage 2 and
serves as DiffCSE's generator, and RTD and the auxiliary MLM compose in config (InfoCSE Table 12)."""

import json
import re

import pandas as pd
import pytest
import yaml

from tests.built import PREPARED_DATA, prepared_project
from tests.test_workflow import snakemake

EXPERIMENTS = {
    "simcse-tiny": {"plm": "tiny", "method": "simcse"},
    "infocse-tiny": {"plm": "tiny", "method": "infocse"},
    "info-nopre-tiny": {"plm": "tiny", "method": "infocse",
                        "auxiliaries": {"infocse_mlm": {"options": {"pretrained": False}}}},
    "diffcse-tiny": {"plm": "tiny", "method": "diffcse"},
    "info-rtd-tiny": {"plm": "tiny", "method": "infocse", "auxiliaries": {"rtd": {"weight": 0.005}}},
}


TARGETS = ["results/info_t12.csv", "results/info_t7.csv", "results/info_t9.csv", "results/d_fig2.png",
           "results/d_t9.png"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = prepared_project(tmp_path_factory, tmp_path_factory.mktemp("infocse"))
    cfg = {
        **PREPARED_DATA,
        "mlflow": {"experiment_name": "cselab-test"},
        "seeds": [42],
        "training": {"batch_size": 16, "max_len": 32, "max_steps": 4, "lr": 1e-4, "eval_steps": 2, "log_steps": 1,
                     "precision": "fp32"},
        "methods": {"infocse": {"training": {"batch_size": 16, "lr": 1e-4, "epochs": 1}},
                    "diffcse": {"training": {"batch_size": 16, "lr": 1e-4, "epochs": 1},
                                "auxiliaries": {"rtd": {"options": {"generator": None}}}}},
        "pretraining": {"infocse-pretrain": {"options": {"lower_layers": 1}, "training": {"batch_size": 16, "lr": 1e-3, "epochs": 1,
                                                          "max_steps": 5}}},
        "evaluation": {"batch_size": 64, "bootstrap": {"n_boot": 100}},
        "experiments": EXPERIMENTS,
        "figures": {"d_fig2": {"kind": "similarity_by_rating",
                               "experiments": {"SimCSE": "simcse-tiny", "DiffCSE": "diffcse-tiny"}},
                    "d_t9": {"kind": "retrieval_examples", "k": 2,
                             "experiments": {"SimCSE": "simcse-tiny", "DiffCSE": "diffcse-tiny"}}},
        "tables": {"info_t12": {"kind": "sts", "sources": [["infocse", "table12"]],
                                "experiments": ["simcse-tiny", "diffcse-tiny", "infocse-tiny", "info-rtd-tiny"]},
                   "info_t9": {"kind": "pooler", "sources": [["infocse", "table9"]],
                               "experiments": ["simcse-tiny", "diffcse-tiny", "infocse-tiny"]},
                   "info_t7": {"kind": "stsb_dev", "sources": [["infocse", "table7"]],
                               "experiments": ["infocse-tiny", "info-nopre-tiny"]}},
    }
    (workdir / "test.yaml").write_text(yaml.safe_dump(cfg))
    plan = snakemake(workdir, "-n", *TARGETS).stdout
    snakemake(workdir, "--cores", "2", "--set-threads", "train=1", "pretrain=1", "figure=1", "--", *TARGETS)
    return workdir, plan


def test_scoring_and_logging_settings_replan_no_pretraining_stage(run):
    """A stage's spec holds what changes its output: STS-B dev scoring (eval_steps) retrains the
    experiments, never the stage; logging (log_steps) retrains nothing."""
    workdir, _ = run
    original = (workdir / "test.yaml").read_text()
    cfg = yaml.safe_load(original)
    try:
        cfg["training"]["eval_steps"] = 3
        (workdir / "test.yaml").write_text(yaml.safe_dump(cfg))
        plan = snakemake(workdir, "-n", *TARGETS).stdout
        assert "rule pretrain:" not in plan and "rule train:" in plan
        cfg["training"].update(eval_steps=2, log_steps=2, dev_batch_size=7)
        (workdir / "test.yaml").write_text(yaml.safe_dump(cfg))
        assert "Nothing to be done" in snakemake(workdir, "-n", *TARGETS).stdout
    finally:
        (workdir / "test.yaml").write_text(original)


def test_stage_one_runs_once_before_the_trainings_that_need_it(run):
    workdir, plan = run
    assert plan.count("rule pretrain:") == 1 and "stage=infocse-pretrain" in plan
    blocks = re.split(r"\n(?:local)?rule ", plan)
    jobs = {block.split("wildcards: exp=")[1].split()[0]: block for block in blocks if block.startswith("train:")}
    stage_dir = "resources/pretrained/infocse-pretrain/tiny/model"
    assert stage_dir in jobs["infocse-tiny-s42"] and stage_dir not in jobs["info-nopre-tiny-s42"]
    assert stage_dir in jobs["diffcse-tiny-s42"] and stage_dir in jobs["info-rtd-tiny-s42"]
    stage = workdir / "resources/pretrained/infocse-pretrain/tiny/model"
    exported = {p.name for p in stage.iterdir()}
    assert {"infocse_aux.pt", "infocse_aux.json", "mlm_head.pt", "model.safetensors"} <= exported
    assert (stage.parent / "curve.png").stat().st_size > 1000  # the stage-1 losses, plotted
    curve = pd.read_csv(workdir / "resources/pretrained/infocse-pretrain/tiny/curve.csv")
    assert {"loss.aux", "loss.mlm", "masked_share"} <= set(curve.columns) and curve["step"].max() == 5
    assert curve["loss.aux"].iloc[-1] < curve["loss.aux"].iloc[0]  # stage 1 learns
    # a stage is not scored on STS-B dev: its summary (strict JSON) and its MLflow run carry no dev score
    summary = json.loads((stage.parent / "summary.json").read_text(), parse_constant=lambda c: 1 / 0)
    assert "stsb_dev_spearman" not in summary and summary["steps"] == 5
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{workdir}/results/mlflow.db")
    (stage_run,) = client.search_runs([client.get_experiment_by_name("cselab-test").experiment_id],
                                      "tags.rule = 'pretrain'")
    assert "best_stsb_dev_spearman" not in stage_run.data.metrics and "train_seconds" in stage_run.data.metrics
    assert "training.eval_steps" not in stage_run.data.params and "training.temperature" not in stage_run.data.params


def test_stage_two_logs_both_terms_and_starts_from_stage_one(run):
    workdir, _ = run
    curve = pd.read_csv(workdir / "results/experiments/infocse-tiny-s42/curve.csv")
    assert {"loss.contrastive", "loss.mlm"} <= set(curve.columns)
    step0 = {name: pd.read_csv(workdir / f"results/experiments/{name}-s42/curve.csv").iloc[0]["stsb_dev_spearman"]
             for name in ("infocse-tiny", "info-nopre-tiny", "simcse-tiny")}
    assert step0["info-nopre-tiny"] == step0["simcse-tiny"]  # both start from the PLM
    assert step0["infocse-tiny"] != step0["simcse-tiny"]     # stage 2 starts from stage 1's backbone
    spec = json.loads((workdir / "results/experiments/infocse-tiny-s42/model/cselab.json").read_text())
    assert spec["experiment"]["signature"] == "simcse+infocse_mlm"


def test_tables(run):
    workdir, _ = run
    t7 = pd.read_csv(workdir / "results/info_t7.csv")
    assert list(t7["experiment"]) == ["infocse-tiny", "info-nopre-tiny"]
    assert t7["STS-B dev"].notna().all()
    t12 = pd.read_csv(workdir / "results/info_t12.csv")
    assert list(t12["experiment"]) == ["simcse-tiny", "diffcse-tiny", "infocse-tiny", "info-rtd-tiny"]
    assert t12["Avg"].notna().all() and (t12.loc[1:, "baseline"] == "simcse-tiny").all()
    assert list(t12["method"]) == ["simcse", "diffcse", "infocse", "infocse"]


def test_diffcse_uses_the_stage_as_generator_and_logs_rtd(run):
    workdir, _ = run
    for name in ("diffcse-tiny", "info-rtd-tiny"):
        curve = pd.read_csv(workdir / f"results/experiments/{name}-s42/curve.csv")
        assert {"loss.contrastive", "loss.rtd", "rtd_acc", "replaced_share"} <= set(curve.columns)
    both = pd.read_csv(workdir / "results/experiments/info-rtd-tiny-s42/curve.csv")
    assert "loss.mlm" in both.columns


def test_diffcse_figure2_and_table9(run):
    workdir, _ = run
    fig2 = pd.read_csv(workdir / "results/d_fig2.csv")
    assert set(fig2["model"]) == {"SimCSE", "DiffCSE"} and fig2["cosine"].between(-1, 1).all()
    assert set(fig2["group"]) <= {"0-1", "1-2", "2-3", "3-4", "4-5"}
    assert (fig2.groupby("model").size() == fig2.groupby("model").size().iloc[0]).all()  # every pair, per model
    t9 = pd.read_csv(workdir / "results/d_t9.csv")
    ours = t9[~t9["model"].str.startswith("paper: ")]
    assert set(ours["model"]) == {"SimCSE", "DiffCSE"} and ours.groupby(["query", "model"]).size().eq(2).all()
    assert ours["query"].nunique() == 3  # the paper's three queries by default
    paper = t9[t9["model"].str.startswith("paper: ")]
    assert set(paper["model"]) == {"paper: simcse", "paper: diffcse"}
    assert "yes, you can do it." in set(paper["sentence"])


def test_pooler_table_evaluates_the_head_on_the_cached_encoding(run):
    workdir, _ = run
    t9 = pd.read_csv(workdir / "results/info_t9.csv")
    assert list(t9["experiment"]) == ["simcse-tiny", "diffcse-tiny", "infocse-tiny"]
    assert t9["cls"].notna().all() and t9["cls_before_pooler"].notna().all()
    dev = json.loads((workdir / "results/experiments/infocse-tiny-s42/stsb_dev.json").read_text())
    assert t9.loc[2, "cls_before_pooler"] == pytest.approx(dev["scores"]["STS-B dev"], abs=0.01)
    head = json.loads((workdir / "results/experiments/infocse-tiny-s42/stsb_dev_head.json").read_text())
    assert head["cache_hits"] >= 1 and head["cache_misses"] == 0  # the raw [CLS] encoding is reused
    assert head["model_loaded"] is False  # and the checkpoint's encoder is never loaded for it


def test_a_damaged_stage_is_named_and_stops_only_a_training_that_starts_from_it(run):
    """The stage's model edited after its stage ended: planning names it and plans nothing (the
    stage is kept, so the four intact trainings built on it are not retrained); a new seed's
    InfoCSE training stops at its start with that one message. Last in the file: the stage is
    restored, bytes and mtime, after it."""
    import os

    workdir, _ = run
    stage = "resources/pretrained/infocse-pretrain/tiny/model"
    damaged = workdir / stage / "infocse_aux.json"
    kept, st = damaged.read_bytes(), damaged.stat()
    config = (workdir / "test.yaml").read_text()
    trained = workdir / "results/experiments/infocse-tiny-s42/model/model.safetensors"
    before = trained.stat().st_mtime_ns
    try:
        damaged.write_bytes(kept + b" ")
        dry = snakemake(workdir, "-n", *TARGETS)
        assert "Nothing to be done" in dry.stdout
        assert f"cselab: the pretraining stage's model {stage} is damaged: {stage}/infocse_aux.json has" in dry.stderr
        assert f"snakemake --forcerun {stage} <your target>" in dry.stderr
        (workdir / "test.yaml").write_text(yaml.safe_dump({**yaml.safe_load(config), "seeds": [42, 43]}))
        new = snakemake(workdir, "--cores", "1", "results/experiments/infocse-tiny-s43/train_summary.json", check=False)
        assert new.returncode != 0
        assert f"the pretraining stage's model {stage} is damaged" in new.stderr.split("cselab error in rule train")[-1]
        assert "Traceback" not in new.stderr and damaged.read_bytes() == kept + b" "
        assert trained.stat().st_mtime_ns == before
    finally:
        (workdir / "test.yaml").write_text(config)
        damaged.write_bytes(kept)
        os.utime(damaged, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert "Nothing to be done" in snakemake(workdir, "-n", *TARGETS).stdout
