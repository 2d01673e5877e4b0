"""The sweep report (cselab/reporting/sweeps.py, rule sweep) from synthetic results: the table
(mean and std over seeds, steps, cost, the selected point), the verdicts of its comparisons, the
written CSV / markdown / figure / best.yaml, and byte-identical output for the same inputs."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.stats import spearmanr

from cselab.pipeline import outputs, targets
from cselab.reporting import sweeps
from cselab.reporting.stats import save_pairs
from tests.helpers import read_yaml

GRID = {"training.lr": [1e-5, 3e-5], "training.batch_size": [32, 64]}
SEEDS = [1, 2]
N = 300


def resolved_sweep(name: str = "lr-batch", grid: dict = GRID) -> dict:
    """A config as the sweeps expansion leaves it: ``sweeps.<name>`` with its points (grid order),
    and one ordinary experiment per point."""
    keys = list(grid)
    combos = [[v] for v in grid[keys[0]]] if len(keys) == 1 else [[a, b] for a in grid[keys[0]] for b in grid[keys[1]]]
    points, experiments = [], {}
    for k, combo in enumerate(combos):
        exp = f"{name}-{k}"
        values = dict(zip(keys, combo))
        points.append({"experiment": exp, "values": values})
        training = {key.split(".", 1)[1]: v for key, v in values.items()}
        experiments[exp] = {"plm": "minilm", "method": "simcse", "options": {"head": "mlp"}, "training": training,
                            "seeds": SEEDS}
    return {"sweeps": {name: {"points": points, "seeds": SEEDS, "metric": "stsb_dev", "grid": grid, "tables": []}},
            "experiments": experiments}


def write_results(root: Path, cfg: dict, name: str, noise: dict[int, float], twin: int | None = None,
                  device: str | None = None) -> None:
    """Per point and seed the three files the report reads: predictions = gold + noise (point k's
    scale ``noise[k]``, a seed's own draw); ``twin``: that point is the first point's predictions
    with a tiny jitter (near-identical)."""
    rng = np.random.default_rng(7)
    gold = rng.normal(size=N)
    base = {s: rng.normal(size=N) for s in SEEDS}
    for k, point in enumerate(targets.sweep_points(cfg, name)):
        for run in point["runs"]:
            s = run["seed"]
            if k == twin:
                pred = gold + noise[0] * base[s] + 0.002 * rng.normal(size=N)
            else:
                pred = gold + noise[k] * (base[s] if k == 0 else rng.normal(size=N))
            for key in ("score", "pairs", "summary"):
                (root / run[key]).parent.mkdir(parents=True, exist_ok=True)
            (root / run["score"]).write_text(json.dumps({"scores": {"STS-B dev": 100 * spearmanr(gold, pred)[0]}}))
            save_pairs(root / run["pairs"], {"STS-B dev": (gold, pred)})
            summary = {"steps": 50 + 10 * k, "train_seconds": 30.0 + k, "job_seconds": {"total": 40.0 + k}}
            (root / run["summary"]).write_text(json.dumps({**summary, **({"device": device} if device else {})}))


def loaded_points(root: Path, cfg: dict, name: str) -> list[dict]:
    return [{**p, "runs": [sweeps.load_run(r["seed"], root / r["score"], root / r["pairs"], root / r["summary"])
                           for r in p["runs"]]} for p in targets.sweep_points(cfg, name)]


def table(root: Path, cfg: dict, name: str = "lr-batch"):
    grid = cfg["sweeps"][name]["grid"]
    return sweeps.sweep_table(loaded_points(root, cfg, name), grid, n_boot=300)


def test_the_planned_files_are_the_results_of_every_point_and_seed():
    cfg = resolved_sweep()
    files = targets.sweep_inputs(cfg, "lr-batch")
    assert len(files) == 4 * 2 * 3
    assert outputs.path(outputs.RESULT["stsb_dev_pairs"], exp="lr-batch-3-s2") in files
    assert outputs.path(outputs.TRAIN_SUMMARY, exp="lr-batch-0-s1") in files
    with pytest.raises(Exception, match="no sweep named 'other'"):
        targets.sweep_points(cfg, "other")


def test_a_clearly_better_point_is_distinguishable_and_a_near_twin_is_not(tmp_path):
    cfg = resolved_sweep()
    write_results(tmp_path, cfg, "lr-batch", {0: 0.4, 1: 0.4, 2: 2.5, 3: 3.0}, twin=1)
    df = table(tmp_path, cfg)
    assert list(df["experiment"]) == [f"lr-batch-{k}" for k in range(4)]  # grid order
    assert list(df["training.lr"]) == [1e-5, 1e-5, 3e-5, 3e-5] and list(df["training.batch_size"]) == [32, 64] * 2
    best = df[df["selected"]]
    assert len(best) == 1 and best.iloc[0]["experiment"] in ("lr-batch-0", "lr-batch-1")
    assert best.iloc[0]["verdict"] == sweeps.SELECTED and best.iloc[0]["rank"] == 1
    twin = df[(~df["selected"]) & df["experiment"].isin(["lr-batch-0", "lr-batch-1"])].iloc[0]
    assert twin["verdict"] == sweeps.NOT_DISTINGUISHABLE and twin["best_minus_ci_low"] <= 0 <= twin["best_minus_ci_high"]
    for k in (2, 3):
        row = df[df["experiment"] == f"lr-batch-{k}"].iloc[0]
        assert row["verdict"] == sweeps.DISTINGUISHABLE and row["best_minus_ci_low"] > 0
        assert row["best_minus"] == pytest.approx(best.iloc[0]["mean"] - row["mean"], abs=0.011)
        assert row["ci_counts"] == "seeds+items" and row["seeds_needed"] >= 1
    # mean and std over the seeds, steps, cost summed over seeds (no device named: no GPU-hours)
    scores = [json.loads((tmp_path / r["score"]).read_text())["scores"]["STS-B dev"]
              for r in targets.sweep_points(cfg, "lr-batch")[2]["runs"]]
    row = df.iloc[2]
    assert row["mean"] == round(np.mean(scores), 2) and row["std"] == round(np.std(scores, ddof=1), 2)
    assert row["steps"] == "70" and row["wall_s"] == 84.0 and pd.isna(row["gpu_hours"])
    assert row["seeds"] == "1 2" and row["n_seeds"] == 2


def test_runners_up_limits_the_comparisons_and_gpu_hours_come_from_the_device(tmp_path):
    cfg = resolved_sweep()
    write_results(tmp_path, cfg, "lr-batch", {0: 0.4, 1: 1.0, 2: 2.5, 3: 3.0}, device="cuda:0")
    df = sweeps.sweep_table(loaded_points(tmp_path, cfg, "lr-batch"), GRID, n_boot=200, runners_up=1)
    assert df.loc[df["rank"] == 2, "verdict"].iloc[0] in (sweeps.DISTINGUISHABLE, sweeps.NOT_DISTINGUISHABLE)
    assert list(df.loc[df["rank"] > 2, "verdict"]) == ["not compared"] * 2
    assert df.iloc[0]["gpu_hours"] == round(2 * 40.0 / 3600, 3)
    notes = sweeps.notes(df, "stsb_dev", SEEDS, 200, 0.95, 0.8)
    assert any("the 1 next best points only" in n for n in notes)


def write_report(root: Path, cfg: dict, name: str, out: Path) -> dict:
    """The job's library calls, as rule sweep makes them."""
    spec, grid = cfg["sweeps"][name], cfg["sweeps"][name]["grid"]
    points = loaded_points(root, cfg, name)
    df = sweeps.sweep_table(points, grid, n_boot=300)
    paths = {k: out / f"sweep_{name}.{k}" for k in ("csv", "md", "png")}
    sweeps.write(df, grid, paths["csv"], paths["md"], paths["png"], f"Sweep {name}",
                 sweeps.notes(df, "stsb_dev", spec["seeds"], 300, 0.95, 0.8))
    best = df[df["selected"]].iloc[0]
    paths["best"] = out / f"sweep_{name}.best.yaml"
    values = next(p["values"] for p in points if p["experiment"] == best["experiment"])
    sweeps.write_best(paths["best"], name, best["experiment"],
                      sweeps.best_entry(cfg["experiments"][best["experiment"]], spec["seeds"]), values, "stsb_dev",
                      float(best["mean"]))
    return paths


def test_written_table_figure_and_best_entry(tmp_path):
    cfg = resolved_sweep()
    write_results(tmp_path, cfg, "lr-batch", {0: 0.3, 1: 1.0, 2: 2.5, 3: 3.0})
    paths = write_report(tmp_path, cfg, "lr-batch", tmp_path / "out")
    df = pd.read_csv(paths["csv"])
    assert list(df.columns) == ["experiment", "training.lr", "training.batch_size", "seeds", "n_seeds", "mean", "std",
                                "steps", "wall_s", "gpu_hours", "rank", "selected", "best_minus", "best_minus_ci_low",
                                "best_minus_ci_high", "p_value", "ci_counts", "n_boot", "verdict", "seeds_needed"]
    md = paths["md"].read_text()
    assert "| training.lr | training.batch_size | STS-B dev | steps | wall s | best minus [CI] | verdict |" in md
    assert "**" in md and "| distinguishable |" in md
    assert "Selection metric: STS-B dev" in md and "seeds 1, 2" in md and "95% paired bootstrap" in md
    assert "300 resamples" in md
    assert paths["png"].stat().st_size > 1000 and paths["png"].read_bytes()[:4] == b"\x89PNG"
    best = yaml.safe_load(paths["best"].read_text())
    assert list(best) == ["lr-batch-0"]
    assert best["lr-batch-0"] == {"plm": "minilm", "method": "simcse", "options": {"head": "mlp"},
                                  "training": {"lr": 1e-5, "batch_size": 32}, "seeds": [1, 2]}
    assert paths["best"].read_text().startswith("# The selected point of sweep lr-batch")


def test_one_dimensional_grid_draws_a_line(tmp_path):
    grid = {"training.lr": [1e-5, 3e-5, 1e-4]}
    cfg = resolved_sweep("lr", grid)
    write_results(tmp_path, cfg, "lr", {0: 0.5, 1: 1.0, 2: 2.0})
    paths = write_report(tmp_path, cfg, "lr", tmp_path / "out")
    assert paths["png"].stat().st_size > 1000
    assert list(pd.read_csv(paths["csv"])["training.lr"]) == [1e-5, 3e-5, 1e-4]


def test_same_inputs_give_byte_identical_output(tmp_path):
    cfg = resolved_sweep()
    write_results(tmp_path, cfg, "lr-batch", {0: 0.3, 1: 0.35, 2: 2.5, 3: 3.0})
    first = write_report(tmp_path, cfg, "lr-batch", tmp_path / "a")
    second = write_report(tmp_path, cfg, "lr-batch", tmp_path / "b")
    for key in ("csv", "md", "best", "png"):
        assert first[key].read_bytes() == second[key].read_bytes(), key


def test_the_job_writes_the_report_in_one_mlflow_run(tmp_path, monkeypatch):
    """The job function of rule sweep (cselab/pipeline/jobs/sweep.py) on a fake Snakemake object."""
    from cselab.pipeline.jobs.sweep import sweep

    cfg = resolved_sweep()
    write_results(tmp_path, cfg, "lr-batch", {0: 0.3, 1: 1.0, 2: 2.5, 3: 3.0})
    monkeypatch.chdir(tmp_path)
    out = {k: f"results/sweep_lr-batch.{k}" for k in ("csv", "md", "png")}
    captured = {}

    class FakeRun:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def set_tags(self, tags):
            captured.update(tags)

        def log_metrics(self, metrics):
            captured.update(metrics)

        def log_artifact(self, path):
            captured.setdefault("artifacts", []).append(path)

    monkeypatch.setattr("cselab.pipeline.jobs.sweep.run", lambda smk, **kw: FakeRun())
    smk = SimpleNamespace(
        params=SimpleNamespace(sweep=targets.sweep_params(cfg, "lr-batch"), points=targets.sweep_points(cfg, "lr-batch"),
                               bootstrap={"n_boot": 200, "confidence": 0.9, "seed": 0},
                               seed_power={"power": 0.8}),
        output=SimpleNamespace(**out, best="results/sweep_lr-batch.best.yaml"))
    sweep(smk)
    assert captured["cselab.sweep.selected"] == "lr-batch-0" and len(captured["artifacts"]) == 4
    md = Path("results/sweep_lr-batch.md").read_text()
    assert "90% paired bootstrap" in md and "200 resamples" in md


def test_a_point_named_by_its_values_is_pasted_under_the_sweeps_name(tmp_path):
    sweeps.write_best(tmp_path / "b.yaml", "smoke-lr-batch", "simcse-minilm@lr=1e-05+batch_size=16",
                      sweeps.best_entry({"plm": "minilm", "method": "simcse", "training": {"lr": 1e-5}, "options": {},
                                         "seeds": [42]}, [42, 43]), {"training.lr": 1e-5}, "stsb_dev", 80.0)
    assert read_yaml(tmp_path / "b.yaml") == {
        "smoke-lr-batch-best": {"plm": "minilm", "method": "simcse", "training": {"lr": 1e-5}, "seeds": [42, 43]}}


def test_snakemake_plans_the_smoke_sweep_and_the_cost_plan_prices_it(tmp_path):
    """``snakemake -n results/sweep_smoke-lr-batch.csv`` on the smoke config (from scratch, in an
    empty folder): every point and seed trained and scored on STS-B dev, one sweep job, priced."""
    import sys

    from cselab.pipeline import config as cselab_config
    from cselab.pipeline import cost
    from cselab.reporting import cost as rc
    from tests.test_cost_plan import ROOT, merged

    raw = merged("configs/smoke.yaml")
    jobs = cost.dry_run([sys.executable, "-m", "snakemake"], str(ROOT / "Snakefile"), raw,
                        ["results/sweep_smoke-lr-batch.csv"], 2, workdir=tmp_path)
    cfg = cselab_config.validate(merged("configs/smoke.yaml"))
    sweep = cfg["sweeps"]["smoke-lr-batch"]
    runs = [f"{p['experiment']}-s{s}" for p in sweep["points"] for s in sweep["seeds"]]
    assert len(runs) == 8
    (job,) = [j for j in jobs if j.rule == "sweep"]
    assert job.wildcards == {"sweep": "smoke-lr-batch"}
    assert set(job.inputs) == set(targets.sweep_inputs(cfg, "smoke-lr-batch"))
    assert sorted(j.wildcards["exp"] for j in jobs if j.rule == "evaluate_stsb_dev") == sorted(runs)
    assert job.outputs == [outputs.path(p, sweep="smoke-lr-batch")
                           for p in (outputs.SWEEP_CSV, outputs.SWEEP_MD, outputs.SWEEP_PNG, outputs.SWEEP_BEST)]
    rows, _ = cost.plan(cfg, jobs, rc.load_rates(rc.rates_file("cpu-2core")), {"gpus": 0, "cores": 2, "mem_gb": 23})
    (priced,) = [r for r in rows if r["rule"] == "sweep"]
    assert priced["jobs"] == 1 and priced["job_hours"] > 0


def test_a_null_grid_value_shows_as_null():
    assert sweeps._ticks([None, float("nan"), 96.0, "sum"]) == ["null", "null", "96", "sum"]
