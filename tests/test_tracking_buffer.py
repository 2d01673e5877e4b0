"""A training job's MLflow buffer (cselab.pipeline.tracking.Buffer): what an outage kept from the
server is replayed in order, one run's metric batches merged into requests of at most MLflow's
1,000 metrics, the rest kept on an outage, a rejected call dropped alone. The outage itself, with
a real server killed and restarted, is tests/test_faults.py's."""

from __future__ import annotations

import json

import pytest
import requests
from mlflow.exceptions import MlflowException

from cselab.pipeline import tracking
from cselab.pipeline.tracking import MAX_REPLAY_METRICS, Buffer, replay_file


class FakeClient:
    """Records each call; ``fail`` maps a call's position (0-based, all clients together) to the
    exception it raises."""
    calls: list = []
    fail: dict = {}

    def __init__(self, uri):
        self.uri = uri

    def _call(self, *call):
        n = len(FakeClient.calls)
        FakeClient.calls.append(call)
        if n in FakeClient.fail:
            raise FakeClient.fail[n]

    def log_batch(self, run_id, metrics):
        self._call("log_batch", self.uri, run_id, [(m.key, m.step) for m in metrics])

    def set_tag(self, run_id, key, value):
        self._call("set_tag", self.uri, run_id, key)

    def set_terminated(self, run_id, status):
        self._call("end_run", self.uri, run_id, status)


@pytest.fixture
def fake(monkeypatch):
    import mlflow

    FakeClient.calls, FakeClient.fail = [], {}
    monkeypatch.setattr(mlflow, "MlflowClient", FakeClient)
    return FakeClient


def steps(buf: Buffer, first: int, last: int, keys=("loss", "lr")) -> None:
    for step in range(first, last + 1):
        buf.add("log_batch", metrics=[[k, 0.5, 1000 + step, step] for k in keys])


def test_one_runs_metric_batches_go_as_few_requests_in_order(tmp_path, fake):
    buf = Buffer(tmp_path / "b.jsonl", "http://a", "run1")
    steps(buf, 1, 3)
    buf.add("set_tags", tags={"x": "1"})
    steps(buf, 4, 5)
    Buffer(buf.path, "http://a", "run2").add("log_batch", metrics=[["loss", 1.0, 1, 6]])
    buf.add("end_run", status="FINISHED")
    assert len(buf) == 8 and buf
    assert replay_file(buf.path) == 0 and not buf.path.exists() and not buf
    assert fake.calls == [
        ("log_batch", "http://a", "run1", [(k, s) for s in (1, 2, 3) for k in ("loss", "lr")]),
        ("set_tag", "http://a", "run1", "x"),
        ("log_batch", "http://a", "run1", [(k, s) for s in (4, 5) for k in ("loss", "lr")]),
        ("log_batch", "http://a", "run2", [("loss", 6)]),
        ("end_run", "http://a", "run1", "FINISHED")]


def test_a_request_holds_at_most_mlflows_limit(tmp_path, fake):
    buf = Buffer(tmp_path / "b.jsonl", "http://a", "run1")
    steps(buf, 1, 1200, keys=("loss",))
    assert replay_file(buf.path) == 0
    sizes = [len(c[3]) for c in fake.calls]
    assert sizes == [MAX_REPLAY_METRICS, 1200 - MAX_REPLAY_METRICS]
    assert [s for c in fake.calls for _, s in c[3]] == list(range(1, 1201))


def test_an_outage_keeps_the_request_that_failed_and_everything_after(tmp_path, fake):
    buf = Buffer(tmp_path / "b.jsonl", "http://a", "run1")
    steps(buf, 1, 2)
    buf.add("set_tags", tags={"x": "1"})
    steps(buf, 3, 4)
    fake.fail = {1: requests.ConnectionError("refused")}  # the tag: the server went away again
    assert replay_file(buf.path) == 3
    left = [json.loads(line) for line in buf.path.read_text().splitlines()]
    assert [o["op"] for o in left] == ["set_tags", "log_batch", "log_batch"]
    fake.fail = {}
    assert replay_file(buf.path) == 0
    assert [c[0] for c in fake.calls] == ["log_batch", "set_tag", "set_tag", "log_batch"]


def test_a_rejected_merged_request_is_sent_again_call_by_call(tmp_path, fake, caplog):
    buf = Buffer(tmp_path / "b.jsonl", "http://a", "run1")
    steps(buf, 1, 3)
    rejected = MlflowException("INVALID_PARAMETER_VALUE: bad metric")
    fake.fail = {0: rejected, 2: rejected}  # the merged request, then step 2 alone
    assert replay_file(buf.path) == 0
    assert [[s for _, s in c[3]] for c in fake.calls] == [[1, 1, 2, 2, 3, 3], [1, 1], [2, 2], [3, 3]]
    assert [r.message for r in caplog.records if "rejected" in r.message] == [
        "MLflow rejected a buffered log_batch for run run1 (INVALID_PARAMETER_VALUE: bad metric): dropped"]


def test_metrics_replayed_into_a_real_store(tmp_path):
    """The merged requests against MLflow's own SQL store: every step's metrics, once."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("buffer"))
    buf = Buffer(tmp_path / "b.jsonl", uri, run.info.run_id)
    steps(buf, 1, 700)
    buf.add("end_run", status="FINISHED")
    assert replay_file(buf.path) == 0
    for key in ("loss", "lr"):
        assert [m.step for m in client.get_metric_history(run.info.run_id, key)] == list(range(1, 701))
    assert client.get_run(run.info.run_id).info.status == "FINISHED"


def test_the_buffer_is_asked_at_each_step_by_its_size(tmp_path, monkeypatch):
    """During an outage every step asks whether calls are waiting: one stat, not a read of the file."""
    buf = Buffer(tmp_path / "b.jsonl", "http://a", "run1")
    assert not buf
    steps(buf, 1, 1)
    monkeypatch.setattr(tracking, "open", lambda *a, **k: pytest.fail("read the file"), raising=False)
    assert buf
