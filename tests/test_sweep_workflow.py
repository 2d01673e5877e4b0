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

from tests.built import PREPARED_DATA, prepared_project
from tests.helpers import read_yaml
from tests.test_workflow import snakemake

SWEEP, BASE, SEEDS = "tinylr", "simcse-tiny", [1, 2]
LRS = [2e-4, 5e-4]  # neither is the base's lr (1e-4): each point is an experiment of its own
NEW_LR = 1e-3


def write_config(root, lrs) -> None:
    cfg = {**PREPARED_DATA, "mlflow": {"experiment_name": "cselab-sweep-test"}, "seeds": [42],
           "training": {"batch_size": 8, "max_len": 24, "max_steps": 4, "lr": 1e-4, "eval_steps": 4, "log_steps": 2,
                        "precision": "fp32"},
           "evaluation": {"batch_size": 64, "protocols": {"table": "tsweep", "truncation": 4}},  # the winner, every protocol
           "export": {"experiments": [f"sweep:{SWEEP}"]},  # the winner exported (target exports)
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
    root = prepared_project(tmp_path_factory, tmp_path_factory.mktemp("sweep"))
    write_config(root, LRS)
    # before the sweep has run, what reads its winner waits for its report (and is planned again after)
    before = snakemake(root, "-n", "--cores", "2", "--", "results/table_protocols.csv", f"results/hub/sweeps/{SWEEP}.json")
    (root / "planned_before.txt").write_text(before.stdout)
    one_thread = [f"{rule}=1" for rule in ("train", "evaluate_sts", "evaluate_stsb_dev", "protocol_table")]
    snakemake(root, "--cores", "2", "--set-threads", *one_thread, "--", f"results/sweep_{SWEEP}.csv",
              "results/tsweep.csv", "results/table_protocols.csv")
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


def test_downstream_targets_use_the_winner(sweep_run):
    """The protocol table evaluates the winner (its table lists sweep:<s>); target exports and rule
    push_sweep plan the winner's exports once the sweep has run, and wait for it before."""
    before = planned((sweep_run / "planned_before.txt").read_text())
    assert ("sweep", f"sweep={SWEEP}") in before and ("protocol_table", "") in before
    assert ("push_sweep", f"sweep={SWEEP}") in before and not any(rule == "push" for rule, _ in before)
    sweep = pd.read_csv(sweep_run / f"results/sweep_{SWEEP}.csv")
    winner, loser = (sweep[sweep["selected"] == s].iloc[0]["experiment"] for s in (True, False))
    protocols = pd.read_csv(sweep_run / "results/table_protocols.csv")
    assert {f"{winner}-s1", f"{winner}-s2", "untrained-tiny"} <= set(protocols["experiment"])
    assert not any(loser in str(v) for v in protocols["experiment"])
    jobs = planned(snakemake(sweep_run, "-n", "--cores", "2", "--", "exports", f"results/hub/sweeps/{SWEEP}.json").stdout)
    for rule in ("mteb_results", "export_onnx", "export_model", "push"):
        assert (rule, f"exp={winner}-s1") in jobs and (rule, f"exp={winner}-s2") in jobs, (rule, jobs)
    assert ("push_sweep", f"sweep={SWEEP}") in jobs
    assert not any(loser in wildcards for _, wildcards in jobs)


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

    raw = deep_update(read_yaml(ROOT / "config.yaml"),
                      read_yaml(ROOT / "configs" / "smoke.yaml"))
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
    SimCSE's grid and the ablations written as sweeps), which ``all`` leaves out."""
    from cselab.pipeline import config as cc
    from cselab.pipeline.cost import default_targets
    from tests.test_sweeps import ROOT

    cfg = cc.validate(read_yaml(ROOT / "config.yaml"))
    assert cfg["cost_plan"]["targets"] is None
    assert default_targets(cfg) == ["all", *(f"results/sweep_{s}.csv" for s in cfg["sweeps"])]
    assert "results/sweep_simcse-bert-base.csv" in default_targets(cfg)


def _smoke_with(patch: dict) -> dict:
    """The smoke config (its sweep smoke-lr-batch: seeds 42 and 43) with ``patch`` merged in, validated."""
    from cselab.pipeline import config as cc
    from tests.test_sweeps import ROOT, deep_update

    raw = deep_update(read_yaml(ROOT / "config.yaml"),
                      read_yaml(ROOT / "configs" / "smoke.yaml"))
    return cc.validate(deep_update(raw, patch))


WIN = "simcse-minilm@lr=1e-05+batch_size=16"  # a fake winner of smoke-lr-batch (one of its points)
WINNERS = {"smoke-lr-batch": {"experiment": WIN, "mean": 71.2, "compared": 1, "distinguishable": 0}}.get


def test_one_resolver_for_every_sweep_entry():
    """``sweep:<s>`` is the winner once known and left out before, wherever it stands."""
    from cselab.pipeline import targets

    entries = ["untrained-minilm", "sweep:smoke-lr-batch", "compcse-minilm", "sweep:smoke-lr-batch"]
    assert targets.resolve_entries(entries) == ["untrained-minilm", "compcse-minilm"]
    assert targets.resolve_entries(entries, WINNERS) == ["untrained-minilm", WIN, "compcse-minilm"]
    assert targets.entry_sweep_reports(entries) == ["results/sweep_smoke-lr-batch.csv"]
    assert targets.entry_sweep_reports(["untrained-minilm"]) == []


def test_exports_take_a_sweeps_winner():
    """``export.experiments`` and ``export.mteb_check.experiments`` may name ``sweep:<s>``, and an
    exported table listing it exports its winner: MTEB files, card, ONNX and export folder of each
    seed, once the sweep has run (the target waits for its report); rule push_sweep pushes it."""
    from cselab.pipeline import targets

    cfg = _smoke_with({"export": {"experiments": ["sweep:smoke-lr-batch"],
                                  "mteb_check": {"experiments": ["untrained-minilm", "sweep:smoke-lr-batch"]}}})
    before = targets.export_targets(cfg)
    assert not any(WIN in t for t in before)
    assert targets.export_sweep_reports(cfg) == ["results/sweep_smoke-lr-batch.csv"]
    after = targets.export_targets(cfg, WINNERS)
    assert set(after) - set(before) == {f"results/{d}/{WIN}-s{s}" for d in ("mteb", "export") for s in (42, 43)}
    assert list(targets.mteb_check_inputs(cfg)) == ["untrained-minilm"]
    checked = targets.mteb_check_inputs(cfg, WINNERS)
    assert list(checked) == ["untrained-minilm", f"{WIN}-s42", f"{WIN}-s43"]
    assert checked[f"{WIN}-s42"]["model"] == f"results/experiments/{WIN}-s42/model"
    assert targets.mteb_check_sweep_reports(cfg) == ["results/sweep_smoke-lr-batch.csv"]
    assert targets.sweep_push_receipts(cfg, "smoke-lr-batch") == []
    assert targets.sweep_push_receipts(cfg, "smoke-lr-batch", WINNERS) == [f"results/hub/{WIN}-s{s}.json"
                                                                           for s in (42, 43)]
    # a table of export.tables that lists the sweep: the same
    tabled = _smoke_with({"tables": {"table1": {"experiments": ["untrained-minilm", "sweep:smoke-lr-batch",
                                                                 "compcse-minilm"]}}})
    assert targets.export_sweep_reports(tabled) == ["results/sweep_smoke-lr-batch.csv"]
    assert f"results/export/{WIN}-s43" in targets.export_targets(tabled, WINNERS)
    assert targets.export_sweep_reports(_smoke_with({})) == []


def test_the_seed_planner_plans_with_a_sweeps_winner():
    """A planner table listing ``sweep:<s>`` plans the winner's seeds at its place; a ``sweep:<s>``
    baseline is the winner."""
    from cselab.pipeline import targets

    cfg = _smoke_with({"tables": {"table1": {"experiments": ["untrained-minilm", "sweep:smoke-lr-batch",
                                                              "compcse-minilm"]}},
                       "evaluation": {"seed_power": {"baseline": "sweep:smoke-lr-batch"}}})
    assert list(targets.seed_power_inputs(cfg)) == ["compcse-minilm"]
    assert targets.seed_power_baseline(cfg) is None  # not known before the sweep has run (its job waits)
    assert targets.seed_power_sweep_reports(cfg) == ["results/sweep_smoke-lr-batch.csv"]
    inputs = targets.seed_power_inputs(cfg, WINNERS)
    assert list(inputs) == [WIN, "compcse-minilm"] and targets.seed_power_baseline(cfg, WINNERS) == WIN
    assert inputs[WIN]["STS-B dev"] == [f"results/experiments/{WIN}-s{s}/stsb_dev_pairs.npz" for s in (42, 43)]
    assert targets.seed_power_sweep_reports(_smoke_with({})) == []


def test_the_protocol_table_evaluates_a_sweeps_winner():
    from cselab.pipeline import targets

    cfg = _smoke_with({"tables": {"table1": {"experiments": ["untrained-minilm", "sweep:smoke-lr-batch",
                                                              "compcse-minilm"]}}})
    assert list(targets.protocol_checkpoints(cfg)) == ["untrained-minilm", "compcse-minilm-s42"]
    assert targets.protocol_sweep_reports(cfg) == ["results/sweep_smoke-lr-batch.csv"]
    assert targets.protocol_checkpoints(cfg, WINNERS) == {
        "untrained-minilm": "resources/plms/minilm.json",
        **{f"{WIN}-s{s}": f"results/experiments/{WIN}-s{s}/model" for s in (42, 43)},
        "compcse-minilm-s42": "results/experiments/compcse-minilm-s42/model"}
    assert targets.protocol_sweep_reports(_smoke_with({})) == []


@pytest.mark.parametrize("patch,message", [
    ({"export": {"experiments": ["sweep:nope"]}}, r"config key 'export.experiments\[0\]': unknown sweep 'nope'"),
    ({"export": {"experiments": ["nope"]}}, r"config key 'export.experiments\[0\]': unknown experiment 'nope'"),
    ({"export": {"mteb_check": {"experiments": ["simcse-minilm", "sweep:nope"]}}},
     r"config key 'export.mteb_check.experiments\[1\]': unknown sweep 'nope'"),
    ({"evaluation": {"seed_power": {"baseline": "sweep:nope"}}},
     "config key 'evaluation.seed_power.baseline': unknown sweep 'nope'"),
    ({"evaluation": {"seed_power": {"baseline": "sweep:smoke-lr-batch"}}},
     "config key 'evaluation.seed_power.baseline': table 'table1' does not list 'sweep:smoke-lr-batch'"),
    ({"tables": {"table1": {"experiments": ["sweep:nope"]}}},
     r"config key 'tables.table1.experiments\[0\]': unknown sweep 'nope'"),
])
def test_an_unknown_sweep_is_one_message_naming_the_key(patch, message):
    from cselab.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        _smoke_with(patch)
