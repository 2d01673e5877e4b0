"""A rule job's MLflow run (cselab.pipeline.tracking.mlflow_run) in a real local store: the tags it
names itself, and nothing asked of MLflow's run-context providers (their Databricks checks import
IPython: 0.7 CPU-s a job). The workflow's runs, one per job, are tests/test_workflow.py's."""

from __future__ import annotations

import getpass

import pytest

from cselab.pipeline.tracking import RESUMED_TAG, mlflow_run


@pytest.fixture
def no_run_context(monkeypatch):
    from mlflow.tracking.context import registry

    def refuse(tags=None):
        raise AssertionError("mlflow.start_run asked the run-context providers")

    monkeypatch.setattr(registry, "resolve_tags", refuse)


def test_a_jobs_run_has_its_own_tags_and_asks_no_run_context(tmp_path, monkeypatch, no_run_context):
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with mlflow_run(uri=uri, experiment_name="cselab", rule="table", label="table1", params={"kind": "methods"},
                    source="workflow_scripts/table.py", tags={"snakemake.jobid": "3"}) as run:
        run.log_metrics({"rows": 3})
    got = MlflowClient(uri).get_run(run.run_id)
    assert got.info.status == "FINISHED" and got.info.run_name == "table:table1"
    assert got.data.metrics == {"rows": 3.0} and got.data.params == {"kind": "methods"}
    tags = got.data.tags
    assert (tags["rule"], tags["mlflow.user"], tags["snakemake.jobid"]) == ("table", getpass.getuser(), "3")
    assert (tags["mlflow.source.name"], tags["mlflow.source.type"]) == ("workflow_scripts/table.py", "JOB")
    assert tags["mlflow.source.git.commit"] == tags["git_commit"].removesuffix("+dirty")
    assert "version.mlflow" in tags


def test_a_resumed_run_is_the_interrupted_one_reopened(tmp_path, monkeypatch, no_run_context):
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with pytest.raises(KeyboardInterrupt):
        with mlflow_run(uri=uri, experiment_name="cselab", rule="train", experiment_id="simcse-tiny-s42",
                        source="workflow_scripts/train.py") as first:
            raise KeyboardInterrupt
    with mlflow_run(uri=uri, experiment_name="cselab", rule="train", experiment_id="simcse-tiny-s42",
                    source="workflow_scripts/train.py", resume=first.run_id) as second:
        second.log_metrics({"loss": 0.5}, step=2)
    got = MlflowClient(uri).get_run(first.run_id)
    assert second.run_id == first.run_id and got.info.status == "FINISHED"
    assert got.data.tags[RESUMED_TAG] == "1" and got.info.run_name == "train:simcse-tiny-s42"
