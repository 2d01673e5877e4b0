"""A sweep through Snakemake, for real, on a tiny random BERT and synthetic data: two learning
rates x two seeds are trained and compared (``results/sweep_<s>.csv``); a table listing
``sweep:<s>`` shows the winner (the sweep is a checkpoint: the table is planned again once it has
run); a third learning rate plans only the new point's runs, their STS-B dev evaluations and the
sweep report (issue 41)."""

from __future__ import annotations

import re

import pandas as pd
import pytest
import yaml

from tests.helpers import make_corpus, make_senteval, make_tiny_bert, make_transfer
from tests.test_workflow import snakemake

SWEEP, BASE, SEEDS = "tinylr", "simcse-tiny", [1, 2]
LRS = [2e-4, 5e-4]  # neither is the base's lr (1e-4): each point is an experiment of its own
NEW_LR = 1e-3


def write_config(root, lrs) -> None:
    cfg = {"data": {"corpus": {"path": str(root / "data" / "corpus.txt"), "max_lines": 120},
                    "senteval": {"path": str(root / "data" / "senteval"), "strict_counts": False}},
           "mlflow": {"experiment_name": "cselab-sweep-test"}, "seeds": [42],
           "plms": {"tiny": {"model": str(root / "tiny-bert")}},
           "training": {"batch_size": 8, "max_len": 24, "max_steps": 4, "lr": 1e-4, "eval_steps": 4, "log_steps": 2,
                        "precision": "fp32"},
           "evaluation": {"batch_size": 64},
           "experiments": {"untrained-tiny": {"plm": "tiny", "method": "untrained"},
                           BASE: {"plm": "tiny", "method": "simcse"}},
           "sweeps": {SWEEP: {"base": BASE, "grid": {"training.lr": lrs}, "seeds": SEEDS}},
           "tables": {"tsweep": {"kind": "sts", "title": "the sweep's winner",
                                 "experiments": ["untrained-tiny", f"sweep:{SWEEP}"]}}}
    (root / "test.yaml").write_text(yaml.safe_dump(cfg))


def point(lr: float) -> str:
    return f"{BASE}@lr={lr!r}"


def planned(out: str) -> list[tuple[str, str]]:
    """(rule, wildcards) of each job a dry run plans."""
    jobs, rule = [], None
    for line in out.splitlines():
        m = re.match(r"^(?:local)?(?:rule|checkpoint) (\w+):", line.strip())
        if m:
            rule = m.group(1)
            jobs.append((rule, ""))
        elif rule and line.strip().startswith("wildcards:"):
            jobs[-1] = (rule, line.split(":", 1)[1].strip())
    return jobs


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    make_senteval(root / "data" / "senteval", n_extra=12)
    make_transfer(root / "data" / "senteval")
    make_corpus(root / "data" / "corpus.txt", 120)
    make_tiny_bert(root / "tiny-bert")
    write_config(root, LRS)
    one_thread = [f"{rule}=1" for rule in ("train", "evaluate_sts", "evaluate_stsb_dev")]
    snakemake(root, "--cores", "2", "--set-threads", *one_thread, "--", f"results/sweep_{SWEEP}.csv",
              "results/tsweep.csv")
    return root


def test_sweep_report_selects_a_point(sweep_run):
    df = pd.read_csv(sweep_run / f"results/sweep_{SWEEP}.csv")
    assert list(df["experiment"]) == [point(lr) for lr in LRS]
    assert df["selected"].sum() == 1
    assert list(df["n_seeds"]) == [2, 2]
    loser = df[~df["selected"]].iloc[0]
    assert loser["verdict"] in ("distinguishable", "not distinguishable at these seeds")
    assert df[df["selected"]].iloc[0]["verdict"] == "selected"
    assert (sweep_run / f"results/sweep_{SWEEP}.best.yaml").is_file()


def test_table_shows_the_winner(sweep_run):
    sweep = pd.read_csv(sweep_run / f"results/sweep_{SWEEP}.csv")
    winner = sweep[sweep["selected"]].iloc[0]["experiment"]
    table = pd.read_csv(sweep_run / "results/tsweep.csv")
    assert list(table["experiment"]) == ["untrained-tiny", winner]  # at the place of sweep:<s>
    assert table.iloc[1]["seeds"] == "1 2"
    md = (sweep_run / "results/tsweep.md").read_text()
    lr = winner.split("lr=")[1]
    assert f"Row {winner}: the winner of sweep {SWEEP} (lr={lr}), chosen on STS-B dev Spearman x100" in md
    assert "over seeds 1, 2" in md
    # the winner's STS results were built for the table, the loser's not
    loser = sweep[~sweep["selected"]].iloc[0]["experiment"]
    assert (sweep_run / f"results/experiments/{winner}-s1/sts.json").is_file()
    assert not (sweep_run / f"results/experiments/{loser}-s1/sts.json").exists()
    # built and up to date: nothing left to do, the table included (its winner read from the checkpoint)
    out = snakemake(sweep_run, "-n", "--cores", "2", "--", f"results/sweep_{SWEEP}.csv", "results/tsweep.csv").stdout
    assert planned(out) == [], out[-3000:]


def test_a_third_value_plans_only_the_new_point(sweep_run):
    write_config(sweep_run, [*LRS, NEW_LR])
    try:
        out = snakemake(sweep_run, "-n", "--cores", "2", "--", f"results/sweep_{SWEEP}.csv").stdout
    finally:
        write_config(sweep_run, LRS)
    jobs = planned(out)
    new = point(NEW_LR)
    assert sorted(jobs) == sorted([("train", f"exp={new}-s1"), ("train", f"exp={new}-s2"),
                                   ("evaluate_stsb_dev", f"exp={new}-s1"), ("evaluate_stsb_dev", f"exp={new}-s2"),
                                   ("sweep", f"sweep={SWEEP}")]), out[-3000:]


def test_a_table_places_the_winner_where_sweep_stood(tmp_path):
    """Without a winner (the sweep has not run) the table is its configured rows and waits for the
    sweep's CSV; with one, the winner's runs stand at the place of ``sweep:<s>``, with a note."""
    from cselab.pipeline import config as cc
    from cselab.pipeline import targets
    from cselab.reporting.sweeps import read_winner
    from tests.test_sweeps import ROOT, deep_update

    raw = deep_update(yaml.safe_load((ROOT / "config.yaml").read_text()),
                      yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text()))
    raw["tables"]["tw"] = {"kind": "sts", "experiments": ["untrained-minilm", "sweep:smoke-lr-batch", "compcse-minilm"]}
    cfg = cc.validate(raw)
    plain = targets.table_params(cfg, "table1")
    assert plain == {"name": "table1", **cfg["tables"]["table1"]}  # no sweep: as configured
    assert targets.table_sweep_reports(cfg, "table1") == []
    assert targets.table_sweep_reports(cfg, "tw") == ["results/sweep_smoke-lr-batch.csv"]
    assert targets.table_experiments(cfg, "tw") == ["untrained-minilm", "compcse-minilm"]
    assert targets.table_params(cfg, "tw")["notes"] == []

    win = "simcse-minilm@lr=1e-05+batch_size=16"
    csv = tmp_path / "sweep.csv"
    pd.DataFrame({"experiment": [win, "simcse-minilm"], "mean": [71.234, 70.0], "selected": [True, False],
                  "verdict": ["selected", "not distinguishable at these seeds"]}).to_csv(csv, index=False)
    winner = read_winner(csv)
    assert winner == {"experiment": win, "mean": 71.234, "compared": 1, "distinguishable": 0}
    winners = {"smoke-lr-batch": winner}.get
    assert targets.table_experiments(cfg, "tw", winners) == ["untrained-minilm", win, "compcse-minilm"]
    rows = targets.table_rows(cfg, "tw", winners)
    assert [r["id"] for r in rows] == ["untrained-minilm", f"{win}-s42", f"{win}-s43", "compcse-minilm-s42"]
    assert f"results/experiments/{win}-s43/sts.json" in rows[2]["files"]
    params = targets.table_params(cfg, "tw", winners)
    assert params["experiments"] == ["untrained-minilm", win, "compcse-minilm"]
    assert params["notes"] == [f"Row {win}: the winner of sweep smoke-lr-batch (lr=1e-05, batch_size=16), chosen on "
                               "STS-B dev Spearman x100 (stsb_dev; a development split) over seeds 42, 43, mean "
                               "71.23; distinguishable from 0 of the 1 other points compared at these seeds "
                               "(results/sweep_smoke-lr-batch.md)."]


def test_the_cost_plan_prices_every_sweep_by_default():
    """``cost_plan.targets: null`` plans ``all`` and each configured sweep's report (the paper's:
    SimCSE's grid), which ``all`` leaves out."""
    from cselab.pipeline import config as cc
    from cselab.pipeline.cost import default_targets
    from tests.test_sweeps import ROOT

    cfg = cc.validate(yaml.safe_load((ROOT / "config.yaml").read_text()))
    assert cfg["cost_plan"]["targets"] is None
    assert default_targets(cfg) == ["all", "results/sweep_simcse-bert-base.csv"]
