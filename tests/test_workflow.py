"""The whole workflow through Snakemake on a tiny random BERT and synthetic data.

Runs the real rules and scripts (data preparation, training of SimCSE and CompCSE, STS
evaluation, Table 1) in a temporary working directory, then checks the table, the MLflow runs,
re-run behaviour and the linter.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

from tests.helpers import clean_console, make_beir, read_yaml, run_snakemake

ROOT = Path(__file__).resolve().parents[1]
TASKS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R"]
EVALS = ["evaluate_sts", "evaluate_transfer", "evaluate_beir", "evaluate_stsb_retrieval", "evaluate_geometry"]
RULES = {"prepare_corpus", "senteval_reads", "prepare_beir", "prepare_stsb_retrieval", "resolve_plm", "train",
         "table", *EVALS, "evaluate_stsb_dev"}
TABLES = ["table1", "table_transfer", "table_beir", "table_retrieval", "table_geometry", "table_methods"]
IDS = ["untrained-tiny", "simcse-tiny", "compcse-tiny"]


def snakemake(workdir: Path, *args: str, check: bool = True, env: dict | None = None,
              root: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, **(env or {})}
    cmd = [sys.executable, "-m", "snakemake", "-s", str(root / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(workdir / "test.yaml"), *args]
    proc = run_snakemake(cmd, env, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def write_config(workdir: Path, **patch) -> None:
    """``workdir/test.yaml``: its data and PLM named relative to ``workdir`` (where Snakemake runs
    the jobs), so a copy of a built folder has the same params (tests/built.py)."""
    from tests.built import PREPARED_DATA

    cfg = {
        **PREPARED_DATA,
        "mlflow": {"experiment_name": "cselab-test"},
        "seeds": [42],
        "training": {"batch_size": 16, "max_len": 32, "max_steps": 8, "lr": 1e-4, "eval_steps": 4, "log_steps": 2,
                     "precision": "fp32"},
        "evaluation": {"batch_size": 64, "transfer": {"mode": "fast"},
                       "beir": {"datasets": ["toy"], "chunk_size": 16, "k": 100, "max_len": 64}},
        "experiments": {"untrained-tiny": {"plm": "tiny", "method": "untrained"},
                        "simcse-tiny": {"plm": "tiny", "method": "simcse"},
                        "compcse-tiny": {"plm": "tiny", "method": "compcse"}},
        "tables": {**{name: {"experiments": IDS} for name in TABLES[:-1]},
                   "table_methods": {"kind": "methods", "plm": "tiny", "title": "every method, one protocol",
                                     "methods": ["simcse", "compcse", "paradigm-mhe"]}},
    }
    for section, values in patch.items():
        cfg[section] = {**cfg.get(section, {}), **values}
    (workdir / "test.yaml").write_text(yaml.safe_dump(cfg))


def build_tables(workdir: Path) -> None:
    """The tiny project of this file, every table built in one invocation from raw data (its
    MLflow runs are checked as one invocation's); Snakemake's console kept beside it."""
    from tests.built import make_prepared_data

    make_prepared_data(workdir)
    write_config(workdir)
    one_thread = [f"{rule}=1" for rule in ["train", *EVALS, "evaluate_stsb_dev"]]  # tiny model: run two jobs at a time
    proc = snakemake(workdir, "--cores", "2", "--set-threads", *one_thread, "--",
                     *[f"results/{t}.csv" for t in TABLES])
    (workdir / "console.txt").write_text(proc.stderr)


def built_tables(tmp_path_factory) -> Path:
    """:func:`build_tables`'s folder, built once per session for every file that starts from it
    (this one, tests/test_workflow_export.py); a test works on a copy (tests/built.py)."""
    from tests.built import built_once

    return built_once(tmp_path_factory, "tables", build_tables)


@pytest.fixture(scope="module")
def workflow_run(tmp_path_factory):
    from tests.built import copy_built

    workdir = copy_built(built_tables(tmp_path_factory), tmp_path_factory.mktemp("wf") / "project")
    return workdir, SimpleNamespace(stderr=(workdir / "console.txt").read_text())


def fixture_log(workdir: Path) -> str:
    """Snakemake's log of the fixture's run (the folder's first)."""
    return sorted(workdir.glob(".snakemake/log/*.snakemake.log"))[0].read_text()


def test_table1_has_expected_rows_and_columns(workflow_run):
    workdir, _ = workflow_run
    df = pd.read_csv(workdir / "results" / "table1.csv")
    assert list(df["experiment"]) == ["untrained-tiny", "simcse-tiny", "compcse-tiny"]
    assert list(df["method"]) == ["untrained", "simcse", "compcse"]
    for task in TASKS + ["Avg"]:
        assert task in df.columns and f"{task}_paper" in df.columns
        assert df[task].between(-100, 100).all()
    assert df["Avg"].tolist() == pytest.approx(df[TASKS].mean(axis=1).tolist(), abs=0.02)
    assert (workdir / "results" / "table1.md").read_text().startswith("# ")
    for exp in ("simcse-tiny-s42", "compcse-tiny-s42"):
        model = workdir / "results" / "experiments" / exp / "model"
        assert (model / "config.json").is_file() and (model / "modules.json").is_file()
        curve = pd.read_csv(workdir / "results" / "experiments" / exp / "curve.csv")
        assert curve["loss"].notna().sum() == 4 and curve["stsb_dev_spearman"].notna().sum() == 3


def test_the_console_is_one_line_per_job_start_and_end(workflow_run):
    """cselab's console (profiles/default, cselab/pipeline/console.py): the plan in one line,
    a start and a done line per job, each training's progress, the files built and the MLflow
    command at the end; Snakemake's job blocks stay in its log. Before the module's other runs,
    which write results/progress.md again."""
    workdir, proc = workflow_run
    lines = proc.stderr.splitlines()
    log = fixture_log(workdir)
    jobs = log.count("\nrule ") + log.count("\nlocalrule ")
    starts = [x for x in lines if "] start  " in x]
    dones = [x for x in lines if "] done   " in x]
    assert len(starts) == len(dones) == jobs > 10
    assert any(" jobs to run: " in x for x in lines)
    assert sum("train exp=simcse-tiny-s42: training: " in x for x in lines) == 2  # its start and end
    assert f"{jobs} of {jobs} jobs)" in dones[-1]
    assert "built: results/table" in lines[-3]
    assert lines[-2] == "compare the runs: mlflow ui --backend-store-uri sqlite:///results/mlflow.db"
    # the invocation (run with --directory, which Snakemake leaves before it exits) recorded its end:
    # the next one in the folder does not take it for a dead one (cselab.pipeline.recovery)
    assert "ended" in json.loads((workdir / ".snakemake" / "cselab" / "invocation.json").read_text())
    assert not any(x.startswith(("rule ", "    input:", "    output:", "Select jobs")) for x in lines)
    trainings = sum("] start  train " in x for x in lines)
    # the trainings' warnings, one line each: a tiny random BERT's embeddings collapse (one alarm a
    # run, not one a dev evaluation); the 2-step benchmark run ends before its first dev evaluation
    warned = [x for x in lines if ": collapse alarm at step " in x or ": no STS-B dev evaluation in " in x]
    assert sum(": collapse alarm at step " in x for x in warned) == 2 and len(warned) == 3
    assert len(lines) <= 2 * jobs + 2 * trainings + len(warned) + 6  # a start and a done per job, two progress lines per training
    # results/progress.md: per rule, Snakemake's own count of the invocation's jobs, all done
    stats = dict(re.findall(r"^(\w+)\s+(\d+)$", log.split("Job stats:")[1].split("total")[0], re.M))
    rows = [row.split(" | ") for row in (workdir / "results" / "progress.md").read_text().splitlines()
            if row.startswith("| ") and not row.startswith("| rule")]
    assert {r[0][2:]: r[1] for r in rows if r[0] != "| TOTAL"} == stats
    assert all(r[1] == r[2] and r[3:6] == ["0", "0", "0"] for r in rows)
    assert "ended, every job done" in (workdir / "results" / "progress.md").read_text()


def test_mlflow_has_one_run_per_job(workflow_run):
    from mlflow.tracking import MlflowClient

    workdir, _ = workflow_run
    client = MlflowClient(f"sqlite:///{workdir}/results/mlflow.db")
    exp = client.get_experiment_by_name("cselab-test")
    runs = client.search_runs([exp.experiment_id])
    # the invocation's own run: its progress report's numbers (cselab/pipeline/console.py)
    (invocation,) = [r for r in runs if r.data.tags["rule"] == "invocation"]
    runs = [r for r in runs if r.data.tags["rule"] != "invocation"]
    planned = int(re.search(r"^total\s+(\d+)$", fixture_log(workdir), re.M)[1])  # Snakemake's Job stats
    assert invocation.data.metrics["jobs_planned"] == invocation.data.metrics["jobs_done"] == planned
    assert invocation.data.metrics["jobs.train.done"] == 3 and invocation.data.metrics["jobs_failed"] == 0
    assert [a.path for a in client.list_artifacts(invocation.info.run_id)] == ["progress.md"]
    by_rule = {}
    for run in runs:
        assert run.info.status == "FINISHED"
        tags = run.data.tags
        assert tags["git_commit"] and tags["version.torch"] and tags["version.transformers"]
        by_rule.setdefault(tags["rule"], []).append(run)
    assert set(by_rule) == RULES
    # simcse and compcse (tables) + the methods table's paradigm-mhe, which it also scores on STS and transfer
    assert len(by_rule["train"]) == 3
    assert {r: len(by_rule[r]) for r in EVALS} == {"evaluate_sts": 4, "evaluate_transfer": 4, "evaluate_beir": 3,
                                                   "evaluate_stsb_retrieval": 3, "evaluate_geometry": 3}
    assert len(by_rule["evaluate_stsb_dev"]) == 3  # the methods table's STS-B dev column
    assert len(by_rule["table"]) == len(TABLES) and len(runs) == 8 + 3 + 3 * len(EVALS) + 2 + 3 + len(TABLES)
    # every run: its rule's own script as source, one invocation id for the whole snakemake call
    assert {r.data.tags["snakemake.invocation"] for r in runs} == {runs[0].data.tags["snakemake.invocation"]}
    for run in runs:
        rule = run.data.tags["rule"]
        script = "evaluate" if rule.startswith("evaluate_") else rule  # every evaluation rule runs one job
        assert run.data.tags["mlflow.source.name"] == f"workflow_scripts/{script}.py"
    for run in by_rule["train"]:
        assert run.data.tags["experiment_id"] in {"simcse-tiny-s42", "compcse-tiny-s42", "bench-paradigm-mhe-tiny-s42"}
        if run.data.tags["experiment_id"] == "bench-paradigm-mhe-tiny-s42":
            assert len(client.get_metric_history(run.info.run_id, "loss.mhe")) >= 1  # the method's own term
            assert len(client.get_metric_history(run.info.run_id, "pos_cos")) >= 1  # and its scalars
            continue
        assert len(client.get_metric_history(run.info.run_id, "loss")) == 4
        assert len(client.get_metric_history(run.info.run_id, "loss.contrastive")) == 4
        assert len(client.get_metric_history(run.info.run_id, "lr")) == 4
        assert len(client.get_metric_history(run.info.run_id, "stsb_dev_spearman")) == 3
        assert run.data.params["training.batch_size"] == "16"
    for run in by_rule["evaluate_sts"]:
        assert {f"sts.{t}" for t in TASKS} <= set(run.data.metrics)
    (table_run,) = [r for r in by_rule["table"] if r.info.run_name == "table:table1"]
    assert {a.path for a in client.list_artifacts(table_run.info.run_id)} >= {"table1.csv", "table1.md"}


def test_other_tables(workflow_run):
    workdir, _ = workflow_run
    expected = {"table_transfer": ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC", "Avg"],
                "table_beir": ["toy", "Avg"], "table_retrieval": ["R@1", "R@5", "R@10"],
                "table_geometry": ["alignment", "uniformity"]}
    for name, cols in expected.items():
        df = pd.read_csv(workdir / "results" / f"{name}.csv")
        assert list(df["experiment"]) == IDS, name
        for col in cols:
            assert df[col].notna().all(), (name, col)
    transfer = pd.read_csv(workdir / "results" / "table_transfer.csv")
    assert transfer[["MR", "SUBJ", "MPQA"]].to_numpy().min() > 0
    geometry = pd.read_csv(workdir / "results" / "table_geometry.csv")
    assert (geometry["alignment"] >= 0).all() and (geometry["uniformity"] <= 0).all()


def test_methods_table_compares_every_method_under_one_protocol(workflow_run):
    workdir, _ = workflow_run
    df = pd.read_csv(workdir / "results" / "table_methods.csv")
    # the table1 experiments where settings match; the modified MHE of the gradient paradigm gets its own
    assert list(df["experiment"]) == ["simcse-tiny", "compcse-tiny", "bench-paradigm-mhe-tiny"]
    for col in TASKS + ["STS avg", "STS-B dev", "transfer avg"]:
        assert df[col].notna().all()
    for _, row in df.iloc[1:].iterrows():
        assert row["baseline"] == "simcse-tiny"
        for prefix in ("sts_", "dev_", "transfer_"):
            assert row[f"{prefix}diff_ci_low"] <= row[f"{prefix}diff"] <= row[f"{prefix}diff_ci_high"]
    md = (workdir / "results" / "table_methods.md").read_text()
    assert "vs SimCSE: STS avg [CI]" in md and "vs SimCSE: transfer avg [CI]" in md


def test_rerun_and_evaluation_change_never_retrain(workflow_run):
    import json

    workdir, _ = workflow_run
    assert "Nothing to be done" in snakemake(workdir, "-n", *[f"results/{t}.csv" for t in TABLES]).stdout
    # A changed transfer setting re-runs that evaluation only (each experiment's, and the table),
    # from cached embeddings: one of them run, the rest planned.
    write_config(workdir, evaluation={"batch_size": 64, "transfer": {"mode": "test"},
                                      "beir": {"datasets": ["toy"], "chunk_size": 16, "k": 100, "max_len": 64}})
    console = snakemake(workdir, "--cores", "2", "results/experiments/simcse-tiny-s42/transfer.json").stderr
    result = json.loads((workdir / "results/experiments/simcse-tiny-s42/transfer.json").read_text())
    assert result["mode"] == "test" and result["cache_hits"] == 1 and result["cache_misses"] == 0
    assert result["model_loaded"] is False  # every sentence cached: the checkpoint is never loaded
    assert [x.split("start  ")[1] for x in console.splitlines() if "] start  " in x] == [
        "evaluate_transfer exp=simcse-tiny-s42"]
    assert planned(workdir, ["results/table_transfer.csv"]) == {
        job("evaluate_transfer", exp="untrained-tiny"), job("evaluate_transfer", exp="compcse-tiny-s42"),
        job("table", table="table_transfer")}
    # The evaluation batch size and the embedding cache change how encoding runs: nothing reruns.
    write_config(workdir, evaluation={"batch_size": 7, "cache": False})
    assert "Nothing to be done" in snakemake(workdir, "-n", "results/table1.csv").stdout
    write_config(workdir, training={"batch_size": 16, "max_len": 32, "max_steps": 8, "lr": 2e-4,
                                    "eval_steps": 4, "log_steps": 2})
    out = snakemake(workdir, "-n", "results/table1.csv").stdout
    assert "train" in out and "resolve_plm" not in out and "prepare_corpus" not in out
    # One experiment's training setting retrains that experiment only.
    write_config(workdir, experiments={"compcse-tiny": {"plm": "tiny", "method": "compcse", "training": {"lr": 3e-4}}})
    out = snakemake(workdir, "-n", "results/table1.csv").stdout
    assert "exp=compcse-tiny-s42" in out and "exp=simcse-tiny-s42" not in out
    # Switching resumable checkpoints on changes how training runs, not what it computes.
    write_config(workdir, training={"batch_size": 16, "max_len": 32, "max_steps": 8, "lr": 1e-4,
                                    "eval_steps": 4, "log_steps": 2, "checkpoint_steps": 3})
    assert "Nothing to be done" in snakemake(workdir, "-n", "results/table1.csv").stdout
    # So does the number of processes (and nodes) a training job runs on.
    write_config(workdir, training={"batch_size": 16, "max_len": 32, "max_steps": 8, "lr": 1e-4,
                                    "eval_steps": 4, "log_steps": 2, "devices": 2, "nodes": 1,
                                    "dist_timeout_s": 600})
    assert "Nothing to be done" in snakemake(workdir, "-n", "results/table1.csv").stdout
    # And gradient caching: the same experiment ids, nothing to rebuild.
    write_config(workdir, training={"batch_size": 16, "max_len": 32, "max_steps": 8, "lr": 1e-4,
                                    "eval_steps": 4, "log_steps": 2, "chunk_size": 4})
    assert "Nothing to be done" in snakemake(workdir, "-n", "results/table1.csv").stdout
    write_config(workdir)


def planned(workdir: Path, targets: list[str]) -> set[tuple[str, tuple]]:
    """The jobs a dry run plans: (rule, its wildcards as sorted (name, value) pairs)."""
    from cselab.pipeline.cost import parse_dry_run

    out = snakemake(workdir, "-n", "--", *targets).stdout
    if "Nothing to be done" in out:
        return set()
    return {(j.rule, tuple(sorted(j.wildcards.items()))) for j in parse_dry_run(out)}


def job(rule: str, **wildcards) -> tuple[str, tuple]:
    return rule, tuple(sorted(wildcards.items()))


def test_a_change_plans_exactly_the_jobs_it_affects(workflow_run):
    """Dry runs on the built workflow: adding a BEIR dataset plans its own preparation and
    evaluations and the table that shows it; adding a seed, that seed's runs and the tables; one
    experiment's learning rate, its run, its evaluations and its tables; logging, tracking,
    resources, processes and the evaluation batch size, nothing."""
    workdir, _ = workflow_run
    targets = [f"results/{t}.csv" for t in TABLES[:-1]]  # the methods table's experiments follow the settings
    trained = ["simcse-tiny-s42", "compcse-tiny-s42"]
    evals = [*EVALS, "evaluate_stsb_dev"]
    snakemake(workdir, "--cores", "2", "--", *targets)  # up to date whatever the tests before changed
    assert planned(workdir, targets) == set()
    make_beir(workdir / "data" / "beir" / "toy2", n_docs=30, n_queries=5, seed=4)
    beir = {"datasets": ["toy", "toy2"], "chunk_size": 16, "k": 100, "max_len": 64}
    write_config(workdir, evaluation={"batch_size": 64, "transfer": {"mode": "fast"}, "beir": beir})
    assert planned(workdir, targets) == {job("prepare_beir", dataset="toy2"), job("table", table="table_beir"),
                                         *(job("evaluate_beir", dataset="toy2", exp=e)
                                           for e in ["untrained-tiny", *trained])}
    write_config(workdir)
    cfg = read_yaml(workdir / "test.yaml")
    (workdir / "test.yaml").write_text(yaml.safe_dump({**cfg, "seeds": [42, 43]}))
    jobs = planned(workdir, targets)
    assert {job("train", exp="simcse-tiny-s43"), job("train", exp="compcse-tiny-s43")} <= jobs
    assert {rule for rule, wc in jobs if not dict(wc).get("exp", "").endswith("-s43")} == {"table"}
    write_config(workdir, experiments={"simcse-tiny": {"plm": "tiny", "method": "simcse", "training": {"lr": 3e-4}}})
    jobs = planned(workdir, targets)
    assert job("train", exp="simcse-tiny-s42") in jobs and {r for r, _ in jobs} <= {"train", "table", *evals}
    assert all(dict(wc).get("exp") == "simcse-tiny-s42" for rule, wc in jobs if rule != "table"), jobs
    quiet = {"training": {"batch_size": 16, "max_len": 32, "max_steps": 8, "lr": 1e-4, "eval_steps": 4,
                          "log_steps": 1, "checkpoint_steps": 2, "compile": True, "dev_batch_size": 3,
                          "owner_wait_s": 5}, "mlflow": {"experiment_name": "another-name"},
             "evaluation": {"batch_size": 5, "max_tokens": 64, "cache": False, "transfer": {"mode": "fast"},
                            "beir": {"datasets": ["toy"], "chunk_size": 16, "k": 100, "max_len": 64, "query_block": 2,
                                     "precision": "fp32", "resources": {"toy": {"mem_mb": 1000}}}},
             "spans": {"n_process": 2}}
    write_config(workdir, **quiet)
    try:
        assert planned(workdir, targets) == set()
    finally:
        write_config(workdir)


def test_bad_config_is_one_clear_message(workflow_run):
    workdir, _ = workflow_run
    write_config(workdir, training={"learnig_rate": 1e-4})
    proc = snakemake(workdir, "-n", "results/table1.csv", check=False)
    write_config(workdir)
    assert proc.returncode != 0
    assert "unknown config key 'training.learnig_rate'" in proc.stdout + proc.stderr
    assert clean_console(proc.stdout + proc.stderr, "unknown config key 'training.learnig_rate'"), proc.stderr
    # the run's console (not a dry run) says the config message alone too
    write_config(workdir, training={"learnig_rate": 1e-4})
    run = snakemake(workdir, "--cores", "1", "results/table1.csv", check=False)
    write_config(workdir)
    assert run.returncode != 0 and clean_console(run.stderr, "unknown config key 'training.learnig_rate'"), run.stderr


def test_adding_a_table_never_retrains(workflow_run):
    workdir, _ = workflow_run
    cfg = read_yaml(workdir / "test.yaml")
    cfg["tables"] = {"table1": {"experiments": IDS}}
    (workdir / "test.yaml").write_text(yaml.safe_dump(cfg))
    out = snakemake(workdir, "-n", "results/table1.csv").stdout
    write_config(workdir)
    assert "Nothing to be done" in out


def test_missing_data_is_one_clear_message(tmp_path, tiny_bert):
    (tmp_path / "data").mkdir()
    (tmp_path / "tiny-bert").symlink_to(tiny_bert)
    write_config(tmp_path)
    proc = snakemake(tmp_path, "--cores", "1", "resources/corpus/corpus.txt", check=False)
    assert proc.returncode != 0
    assert "cselab error in rule prepare_corpus:" in proc.stderr
    assert "corpus.txt" in proc.stderr
    # once, with the job and its log, and none of Snakemake's or Python's frames
    assert clean_console(proc.stderr, "cselab error in rule prepare_corpus:"), proc.stderr
    assert "(job prepare_corpus; log logs/prepare_corpus.log)" in proc.stderr


def test_lint_is_clean():
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--lint", "-s", str(ROOT / "Snakefile")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0 and "good condition" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_the_changelogs_commands_keep_evaluations_built_with_older_params(workflow_run):
    """An evaluation built before its params took their present form (here: the metadata of
    one STS result rewritten to an older form, the evaluation batch size and cache in its encoder
    settings) plans a rerun; the two commands of CHANGELOG.md show that nothing else is out of date,
    then mark exactly that job and the tables after it current, changing no result's content."""
    import base64
    import json

    workdir, _ = workflow_run
    result = "results/experiments/simcse-tiny-s42/sts.json"
    meta = workdir / ".snakemake" / "metadata" / base64.urlsafe_b64encode(result.encode()).decode()
    record = json.loads(meta.read_text())
    record["params"] = ["'simcse-tiny-s42'", "{'pooler': 'cls', 'max_len': 512, 'batch_size': 64, 'cache': True}"]
    meta.write_text(json.dumps(record))
    targets = ["results/table1.csv"]
    assert planned(workdir, targets) == {job("evaluate_sts", exp="simcse-tiny-s42"), job("table", table="table1")}
    assert "Nothing to be done" in snakemake(workdir, "-n", "--rerun-triggers", "mtime", "input", "software-env",
                                             "--", *targets).stdout
    contents = {p: p.read_bytes() for p in (workdir / "results").rglob("*.json")}
    snakemake(workdir, "--touch", "--cores", "1", "--", *targets)
    assert planned(workdir, targets) == set()
    assert {p: p.read_bytes() for p in (workdir / "results").rglob("*.json")} == contents


def test_a_deleted_experiment_is_named_with_the_command_that_retrains_it(workflow_run):
    """Snakemake does not rebuild what is missing under a table that exists; the invocation says
    so, naming the experiment and the targets that retrain it, and those targets do."""
    import shutil

    workdir, _ = workflow_run
    folder = workdir / "results" / "experiments" / "simcse-tiny-s42"
    aside = workdir / "simcse-aside"
    shutil.move(folder, aside)
    try:
        proc = snakemake(workdir, "-n", "results/table1.csv")
        assert "Nothing to be done" in proc.stdout
        hint = [line for line in proc.stderr.splitlines() if "simcse-tiny-s42/ was deleted" in line]
        assert len(hint) == 1 and "results/table1.csv" in hint[0], proc.stderr[-2000:]
        command = hint[0].split("snakemake ... ")[1].split()
        assert {rule for rule, _ in planned(workdir, command)} >= {"train", "evaluate_sts", "table"}
    finally:
        shutil.move(aside, folder)


def test_a_beir_corpus_cut_after_preparation_stops_the_job_that_reads_it(tmp_path_factory, tmp_path):
    """The toy BEIR corpus cut after a whole line (it still parses): the evaluation that reads it
    stops naming the file, the sizes and the command, instead of scoring the documents left; the
    other experiments' results stay."""
    from tests.built import copy_built

    workdir = copy_built(built_tables(tmp_path_factory), tmp_path / "project")
    corpus = workdir / "data/beir/toy/corpus.jsonl"
    whole = corpus.read_bytes()
    corpus.write_bytes(b"".join(whole.splitlines(keepends=True)[:-3]))
    kept = (workdir / "results/experiments/untrained-tiny/beir/toy.json").read_bytes()
    target = "results/experiments/simcse-tiny-s42/beir/toy.json"
    proc = snakemake(workdir, "--cores", "1", "--forcerun", target, "--", target, check=False)
    assert proc.returncode != 0, proc.stderr[-2000:]
    (line,) = [x for x in proc.stderr.splitlines() if "cselab error in rule evaluate_beir" in x]
    assert (f"data/beir/toy/corpus.jsonl changed after rule prepare_beir prepared it: expected {len(whole)} bytes, found "
            f"{corpus.stat().st_size} bytes") in line
    assert "--forcerun resources/beir/toy/manifest.json" in line and "Traceback" not in proc.stderr
    assert (workdir / "results/experiments/untrained-tiny/beir/toy.json").read_bytes() == kept
