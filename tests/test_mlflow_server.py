"""The workflow against a real ``mlflow server`` on 127.0.0.1, and what happens when it is down.

One lean server (one worker, SQLite backend, proxied artifacts in a temporary folder) serves
the module. A tiny workflow (resolve the PLM, prepare SentEval, evaluate the untrained tiny
BERT on STS, Table 1) logs to it through ``MLFLOW_TRACKING_URI``; the runs are read back
through the REST API with plain ``urllib``, not the MLflow client. A closed port stands in for
a server that is down: the workflow stops before any job with one clear message, or, with
``mlflow.fallback: local``, logs to the local store with a tag naming the server.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import make_workflow_data, run_snakemake
from tests.test_workflow import ROOT, write_config

pytest.importorskip("uvicorn", reason="mlflow server needs uvicorn (mlflow[server] / full mlflow)")

EXPERIMENT = "cselab-test"
DYING = "cselab-test-dying"  # the mid-run failure test's own experiment
UNTRAINED = "untrained-tiny"
TASKS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R"]
UNREACHABLE = "is not reachable"
START_TIMEOUT = 90  # seconds for the server to answer /health (2-core CI machines are slow)

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy


def free_port() -> int:
    """A port nothing listens on (bound, read and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: dict | None = None, timeout: float = 30) -> bytes:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with _OPENER.open(req, timeout=timeout) as resp:
        return resp.read()


def api(base: str, endpoint: str, params: dict | None = None, body: dict | None = None) -> dict:
    url = f"{base}/api/2.0/mlflow/{endpoint}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    return json.loads(http("POST" if body is not None else "GET", url, body))


def mlflow_server_cmd(port: int, root: Path) -> list[str]:
    return [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
            "--backend-store-uri", f"sqlite:///{root}/mlflow.db",
            "--serve-artifacts", "--artifacts-destination", str(root / "artifacts"), "--workers", "1"]


def stop(proc: subprocess.Popen) -> None:
    """Stop the server and its uvicorn worker (their own process group), hard after 10 s."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def server_process(tmp_path_factory):
    """A lean ``mlflow server`` starting in the background: (process, base URL, its folder)."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
               MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")  # no background job runner
    with (root / "server.log").open("w") as log:
        proc = subprocess.Popen(mlflow_server_cmd(port, root), cwd=root, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc, f"http://127.0.0.1:{port}", root
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def mlflow_server(server_process):
    """``http://127.0.0.1:<port>`` once the server answers /health; skips with the reason if it cannot start."""
    proc, base, root = server_process
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if proc.poll() is not None:
            pytest.skip(f"mlflow server exited with {proc.returncode} before answering: "
                        f"{(root / 'server.log').read_text()[-1500:]}")
        try:
            if http("GET", f"{base}/health", timeout=2).strip() == b"OK":
                return base
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.skip(f"mlflow server on {base} did not answer /health within {START_TIMEOUT} s: "
                        f"{(root / 'server.log').read_text()[-1500:]}")
        time.sleep(0.5)


def snakemake(workdir: Path, uri: str, *targets: str) -> tuple[subprocess.CompletedProcess, float]:
    """Run the workflow with ``MLFLOW_TRACKING_URI=uri``; returns the process and its seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(MLFLOW_TRACKING_URI=uri, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(workdir / "test.yaml"), "--cores", "2", "--", *targets]
    tic = time.monotonic()
    proc = run_snakemake(cmd, env, timeout=600)
    return proc, time.monotonic() - tic


def configure(workdir: Path, **mlflow) -> None:
    """The tiny workflow config: Table 1 holds only the untrained tiny BERT (no training)."""
    write_config(workdir, mlflow={"experiment_name": EXPERIMENT, **mlflow},
                 experiments={UNTRAINED: {"plm": "tiny", "method": "untrained"},
                              "untrained-tiny-b": {"plm": "tiny", "method": "untrained"}},
                 tables={"table1": {"experiments": [UNTRAINED]}})


@pytest.fixture(scope="module")
def server_run(server_process, tmp_path_factory, request):
    """The tiny workflow logged to the server (the data is made while the server starts)."""
    workdir = tmp_path_factory.mktemp("wf-server")
    make_workflow_data(workdir, 50)
    configure(workdir)
    proc, _ = snakemake(workdir, request.getfixturevalue("mlflow_server"), "results/table1.csv")
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return workdir


def runs_by_rule(base: str) -> tuple[str, dict[str, list[dict]]]:
    exp = api(base, "experiments/get-by-name", {"experiment_name": EXPERIMENT})["experiment"]
    runs = api(base, "runs/search", body={"experiment_ids": [exp["experiment_id"]], "max_results": 1000})["runs"]
    out: dict[str, list[dict]] = {}
    for run in runs:
        out.setdefault({t["key"]: t["value"] for t in run["data"]["tags"]}["rule"], []).append(run)
    return exp["experiment_id"], out


def kv(run: dict, section: str) -> dict:
    return {x["key"]: x["value"] for x in run["data"].get(section, [])}


def test_runs_read_back_through_rest_api(mlflow_server, server_run):
    workdir = server_run
    assert not (workdir / "results" / "mlflow.db").exists(), "the jobs must log to the server, not the local store"
    _, by_rule = runs_by_rule(mlflow_server)
    assert {r: len(v) for r, v in by_rule.items()} == {"resolve_plm": 1, "senteval_reads": 1,
                                                         "evaluate_sts": 1, "table": 1, "invocation": 1}
    for rule, (run,) in by_rule.items():
        tags = kv(run, "tags")
        assert run["info"]["status"] == "FINISHED", rule
        assert tags["rule"] == rule and tags["git_commit"] and tags["version.torch"] and tags["version.mlflow"]
        assert "cselab.tracking_fallback" not in tags
        assert run["info"]["artifact_uri"].startswith("mlflow-artifacts:/"), "artifacts go through the server"

    (sts_run,) = by_rule["evaluate_sts"]
    assert kv(sts_run, "tags")["experiment_id"] == UNTRAINED
    assert sts_run["info"]["run_name"] == f"evaluate_sts:{UNTRAINED}"
    params = kv(sts_run, "params")
    assert params["evaluation.pooler"] == "cls" and params["evaluation.batch_size"] == "64"
    result_path = workdir / "results" / "experiments" / UNTRAINED / "sts.json"
    result = json.loads(result_path.read_text())
    metrics = {m["key"]: m["value"] for m in sts_run["data"]["metrics"]}
    for task in TASKS:
        assert metrics[f"sts.{task}"] == pytest.approx(result["scores"][task])
    assert metrics["avg"] == pytest.approx(result["avg"])
    history = api(mlflow_server, "metrics/get-history", {"run_id": sts_run["info"]["run_id"], "metric_key": "sts.STS-B"})
    assert [m["value"] for m in history["metrics"]] == [pytest.approx(result["scores"]["STS-B"])]

    # Artifacts: listed by the tracking API, downloaded through the artifact proxy, same bytes.
    listed = api(mlflow_server, "artifacts/list", {"run_id": sts_run["info"]["run_id"]})
    assert [f["path"] for f in listed["files"]] == ["sts.json"]
    rel = sts_run["info"]["artifact_uri"].removeprefix("mlflow-artifacts:/").strip("/")
    assert http("GET", f"{mlflow_server}/api/2.0/mlflow-artifacts/artifacts/{rel}/sts.json") == result_path.read_bytes()
    (table_run,) = by_rule["table"]
    listed = api(mlflow_server, "artifacts/list", {"run_id": table_run["info"]["run_id"]})
    assert {f["path"] for f in listed["files"]} == {"table1.csv", "table1.md"}
    csv = http("GET", f"{mlflow_server}/get-artifact?" + urllib.parse.urlencode(
        {"path": "table1.csv", "run_uuid": table_run["info"]["run_id"]}))
    assert csv == (workdir / "results" / "table1.csv").read_bytes()
    assert kv(table_run, "params")["experiments"] == json.dumps([UNTRAINED])


def test_unreachable_server_fails_before_the_job_starts(monkeypatch):
    from cselab.errors import TrackingError
    from cselab.pipeline.tracking import mlflow_run, resolve

    uri = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    tic = time.monotonic()
    with pytest.raises(TrackingError) as err:
        resolve(uri)
    assert time.monotonic() - tic < 15
    assert str(err.value) == (f"MLflow tracking server {uri} is not reachable (Connection refused); start it, "
                              "unset MLFLOW_TRACKING_URI to use the local store sqlite:///results/mlflow.db, "
                              "or set mlflow.fallback: local in the config")
    ran = []
    with pytest.raises(TrackingError, match=UNREACHABLE):
        with mlflow_run(uri=uri, experiment_name=EXPERIMENT, rule="evaluate_sts"):
            ran.append(True)  # the job's work: never reached
    assert not ran


def test_workflow_fails_fast_and_keeps_results_when_server_is_down(server_run):
    workdir = server_run
    kept = {p: p.stat().st_mtime_ns for p in (workdir / "results").rglob("*") if p.is_file()}
    uri = f"http://127.0.0.1:{free_port()}"
    proc, seconds = snakemake(workdir, uri, "results/experiments/untrained-tiny-b/sts.json")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"MLflow tracking server {uri} {UNREACHABLE} (Connection refused)" in out, out[-3000:]
    assert "mlflow.fallback: local" in out
    assert seconds < 60, f"took {seconds:.0f} s"
    assert not (workdir / "results/experiments/untrained-tiny-b/sts.json").exists()
    assert {p: p.stat().st_mtime_ns for p in kept if p.exists()} == kept, "results of earlier jobs must stay"


def test_fallback_local_logs_to_local_store_with_a_tag(server_run):
    from mlflow.tracking import MlflowClient

    workdir = server_run
    uri = f"http://127.0.0.1:{free_port()}"
    configure(workdir, fallback="local")
    try:
        proc, _ = snakemake(workdir, uri, f"results/experiments/{UNTRAINED}/geometry.json")
    finally:
        configure(workdir)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert f"MLflow tracking server {uri} {UNREACHABLE}" in proc.stderr
    assert (workdir / "results" / "experiments" / UNTRAINED / "geometry.json").is_file()
    client = MlflowClient(f"sqlite:///{workdir}/results/mlflow.db")
    exp = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`cselab.tracking_fallback` = '{uri}'")
    # the invocation's too, and the preparation of what geometry reads (STS-B test)
    assert sorted(r.data.tags["rule"] for r in runs) == ["evaluate_geometry", "invocation", "senteval_reads"]
    runs = [r for r in runs if r.data.tags["rule"] != "invocation"]
    assert runs[0].info.status == "FINISHED" and "geometry.alignment" in runs[0].data.metrics
    assert runs[0].data.tags["experiment_id"] == UNTRAINED
    assert {a.path for a in client.list_artifacts(runs[0].info.run_id)} == {"geometry.json"}


class Forwarder:
    """A TCP relay 127.0.0.1:<port> -> ``target``; :meth:`close` is the server going away."""

    def __init__(self, target_port: int) -> None:
        self.target_port, self.socks, self.closed = target_port, [], False
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self.socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.closed = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close alone would not)
        except OSError:
            pass
        self.listener.close()
        for s in self.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def test_server_dying_mid_run_fails_the_job_with_a_clear_message(mlflow_server, monkeypatch):
    import mlflow

    from cselab.errors import TrackingError
    from cselab.pipeline.tracking import mlflow_run

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # fail in seconds, not minutes
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    relay = Forwarder(int(mlflow_server.rsplit(":", 1)[1]))
    uri = f"http://127.0.0.1:{relay.port}"
    try:
        with pytest.raises(TrackingError) as err:
            with mlflow_run(uri=uri, experiment_name=DYING, rule="evaluate_sts", label="dying") as run:
                run.log_metrics({"before": 1.0})
                relay.close()
                run.log_metrics({"after": 1.0})
    finally:
        relay.close()
        while mlflow.active_run():  # the run could not be ended on the dead server
            try:
                mlflow.end_run()
            except Exception:  # noqa: BLE001
                pass
        mlflow.set_tracking_uri(None)
    assert str(err.value).startswith(f"MLflow tracking server {uri} stopped answering during rule evaluate_sts (")
    assert "rerun it once the server is back" in str(err.value)
    # The part logged before the server went away is on the server.
    runs = api(mlflow_server, "runs/search", body={
        "experiment_ids": [api(mlflow_server, "experiments/get-by-name",
                               {"experiment_name": DYING})["experiment"]["experiment_id"]],
        "filter": "attributes.run_name = 'evaluate_sts:dying'"})["runs"]
    assert [m["key"] for m in runs[0]["data"]["metrics"]] == ["before"]
