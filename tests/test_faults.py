"""Fault injection, for real: real ``snakemake`` processes, real signals, a real ``mlflow server``
killed and restarted, real file corruption, on a tiny BERT and synthetic data.

Each test adds a row to the fault table (fault, outcome, steps lost, metrics lost, message):
``CSELAB_FAULT_TABLE=<file.jsonl>`` collects them; ``benchmarks_scripts/faults.py`` runs this
file with a 60-second tracking outage and writes ``results/benchmarks/faults.md``.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import make_corpus, make_senteval, make_tiny_bert, make_transfer
from tests.test_workflow import ROOT

EXP = "simcse-tiny-s42"
STEPS, EVAL_EVERY = 240, 40
SUMMARY = f"results/experiments/{EXP}/train_summary.json"
TIMING = ("sentences_per_s", "tokens_per_s", "mfu")
OUTAGE_S = float(os.environ.get("CSELAB_FAULT_OUTAGE_S", "8"))


def record(fault: str, outcome: str, message: str, steps_lost: int | str = "-", metrics_lost: int | str = "-") -> None:
    """One row of the fault table (printed; appended to ``$CSELAB_FAULT_TABLE`` when set)."""
    row = {"fault": fault, "outcome": outcome, "steps_lost": steps_lost, "metrics_lost": metrics_lost,
           "message": " ".join(message.split())[:400]}
    print("FAULT", json.dumps(row))
    if os.environ.get("CSELAB_FAULT_TABLE"):
        with open(os.environ["CSELAB_FAULT_TABLE"], "a") as fh:
            fh.write(json.dumps(row) + "\n")


# -- a tiny project --------------------------------------------------------------------------------

def make_project(root: Path, **training) -> Path:
    make_senteval(root / "data" / "senteval", n_extra=12)
    make_transfer(root / "data" / "senteval")
    make_corpus(root / "data" / "corpus.txt", 400)
    make_tiny_bert(root / "tiny-bert")
    write_config(root, **training)
    return root


def write_config(root: Path, **training) -> None:
    cfg = {"data": {"corpus": {"path": str(root / "data" / "corpus.txt")},
                    "senteval": {"path": str(root / "data" / "senteval"), "strict_counts": False}},
           "mlflow": {"experiment_name": "cselab-faults"}, "seeds": [42],
           "plms": {"tiny": {"model": str(root / "tiny-bert")}},
           "training": {"batch_size": 8, "max_len": 32, "max_steps": STEPS, "epochs": 10, "lr": 1e-4,
                        "eval_steps": EVAL_EVERY, "log_steps": 1, "checkpoint_steps": 1000, "precision": "fp32",
                        "owner_wait_s": 2, **training},
           "evaluation": {"batch_size": 64},
           "experiments": {"simcse-tiny": {"plm": "tiny", "method": "simcse"}},
           "tables": {"table1": {"experiments": ["simcse-tiny"]}}}
    (root / "test.yaml").write_text(yaml.safe_dump(cfg))


def smk_cmd(root: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(root),
            "--configfile", str(root / "test.yaml"), "--cores", "2", *args]


def smk_env(uri: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    if uri:
        env["MLFLOW_TRACKING_URI"] = uri
    return env


def run_smk(root: Path, *args: str, uri: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(smk_cmd(root, *args), capture_output=True, text=True, env=smk_env(uri), timeout=900)


def start_smk(root: Path, *args: str, uri: str | None = None) -> subprocess.Popen:
    """``snakemake`` in the background; its output goes to ``proc.log_path``."""
    path = root.parent / f"smk-{time.monotonic_ns()}.log"
    with open(path, "w") as log:
        proc = subprocess.Popen(smk_cmd(root, *args), stdout=log, stderr=subprocess.STDOUT, text=True,
                                env=smk_env(uri), start_new_session=True)
    proc.log_path = path
    return proc


def job_log(root: Path) -> Path:
    return root / "logs" / "train" / f"{EXP}.log"


def wait_for_step(root: Path, step: int, proc: subprocess.Popen, timeout: float = 600) -> None:
    """Until the train job's log shows STS-B dev at ``step`` (training is in its middle)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job_log(root).is_file() and f"step {step}: STS-B dev" in job_log(root).read_text():
            return
        if proc.poll() is not None:
            raise AssertionError(f"snakemake ended ({proc.returncode}) before step {step}: {logtail(proc)}")
        time.sleep(0.2)
    raise AssertionError(f"no step {step} within {timeout} s")


def logtail(proc: subprocess.Popen) -> str:
    return proc.log_path.read_text()[-3000:]


def trainer_pid(root: Path) -> int:
    """The training job's process: the experiment folder's owner (cselab/pipeline/locks.py)."""
    return json.loads((root / "results" / "experiments" / EXP / ".owner.json").read_text())["pid"]


def curve(root: Path) -> list[dict]:
    rows = csv.DictReader((root / "results" / "experiments" / EXP / "curve.csv").open())
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def weights(root: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(root / "results" / "experiments" / EXP / "model" / "model.safetensors")


def table(root: Path) -> list[dict]:
    """Table 1's rows without the model folder (each project has its own)."""
    return [{k: v for k, v in r.items() if k != "model"} for r in csv.DictReader((root / "results" / "table1.csv").open())]


def same_weights(a: dict, b: dict) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def mlflow_runs(root: Path, rule: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{root}/results/mlflow.db")
    exp = client.get_experiment_by_name("cselab-faults")
    return [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("rule") == rule]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted invocation: what every faulted run must end equal to."""
    root = make_project(tmp_path_factory.mktemp("reference"))
    proc = run_smk(root, "results/table1.csv")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return root


@pytest.fixture
def project(tmp_path):
    return make_project(tmp_path / "project")


# -- concurrent invocations ------------------------------------------------------------------------

def test_concurrent_invocations_lose_nothing(reference, project):
    """A second invocation hits Snakemake's lock, whose message suggests ``--unlock``; the user
    unlocks (Snakemake deletes every lock file, the live invocation's too) and starts again with
    ``--rerun-incomplete``, which would delete the outputs the first is writing: it stops at
    cselab's own lock instead, naming the first. The first ends as one invocation alone would."""
    first = start_smk(project, "results/table1.csv")
    wait_for_step(project, EVAL_EVERY, first)
    second = run_smk(project, "--rerun-incomplete", "results/table1.csv")  # as the SLURM profile runs
    assert second.returncode != 0 and "cannot be locked" in second.stdout + second.stderr
    assert run_smk(project, "--unlock").returncode == 0
    third = run_smk(project, "--rerun-incomplete", "results/table1.csv")
    message = third.stdout + third.stderr
    assert third.returncode != 0 and "another snakemake invocation is running in this folder" in message
    assert f"pid {first.pid}" in message
    assert first.wait(timeout=900) == 0
    assert curve(project) == curve(reference) and same_weights(weights(project), weights(reference))
    assert table(project) == table(reference)
    record("two more invocations in one folder during training", "refused, naming the live one; 0 outputs lost",
           message[message.index("another snakemake"):][:300], 0, 0)


def test_second_job_for_one_experiment_waits_then_names_the_holder(tmp_path):
    """Two jobs for one experiment folder (a requeued cluster job beside a live one): the second
    waits ``owner_wait_s`` and fails naming the first; the OS frees the lock when the first dies."""
    from cselab.pipeline.locks import LockError, experiment_owner

    folder = tmp_path / "exp"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[1]);"
        "from cselab.pipeline.locks import experiment_owner;"
        "cm = experiment_owner(sys.argv[2], 'rule train for x'); cm.__enter__(); print('held', flush=True);"
        "time.sleep(300)"), str(ROOT), str(folder)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    tic = time.monotonic()
    with pytest.raises(LockError) as err:
        with experiment_owner(folder, "rule train for x (second)", wait_s=1.5, poll_s=0.2):
            pass
    assert time.monotonic() - tic >= 1.5
    assert f"pid {holder.pid}" in str(err.value) and "did nothing" in str(err.value)
    holder.kill()  # SIGKILL: no clean-up runs, the OS frees the lock
    holder.wait()
    with experiment_owner(folder, "rule train for x (after)", wait_s=5):
        assert json.loads((folder / ".owner.json").read_text())["pid"] == os.getpid()
    record("second job for one experiment (requeued beside a live one)", "waits, then refuses naming the holder",
           str(err.value)[:300], 0, 0)


# -- preemption ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_signal_stops_at_a_step_with_a_checkpoint_and_resumes_identically(reference, project, sig):
    first = start_smk(project, SUMMARY)
    wait_for_step(project, 2 * EVAL_EVERY, first)
    os.kill(trainer_pid(project), sig)
    assert first.wait(timeout=600) != 0
    log = job_log(project).read_text()
    stopped = [line for line in log.splitlines() if "stopped by" in line]
    assert stopped and signal.Signals(sig).name in stopped[-1], log[-2000:]
    ckpt = sorted((project / "results" / "experiments" / EXP / "resume").glob("step-*"))
    at_signal = int(ckpt[-1].name.split("-")[1])
    (killed,) = mlflow_runs(project, "train")
    assert killed.info.status == "KILLED" and killed.data.tags["cselab.preempted"].startswith(signal.Signals(sig).name)
    logged = len(killed_history(project, killed.info.run_id))
    second = run_smk(project, SUMMARY)
    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads((project / SUMMARY).read_text())
    assert summary["resumed_from_step"] == at_signal >= 2 * EVAL_EVERY
    (run,) = mlflow_runs(project, "train")  # one run, reopened
    assert run.info.run_id == killed.info.run_id and run.info.status == "FINISHED" and run.data.tags["cselab.resumed"] == "1"
    history = killed_history(project, run.info.run_id)
    assert [m.step for m in history] == list(range(1, STEPS + 1))  # every step's loss, once
    assert curve(project) == curve(reference) and same_weights(weights(project), weights(reference))
    record(f"{signal.Signals(sig).name} to the training job at step ~{at_signal}",
           "checkpoint at the step, run KILLED then reopened FINISHED, results identical",
           stopped[-1].split("INFO")[-1].split("WARNING")[-1], 0, STEPS - len(history))
    assert logged <= at_signal


def killed_history(root: Path, run_id: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{root}/results/mlflow.db").get_metric_history(run_id, "loss")


# -- corrupt files ---------------------------------------------------------------------------------------

def test_truncated_checkpoint_is_moved_aside_without_a_person(reference, project):
    first = start_smk(project, SUMMARY)
    wait_for_step(project, 2 * EVAL_EVERY, first)
    os.kill(trainer_pid(project), signal.SIGTERM)
    first.wait(timeout=600)
    (state,) = (project / "results" / "experiments" / EXP / "resume").glob("step-*/state.pt")
    state.write_bytes(state.read_bytes()[:1000])
    second = run_smk(project, SUMMARY)
    assert second.returncode == 0, second.stderr[-3000:]
    log = job_log(project).read_text()
    assert f"{state.parent.relative_to(project)} is damaged" in log and "starting from step 0" in log
    assert curve(project) == curve(reference) and same_weights(weights(project), weights(reference))
    line = next(x for x in log.splitlines() if "is damaged" in x)
    record("truncated state.pt of the only checkpoint", "moved aside, retrained from step 0, results identical",
           line.split("WARNING")[-1], int(state.parent.name.split("-")[1]), 0)


def test_truncated_model_is_retrained_at_planning(reference, tmp_path):
    """A finished training's weights truncated; then an evaluation of it is asked for again
    (here: forced): planning finds the damage by the file's size, moves the folder aside, and
    the same invocation retrains it before the evaluation reads it; no job fails on it."""
    import shutil

    project = tmp_path / "copy"
    shutil.copytree(reference, project, symlinks=True)  # the same config: data and PLM used in place
    model = project / "results" / "experiments" / EXP / "model" / "model.safetensors"
    model.write_bytes(model.read_bytes()[:4096])
    dry = run_smk(project, "-n", "--forcerun", "evaluate_sts", "--", "results/table1.csv")
    assert "a real run moves results/experiments/simcse-tiny-s42/model aside" in dry.stderr
    proc = run_smk(project, "--forcerun", "evaluate_sts", "--", "results/table1.csv")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{model.relative_to(project)} has 4096 bytes" in proc.stderr and "rule train rebuilds it" in proc.stderr
    assert same_weights(weights(project), weights(reference))
    assert table(project) == table(reference)
    record("truncated model.safetensors of a finished training", "found at planning, moved aside, retrained",
           next(x for x in proc.stderr.splitlines() if "cselab:" in x), "-", 0)
