"""The gradient paradigm through Snakemake on a tiny random BERT: a Table-5-style STS table of
original and modified losses (a modified loss is a method of its own), the simulated Figures
2-4, a component sweep (Figure 6) over STS-B dev, Figure 8 (Lemma 1's minimum ratio on a
held-out slice the models did not train on, the dynamic ratios and the positive cosine from the
scalars the method logs), Figures 5/7 on that slice, and Figure 9 (the angles' statistics)."""

import json

import pandas as pd
import pytest
import yaml

from tests.built import PREPARED_DATA, prepared_project
from tests.test_workflow import snakemake

EXPERIMENTS = {
    "untrained-tiny": {"plm": "tiny", "method": "untrained"},
    "gp-mhe-tiny": {"plm": "tiny", "method": "paradigm", "options": {"loss": "mhe"}},
    "gp-mhe-mod-tiny": {"plm": "tiny", "method": "paradigm-mhe"},
    "gp-base-tiny": {"plm": "tiny", "method": "paradigm"},
    "gp-r2-tiny": {"plm": "tiny", "method": "paradigm", "options": {"ratio": 2.0}},
    "gp-heldout-tiny": {"plm": "tiny", "method": "paradigm", "training": {"holdout": 0.2}},
    "gp-heldout-r2-tiny": {"plm": "tiny", "method": "paradigm", "options": {"ratio": 2.0},
                           "training": {"holdout": 0.2}},
}
FIGURES = {
    "gp_gd": {"kind": "gradient_dissipation", "points": 8, "batches": 20},
    "gp_weight": {"kind": "gradient_weight", "points": 8, "batches": 20},
    "gp_ratio": {"kind": "gradient_ratio", "points": 8},
    "gp_sweep": {"kind": "component_sweep", "parameter": "ratio",
                 "experiments": {"R = 1": "gp-base-tiny", "R = 2": "gp-r2-tiny"}},
    "gp_training": {"kind": "training_ratio", "holdout": 0.2, "max_sentences": 40, "batch_size": 16,
                    "margins": [0.3, 2.0], "step_sizes": [0.0, 0.1],
                    "experiments": {"R = 1": "gp-heldout-tiny", "R = 2": "gp-heldout-r2-tiny"}},
    "gp_angles": {"kind": "angle_statistics", "experiments": {"baseline": "gp-base-tiny"}},
    "gp_heldout": {"kind": "heldout_statistics", "holdout": 0.2, "max_sentences": 40,
                   "experiments": {"PLM": "untrained-tiny", "trained": "gp-heldout-tiny"}},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = prepared_project(tmp_path_factory, tmp_path_factory.mktemp("paradigm"))
    settings = {"training": {"batch_size": 16, "lr": 1e-4}}
    cfg = {
        **PREPARED_DATA,
        "mlflow": {"experiment_name": "cselab-test"},
        "seeds": [42],
        "training": {"max_len": 32, "max_steps": 6, "eval_steps": 3, "log_steps": 1, "precision": "fp32"},
        "methods": {name: settings for name in ("paradigm", "paradigm-mhe")},
        "evaluation": {"batch_size": 64, "bootstrap": {"n_boot": 100}},
        "experiments": EXPERIMENTS,
        "tables": {"gp_table": {"kind": "sts", "experiments": ["gp-mhe-tiny", "gp-mhe-mod-tiny"]}},
        "figures": FIGURES,
    }
    (workdir / "test.yaml").write_text(yaml.safe_dump(cfg))
    targets = ["results/gp_table.csv", *[f"results/{name}.png" for name in FIGURES]]
    proc = snakemake(workdir, "--cores", "2", "--set-threads", "train=1", "figure=1", "--", *targets)
    return workdir, proc


def test_table_of_original_and_modified_losses(run):
    workdir, _ = run
    table = pd.read_csv(workdir / "results" / "gp_table.csv")
    assert list(table["experiment"]) == ["gp-mhe-tiny", "gp-mhe-mod-tiny"]
    assert table["Avg"].notna().all()
    spec = json.loads((workdir / "results/experiments/gp-mhe-mod-tiny-s42/model/cselab.json").read_text())
    assert spec["experiment"]["options"]["loss"] == "mhe" and spec["experiment"]["options"]["r"] is True
    assert spec["experiment"]["training"]["batch_size"] == 16  # the method's training settings apply


def test_simulated_figures_need_no_training(run):
    workdir, proc = run
    gd = pd.read_csv(workdir / "results" / "gp_gd.csv")
    assert set(gd["loss"]) == {"infonce", "arccon", "mpt", "met"} and len(gd) == 4 * 8 * 8
    assert len(pd.read_csv(workdir / "results" / "gp_weight.csv")) == 6 * 8
    assert set(pd.read_csv(workdir / "results" / "gp_ratio.csv")["loss"]) == {"arccon", "met"}


def test_sweep_and_training_ratio(run):
    workdir, _ = run
    sweep = pd.read_csv(workdir / "results" / "gp_sweep.csv")
    assert list(sweep["ratio"]) == [1.0, 2.0] and sweep["stsb_dev_spearman"].notna().all()
    curve = pd.read_csv(workdir / "results/experiments/gp-heldout-r2-tiny-s42/curve.csv")
    assert {"loss.paradigm", "pos_cos", "ratio_arccon", "ratio_met", "ratio_mat", "gd_kept"} <= set(curve.columns)
    training = pd.read_csv(workdir / "results" / "gp_training.csv")
    assert set(training["label"]) == {"R = 1", "R = 2"} and set(training["panel"]) == {"a", "b", "c"}
    held_out = training[training["panel"] == "a"]
    assert set(zip(held_out["m"], held_out["step_size"])) == {(0.3, 0.0), (0.3, 0.1), (2.0, 0.0), (2.0, 0.1)}
    anchors = held_out[held_out["quantity"] == "anchors"].set_index(["label", "m", "step_size"])["y"]
    assert (anchors >= 0).all() and (anchors.xs(2.0, level="m") >= anchors.xs(0.3, level="m")).all()
    ratios = training[training["panel"] == "b"]
    assert set(ratios["quantity"]) == {"ratio_arccon", "ratio_met", "ratio_mat"}
    cosines = training[training["panel"] == "c"]
    assert cosines["y"].between(-1, 1).all() and cosines.groupby("label")["x"].max().to_dict() == {"R = 1": 6,
                                                                                                  "R = 2": 6}


def test_angle_statistics(run):
    workdir, _ = run
    angles = pd.read_csv(workdir / "results" / "gp_angles.csv")
    assert set(angles["label"]) == {"baseline"} and list(angles["step"]) == [1, 2, 3, 4, 5, 6]
    assert angles[["mu_pos_pi", "mu_neg_pi"]].stack().between(0, 1).all()
    assert (angles[["sigma_pos", "sigma_neg"]] > 0).all().all()  # a random tiny BERT: no order of mu_p and mu_n


def test_heldout_slice_is_not_trained_on(run):
    workdir, _ = run
    train = (workdir / "resources/corpus/split/train-0.2.txt").read_text().splitlines()
    heldout = (workdir / "resources/corpus/split/heldout-0.2.txt").read_text().splitlines()
    corpus = (workdir / "resources/corpus/corpus.txt").read_text().splitlines()
    unique = set(corpus)
    assert len(heldout) == int(0.2 * len(unique)) and set(train) | set(heldout) == unique
    assert not set(heldout) & set(train)  # a duplicate of a held-out sentence is held out too
    stats = pd.read_csv(workdir / "results" / "gp_heldout.csv")
    assert set(stats["label"]) == {"PLM", "trained"}
    assert set(stats["kind"]) == {"pos_cos", "hardest_neg_cos", "hardest_share"}
