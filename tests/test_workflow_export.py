"""The sharing rules through Snakemake on a tiny random BERT and synthetic data: target
`exports` (MTEB result files, the MTEB check, model cards, ONNX, export folders), their MLflow
runs, and rule push against a loopback fake Hub."""

import json
import os

import numpy as np
import pytest

from tests.hub_server import FakeHub
from tests.test_workflow import built_tables, snakemake, write_config

IDS = ["untrained-tiny", "simcse-tiny"]
TOKEN = "hf_test_token_123"
PATCH = {"tables": {"table1": {"experiments": IDS}, "table_transfer": {"experiments": ["simcse-tiny"]}},
         "export": {"tables": ["table1"], "mteb_check": {"experiments": IDS, "tolerance": 0.01}}}


def push(workdir, hub: FakeHub, token: str, repo_id: str, *args: str):
    """Rule push with the hub section in the config file and the token in the environment."""
    write_config(workdir, **PATCH, hub={"repo_id": repo_id, "token_env": "CSELAB_HUB_TOKEN", "endpoint": hub.endpoint,
                                        "private": True, "revision": "main"})
    env = {"HF_HUB_OFFLINE": "0", "CSELAB_HUB_TOKEN": token}
    return snakemake(workdir, "--cores", "1", "results/hub/simcse-tiny-s42.json", *args, env=env, check=False)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A copy of tests/test_workflow.py's built tables (built once per session, tests/built.py),
    with this file's tables and exports; only the changed transfer table and the exports run."""
    from tests.built import copy_built

    workdir = copy_built(built_tables(tmp_path_factory), tmp_path_factory.mktemp("wf-export") / "project")
    write_config(workdir, **PATCH)
    # the transfer table first: its results are then computed, and the MTEB files and the card carry them
    table = snakemake(workdir, "--cores", "2", "results/table_transfer.csv").stderr
    assert [x.split("start  ")[1] for x in table.splitlines() if "] start  " in x] == ["table table=table_transfer"]
    plan = snakemake(workdir, "-n", "exports").stdout
    proc = snakemake(workdir, "--cores", "2", "exports")
    return workdir, plan, proc


def test_exports_are_planned_per_experiment(exported):
    _, plan, _ = exported
    for rule, count in {"mteb_results": 2, "model_card": 1, "export_onnx": 1, "export_model": 1, "mteb_check": 1}.items():
        assert any(line.split() == [rule, str(count)] for line in plan.splitlines()), (rule, plan[-1500:])


def test_mteb_files_match_our_results(exported):
    from cselab.export.mteb_results import read_main_scores

    workdir, _, _ = exported
    for exp in ("untrained-tiny", "simcse-tiny-s42"):
        sts = json.loads((workdir / f"results/experiments/{exp}/sts.json").read_text())
        scores = read_main_scores(workdir / "results" / "mteb" / exp)
        assert scores["STSBenchmark"] == pytest.approx(sts["scores"]["STS-B"] / 100, abs=1e-6)
        assert scores["STS12"] == pytest.approx(sts["scores"]["STS12"] / 100, abs=1e-6)
    transfer = json.loads((workdir / "results/experiments/simcse-tiny-s42/transfer.json").read_text())
    assert read_main_scores(workdir / "results/mteb/simcse-tiny-s42")["SentEvalMR"] == pytest.approx(
        transfer["scores"]["MR"] / 100)


def test_mteb_check_runs_on_every_checkpoint(exported):
    """The rule's wiring: both checkpoints, every task, MTEB's scores beside ours. A tiny random
    BERT gives near-identical embeddings (cosines agree to ~1e-7, yet ties reorder), so the
    0.01 agreement is asserted on the real MiniLM and SentEval files (tests/test_export.py)."""
    import pandas as pd

    workdir, _, _ = exported
    df = pd.read_csv(workdir / "results" / "mteb_check.csv")
    assert set(df["experiment"]) == {"untrained-tiny", "simcse-tiny-s42"} and len(df) == 14
    sts = json.loads((workdir / "results/experiments/simcse-tiny-s42/sts.json").read_text())
    mine = df[df["experiment"] == "simcse-tiny-s42"].set_index("task")["cselab"]
    assert mine.to_dict() == pytest.approx(sts["scores"], abs=1e-5)
    assert df["diff"].abs().max() < 1.0 and "tolerance 0.01" in (workdir / "results/mteb_check.md").read_text()


def test_export_folder_loads_and_matches_our_encoder(exported):
    from sentence_transformers import SentenceTransformer

    from cselab.export.hub import check_export
    from cselab.models.encoder import load_encoder

    workdir, _, _ = exported
    folder = workdir / "results" / "export" / "simcse-tiny-s42"
    assert (folder / "onnx" / "model.onnx").is_file() and not (folder / "head.pt").exists()
    assert not (folder / "training").exists()  # the copies of the training's curve and summary stay home
    meta = check_export(folder)  # the card's front matter, as the push rule reads it
    assert meta["library_name"] == "sentence-transformers" and "base_model" not in meta  # a local PLM: no hub id
    sts = json.loads((workdir / "results/experiments/simcse-tiny-s42/sts.json").read_text())
    values = {r["dataset"]["type"]: r["metrics"][0]["value"] for r in meta["model-index"][0]["results"]}
    assert values["senteval/STS-B"] == pytest.approx(sts["scores"]["STS-B"], abs=0.005)
    assert "senteval/MR" in values  # the transfer results were computed, so the card reports them
    sentences = ["a man plays a guitar", "the cat sleeps in the garden"]
    ours = load_encoder(workdir / "results/experiments/simcse-tiny-s42/model", pooler="cls").encode(sentences)
    theirs = SentenceTransformer(str(folder), device="cpu").encode(sentences)
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
    check = json.loads((workdir / "results/onnx/simcse-tiny-s42/check.json").read_text())
    assert check["equal"] and check["max_abs_diff"] <= 1e-4 and check["sentences"] > 10


def test_export_runs_in_mlflow(exported):
    from mlflow.tracking import MlflowClient

    workdir, _, _ = exported
    client = MlflowClient(f"sqlite:///{workdir}/results/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("cselab-test").experiment_id])
    by_rule = {}
    for run in runs:
        by_rule.setdefault(run.data.tags["rule"], []).append(run)
    assert {r: len(by_rule[r]) for r in ("mteb_results", "mteb_check", "model_card", "export_onnx", "export_model")} == {
        "mteb_results": 2, "mteb_check": 1, "model_card": 1, "export_onnx": 1, "export_model": 1}
    assert all(r.data.tags["mlflow.source.name"] == "workflow_scripts/export.py" for r in by_rule["mteb_results"])
    # the MTEB files are artifacts of the evaluation runs they came from, the card of the training run
    sts_run = next(r for r in by_rule["evaluate_sts"] if r.data.tags["experiment_id"] == "simcse-tiny-s42")
    assert "mteb/STSBenchmark.json" in {a.path for a in client.list_artifacts(sts_run.info.run_id, "mteb")}
    (train_run,) = [r for r in by_rule["train"] if r.data.tags["experiment_id"] == "simcse-tiny-s42"]
    assert {a.path for a in client.list_artifacts(train_run.info.run_id, "card")} == {"card/simcse-tiny-s42.md"}


def test_push_uploads_the_export_to_the_hub(exported):
    workdir, _, _ = exported
    hub = FakeHub(token=TOKEN)
    try:
        proc = push(workdir, hub, TOKEN, "me/cselab-{exp}")
        assert proc.returncode == 0, proc.stderr[-3000:]
    finally:
        hub.close()
    receipt = json.loads((workdir / "results/hub/simcse-tiny-s42.json").read_text())
    assert receipt["repo_id"] == "me/cselab-simcse-tiny-s42" and TOKEN not in json.dumps(receipt)
    files = hub.repos["me/cselab-simcse-tiny-s42"].files
    folder = workdir / "results" / "export" / "simcse-tiny-s42"
    assert files["README.md"] == (folder / "README.md").read_bytes()
    assert files["onnx/model.onnx"] == (folder / "onnx" / "model.onnx").read_bytes()
    assert all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in hub.requests)


def test_push_without_token_is_one_clear_message(exported):
    workdir, _, _ = exported
    hub = FakeHub(token=TOKEN)
    try:
        proc = push(workdir, hub, "", "me/x", "--forcerun", "push")
    finally:
        hub.close()
    assert proc.returncode != 0 and hub.requests == []
    assert "cselab error in rule push" in proc.stderr and "CSELAB_HUB_TOKEN" in proc.stderr
    assert "Traceback" not in proc.stderr.split("cselab error in rule push")[1].split("\n\n")[0]
    assert os.path.exists(workdir / "results/export/simcse-tiny-s42/README.md")  # nothing computed is lost
