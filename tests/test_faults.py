"""Fault injection, for real: real ``snakemake`` processes, real signals, a real ``mlflow server``
killed and restarted, real file corruption, on a tiny BERT and synthetic data.

Each test adds a row to the fault table (fault, outcome, steps lost, metrics lost, message):
``CSELAB_FAULT_TABLE=<file.jsonl>`` collects them; ``benchmarks_scripts/faults.py`` runs this
file with a 60-second tracking outage and writes ``results/benchmarks/faults.md``.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import signal
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.built import PREPARED_DATA, built_once, copy_built, prepared_project
from tests.helpers import capped, clean_console, make_workflow_data, read_yaml, run_snakemake
from tests.test_workflow import ROOT

EXP = "simcse-tiny-s42"
STEPS, EVAL_EVERY = 240, 40
SUMMARY = f"results/experiments/{EXP}/train_summary.json"
TIMING = ("sentences_per_s", "tokens_per_s", "mfu")
OUTAGE_S = float(os.environ.get("CSELAB_FAULT_OUTAGE_S", "8"))


def record(fault: str, outcome: str, message: str, steps_lost: int | str = "-", metrics_lost: int | str = "-") -> None:
    """One row of the fault table (printed; appended to ``$CSELAB_FAULT_TABLE`` when set)."""
    message = re.sub(r"^.*?\d\d:\d\d:\d\d,\d+ [\w.]+ (INFO|WARNING|ERROR) ", "", message.strip())
    row = {"fault": fault, "outcome": outcome, "steps_lost": steps_lost, "metrics_lost": metrics_lost,
           "message": " ".join(message.split())[:400]}
    print("FAULT", json.dumps(row))
    if os.environ.get("CSELAB_FAULT_TABLE"):
        with open(os.environ["CSELAB_FAULT_TABLE"], "a") as fh:
            fh.write(json.dumps(row) + "\n")


# -- a tiny project ---------------------------------------------------------------------------------

def make_project(root: Path, **training) -> Path:
    """A project with fresh data, nothing prepared (a test that changes the data before its first
    preparation)."""
    make_workflow_data(root, PREPARED_DATA["data"]["corpus"]["max_lines"])
    write_config(root, **training)
    return root


def write_config(root: Path, **training) -> None:
    cfg = {**PREPARED_DATA, "mlflow": {"experiment_name": "cselab-faults"}, "seeds": [42],
           "training": {"batch_size": 8, "max_len": 32, "max_steps": STEPS, "epochs": 20, "lr": 1e-4,
                        "eval_steps": EVAL_EVERY, "log_steps": 1, "checkpoint_steps": 1000, "precision": "fp32",
                        "owner_wait_s": 2, **training},
           "evaluation": {"batch_size": 64},
           "experiments": {"simcse-tiny": {"plm": "tiny", "method": "simcse"}},
           "tables": {"table1": {"experiments": ["simcse-tiny"]}}}
    (root / "test.yaml").write_text(yaml.safe_dump(cfg))


def smk_cmd(root: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(root),
            "--configfile", str(root / "test.yaml"), "--cores", "2", *args]


def smk_env(uri: str | None = None, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost", **(extra or {}))
    if uri:
        env["MLFLOW_TRACKING_URI"] = uri
    return env


def run_smk(root: Path, *args: str, uri: str | None = None, extra: dict | None = None) -> subprocess.CompletedProcess:
    return run_snakemake(smk_cmd(root, *args), smk_env(uri, extra), timeout=900)


def start_smk(root: Path, *args: str, uri: str | None = None, extra: dict | None = None) -> subprocess.Popen:
    """``snakemake`` in the background; its output goes to ``proc.log_path``."""
    path = root.parent / f"smk-{time.monotonic_ns()}.log"
    with open(path, "w") as log:
        proc = subprocess.Popen(capped(smk_cmd(root, *args)), stdout=log, stderr=subprocess.STDOUT, text=True,
                                env=smk_env(uri, extra), start_new_session=True)
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
    """One uninterrupted invocation from the prepared project: what every faulted run must end
    equal to (a template: tests change copies of it, :func:`copy_of`)."""
    def build(folder: Path) -> None:
        prepared_project(tmp_path_factory, folder)
        write_config(folder)
        proc = run_smk(folder, "results/table1.csv")
        assert proc.returncode == 0, proc.stderr[-4000:]

    return built_once(tmp_path_factory, "faults-reference", build)


@pytest.fixture
def project(tmp_path_factory, tmp_path):
    """The prepared project (data and PLM prepared, nothing trained) with this file's config."""
    root = prepared_project(tmp_path_factory, tmp_path / "project")
    write_config(root)
    return root


@pytest.fixture
def fresh_project(tmp_path):
    return make_project(tmp_path / "project")


# -- concurrent invocations ------------------------------------------------------------------------

def test_concurrent_invocations_lose_nothing(reference, project):
    """A second invocation stops at cselab's lock, naming the first; the user runs ``--unlock``
    (Snakemake deletes every lock file, the live invocation's too) and starts again with
    ``--rerun-incomplete``, which would delete the outputs the first is writing: it stops at
    cselab's lock again. The first ends as one invocation alone would."""
    first = start_smk(project, "results/table1.csv")
    wait_for_step(project, EVAL_EVERY, first)
    second = run_smk(project, "--rerun-incomplete", "results/table1.csv")  # as the SLURM profile runs
    assert second.returncode != 0 and "another snakemake invocation is running" in second.stdout + second.stderr
    assert run_smk(project, "--unlock").returncode == 0
    third = run_smk(project, "--rerun-incomplete", "results/table1.csv")
    message = third.stdout + third.stderr
    assert third.returncode != 0 and "another snakemake invocation is running in this folder" in message
    assert f"pid {first.pid}" in message and no_traceback(message, "another snakemake invocation"), message[-3000:]
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

#: SIGUSR1 (SLURM's warning signal) is sent for real by tests/test_slurm.py's preemption test; here
#: only when the fault table is built (benchmarks_scripts/faults.py), to keep the suite's time
SIGNALS = [signal.SIGTERM] + ([signal.SIGUSR1] if os.environ.get("CSELAB_FAULT_TABLE") else [])


@pytest.mark.parametrize("sig", SIGNALS)
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
    entry = damage_token_cache(project, "flipped")
    second = run_smk(project, SUMMARY)
    assert second.returncode == 0, second.stderr[-3000:]
    token_cache_healed(project, entry, "flipped")
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


def damage_token_cache(root: Path, how: str) -> Path:
    """The training's token cache entry (results/cache/tokens) cut in half, emptied or with one byte
    of its ids flipped (a bad CRC), as tests/test_caches.py breaks every cache."""
    from tests.test_caches import damage, member_data_offset

    (entry,) = (root / "results" / "cache" / "tokens").glob("*.npz")
    damage(entry, how, member_data_offset(entry, "ids.npy") if how == "flipped" else None)
    return entry


def token_cache_healed(root: Path, entry: Path, how: str) -> None:
    """The training that read the damaged entry said so once, in its log, and tokenised again."""
    lines = [x for x in job_log(root).read_text().splitlines() if "token cache" in x and "is damaged" in x]
    assert len(lines) == 1 and entry.name in lines[0] and "tokenising again" in lines[0], lines
    record(f"token cache entry {'cut in half' if how == 'cut' else 'emptied' if how == 'empty' else 'flipped byte'}",
           "removed with one warning, tokenised again, results identical", lines[0].split("WARNING")[-1], 0, 0)


# -- an invocation killed outright ---------------------------------------------------------------------

def kill_invocation(root: Path, target: str, step: int) -> tuple[int, subprocess.Popen]:
    """``snakemake <target>`` killed with SIGKILL once training is at ``step``: its training job goes
    on as an orphan. Returns the orphan's pid and the dead invocation."""
    first = start_smk(root, target)
    wait_for_step(root, step, first)
    orphan = trainer_pid(root)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=60)
    return orphan, first


def invocation_runs(root: Path) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{root}/results/mlflow.db")
    exp = client.get_experiment_by_name("cselab-faults")
    return [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("rule") == "invocation"]


def test_a_killed_invocations_finished_training_is_kept(reference, project):
    """kill -9 of snakemake in mid-training; its training goes on as an orphan and finishes. The next
    invocation finds the dead one, says its training finished, keeps the orphan's model (complete
    and checksummed: nothing is trained again), clears Snakemake's lock and incomplete markers
    itself (no --unlock, no --rerun-incomplete) and builds the table; the dead invocation's MLflow
    run is logged KILLED and linked to its successor."""
    from cselab.pipeline.recovery import alive

    write_config(project, max_steps=2 * EVAL_EVERY)  # killed at its first dev score, the orphan ends soon
    orphan, dead = kill_invocation(project, "results/table1.csv", EVAL_EVERY)
    deadline = time.monotonic() + 600
    while alive(orphan, None):
        assert time.monotonic() < deadline, "the orphan training did not end"
        time.sleep(0.5)
    trained = job_log(project).stat().st_mtime_ns
    model = project / "results" / "experiments" / EXP / "model" / "model.safetensors"
    orphans = (model.read_bytes(), model.stat().st_mtime_ns)
    proc = run_smk(project, "results/table1.csv")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    died = next(x for x in text.splitlines() if "died without ending" in x)
    assert f"pid {dead.pid}" in died and f"train exp={EXP}: finished" in died, died
    cleared = next(x for x in text.splitlines() if "cleared Snakemake's lock" in x)
    assert f"results/experiments/{EXP}/model" in cleared and "removed 0 partial" in cleared, cleared
    assert job_log(project).stat().st_mtime_ns == trained  # no second training
    assert (model.read_bytes(), model.stat().st_mtime_ns) == orphans  # the orphan's model, kept
    summary = json.loads((project / SUMMARY).read_text())
    assert summary["steps"] == 2 * EVAL_EVERY and summary["resumed_from_step"] == 0
    assert (project / "results" / "table1.csv").is_file()
    killed = [r for r in invocation_runs(project) if r.info.status == "KILLED"]
    assert len(killed) == 1 and killed[0].data.tags["cselab.successor_invocation"]
    (run,) = mlflow_runs(project, "train")
    assert run.info.status == "FINISHED" and run.data.tags["cselab.successor_invocation"]
    record("kill -9 of snakemake in mid-training; the orphan finished", "found by the next invocation; the "
           "orphan's model kept (0 steps retrained); lock and markers cleared; dead run KILLED", died, 0, 0)


def test_a_killed_invocations_orphan_training_is_stopped_and_resumed(reference, project):
    """kill -9 of snakemake in mid-training, the next invocation started at once: it stops the orphan
    by SIGTERM (it checkpoints at its step and ends its run KILLED), clears Snakemake's state, and
    its training resumes from the orphan's checkpoint, reopening the orphan's MLflow run: no step
    is trained twice, results equal an uninterrupted run."""
    orphan, dead = kill_invocation(project, SUMMARY, 2 * EVAL_EVERY)
    entry = damage_token_cache(project, "empty")
    proc = run_smk(project, SUMMARY)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    died = next(x for x in text.splitlines() if "died without ending" in x)
    assert f"train exp={EXP}: running (orphan pid {orphan})" in died, died
    assert "resumes from its checkpoint" in text
    token_cache_healed(project, entry, "empty")
    summary = json.loads((project / SUMMARY).read_text())
    assert summary["resumed_from_step"] >= 2 * EVAL_EVERY, summary
    assert curve(project) == curve(reference) and same_weights(weights(project), weights(reference))
    (run,) = mlflow_runs(project, "train")  # the orphan's run, reopened
    assert run.info.status == "FINISHED" and run.data.tags["cselab.resumed"] == "1"
    assert run.data.tags["cselab.preempted"].startswith("SIGTERM")
    assert [r.info.status for r in invocation_runs(project)].count("KILLED") == 1
    record("kill -9 of snakemake in mid-training, rerun at once", "the orphan stopped at a step with a checkpoint; "
           "resumed from it, its run reopened; results identical", died, 0, 0)


# -- corrupt files ---------------------------------------------------------------------------------------

def test_truncated_checkpoint_is_moved_aside_without_a_person(reference, project):
    first = start_smk(project, SUMMARY)
    wait_for_step(project, 2 * EVAL_EVERY, first)
    os.kill(trainer_pid(project), signal.SIGTERM)
    first.wait(timeout=600)
    (state,) = (project / "results" / "experiments" / EXP / "resume").glob("step-*/state.pt")
    state.write_bytes(state.read_bytes()[:1000])
    entry = damage_token_cache(project, "cut")
    second = run_smk(project, SUMMARY)
    assert second.returncode == 0, second.stderr[-3000:]
    token_cache_healed(project, entry, "cut")
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
    project = copy_of(reference, tmp_path)
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


def test_damaged_embedding_cache_is_encoded_again(reference, tmp_path):
    """A cached embedding array cut short after its job finished (its record intact): the next
    evaluation finds it damaged by its recorded size, encodes again and writes the same table."""
    project = copy_of(reference, tmp_path)
    npy = sorted((project / "results" / "cache" / "embeddings").glob("*/sts*.npy"))[0]
    npy.write_bytes(npy.read_bytes()[: npy.stat().st_size // 2])
    proc = run_smk(project, "--forcerun", "evaluate_sts", "--", "results/table1.csv")
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = "".join(p.read_text() for p in (project / "logs" / "evaluate_sts").glob("*.log"))
    line = next(x for x in log.splitlines() if "is damaged" in x and "encoding again" in x)
    assert npy.name in line and table(project) == table(reference)
    record("embedding cache array cut short after its job", "found by its recorded size, encoded again, same table",
           line, "-", 0)


def test_damaged_results_are_rebuilt_before_the_table_reads_them(reference, tmp_path):
    """The STS result cut in half and its per-item predictions cut short, after the table was built
    from them: planning names both, forces their evaluation, and the table is built again from the
    rebuilt results, never removed before (a dry run leaves it in place), with the same rows."""
    project = copy_of(reference, tmp_path)
    folder = project / "results" / "experiments" / EXP
    for name in ("sts.json", "sts_pairs.npz"):
        path = folder / name
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    dry = run_smk(project, "-n", "results/table1.csv")
    assert dry.returncode == 0 and (project / "results" / "table1.csv").is_file(), dry.stderr[-3000:]
    assert "evaluate_sts" in dry.stdout and "table" in dry.stdout, dry.stdout[-3000:]
    proc = run_smk(project, "results/table1.csv")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [x for x in proc.stderr.splitlines() if "is damaged" in x]
    assert len(lines) == 2 and all("rule evaluate_sts builds it again in this run" in x for x in lines), lines
    assert f"the result results/experiments/{EXP}/sts.json is damaged (it has " in lines[0] + lines[1]
    assert table(project) == table(reference)
    for line in lines:
        name = "sts_pairs.npz" if "sts_pairs.npz" in line else "sts.json"
        record(f"{name} cut in half after the table was built", "named at planning, its evaluation forced, the "
               "table rebuilt (not removed first), same rows", line, "-", 0)


def test_a_cut_table_is_built_again_from_its_results(reference, tmp_path):
    """A built table cut in half (its job's records beside it): planning moves it aside and the
    table job alone builds it again, with the same rows; nothing else runs."""
    project = copy_of(reference, tmp_path)
    csv_path = project / "results" / "table1.csv"
    csv_path.write_bytes(csv_path.read_bytes()[: csv_path.stat().st_size // 2])
    proc = run_smk(project, "results/table1.csv")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    assert "the table table1 is damaged (results/table1.csv: it has " in text and "moved it aside" in text, text[-3000:]
    started = re.findall(r"\] start  (\w+)", text)
    assert started == ["table"] and table(project) == table(reference), (started, text[-3000:])
    record("a built table cut in half", "moved aside at planning, the table job alone builds it again, same rows",
           next(x for x in text.splitlines() if "the table table1 is damaged" in x), "-", 0)


def test_a_deleted_curve_and_a_cut_summary_are_restored_from_the_intact_model(reference, tmp_path):
    """A finished training's curve deleted and its summary cut after the table was built: planning
    copies both back from the copies the model's folder keeps (in its record), so Snakemake does
    not plan the training again (which would remove the intact model first): nothing runs, and the
    files, the model and the table are what training wrote. A dry run only names them."""
    project = copy_of(reference, tmp_path)
    folder = project / "results" / "experiments" / EXP
    written = {name: (folder / name).read_bytes() for name in ("curve.csv", "train_summary.json")}
    (folder / "curve.csv").unlink()
    (folder / "train_summary.json").write_bytes(written["train_summary.json"][:40])
    dry = run_smk(project, "-n", "results/table1.csv")
    assert dry.stderr.count("a real run restores it from the copy") == 2 and not (folder / "curve.csv").exists()
    proc = run_smk(project, "results/table1.csv")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    lines = [x for x in proc.stderr.splitlines() if "restored from the copy" in x]
    assert len(lines) == 2 and "curve.csv is missing" in lines[0], lines
    assert re.findall(r"\] start  (\w+)", text) == [] and "Nothing to be done" in text, text[-3000:]
    assert {name: (folder / name).read_bytes() for name in written} == written
    assert same_weights(weights(project), weights(reference)) and table(project) == table(reference)
    record("a finished training's curve.csv deleted, its train_summary.json cut", "both copied back at planning "
           "from the model's own copies; nothing trained, nothing rebuilt", lines[0], 0, 0)


def test_a_lost_result_under_the_built_table_is_named_and_its_command_rebuilds_it(reference, tmp_path):
    """The STS result gone, its record left (what a forced evaluation that failed leaves: Snakemake
    removed the file before the job ran): the table that exists is up to date for Snakemake, so
    planning says which file is gone and the command that builds it; that command runs the one
    evaluation and the table, with the same rows."""
    project = copy_of(reference, tmp_path)
    (project / "results" / "experiments" / EXP / "sts.json").unlink()
    proc = run_smk(project, "results/table1.csv")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (hint,) = [x for x in proc.stderr.splitlines() if "is gone" in x]
    assert f"results/experiments/{EXP}/sts.json is gone (its record sts.json.sha256 is there" in hint, hint
    command = hint.split("snakemake ... ")[1].split()
    assert command == [f"results/experiments/{EXP}/sts.json", "results/table1.csv"], hint
    rebuilt = run_smk(project, "--", *command)
    text = rebuilt.stdout + rebuilt.stderr
    assert rebuilt.returncode == 0 and sorted(re.findall(r"\] start  (\w+)", text)) == ["evaluate_sts", "table"], \
        text[-3000:]
    assert "is gone" not in rebuilt.stderr and table(project) == table(reference)
    record("a result removed, its record left (a forced evaluation that failed)", "named at planning with the "
           "command that rebuilds it; that command reruns the evaluation and the table, same rows", hint, "-", 0)


def same_length_edit(scores: dict) -> tuple[str, float]:
    """A score with its last digit changed whose shortest repr keeps its length (a changed last
    digit can round to a shorter float: 0.30000000000000004 -> ...01 is 0.3)."""
    for column, value in scores.items():
        if not isinstance(value, float):
            continue
        text = repr(value)
        for digit in "123456789":
            edited = float(text[:-1] + digit)
            if edited != value and len(repr(edited)) == len(text):
                return column, edited
    raise AssertionError(f"no score to edit in place: {scores}")


def test_a_hand_edited_score_is_named_and_its_evaluation_planned_again(reference, tmp_path):
    """One score of the STS result edited by hand, its length kept: the result's sha256 (its mtime
    moved) tells, planning names the file and plans its evaluation and the table (a dry run)."""
    project = copy_of(reference, tmp_path)
    sts = project / "results" / "experiments" / EXP / "sts.json"
    result, size = json.loads(sts.read_text()), sts.stat().st_size
    column, value = same_length_edit(result["scores"])
    result["scores"][column] = value
    sts.write_text(json.dumps(result, indent=2, default=str) + "\n")  # as the evaluation wrote it (write_json)
    assert sts.stat().st_size == size
    dry = run_smk(project, "-n", "results/table1.csv")
    assert dry.returncode == 0 and "rule evaluate_sts:" in dry.stdout and "rule table:" in dry.stdout, dry.stdout[-3000:]
    line = next(x for x in dry.stderr.splitlines() if "is damaged" in x)
    assert f"results/experiments/{EXP}/sts.json" in line and "does not match the sha256" in line, line
    record("a score of sts.json edited by hand (length kept)", "named at planning by its sha256, its evaluation "
           "planned again", line, "-", 0)


def test_a_new_seed_gets_no_deleted_folder_hint(reference, tmp_path):
    """A seed added to a built project: its folder never existed, and the planning says nothing of a
    deleted one (the hint is for a run the table shows whose folder is gone)."""
    project = copy_of(reference, tmp_path)
    cfg = read_yaml(project / "test.yaml")
    cfg["seeds"] = [42, 43]
    (project / "test.yaml").write_text(yaml.safe_dump(cfg))
    dry = run_smk(project, "-n", "results/table1.csv")
    assert dry.returncode == 0 and "simcse-tiny-s43" in dry.stdout, dry.stdout[-3000:]
    assert "was deleted" not in dry.stderr, dry.stderr[-3000:]
    record("a seed added to a built project (seed 43)", "no 'was deleted' hint: the folder never existed",
           "(no hint; the plan trains simcse-tiny-s43)")


# -- a full or read-only disk ---------------------------------------------------------------------------

@contextlib.contextmanager
def mounted(path: Path, *mount: str):
    """``mount <mount...> <path>`` for the block (a small tmpfs, a read-only bind mount), unmounted
    after; skipped where this machine cannot mount (not root, no CAP_SYS_ADMIN in a container)."""
    proc = subprocess.run(["mount", *mount, str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount here: {proc.stderr.strip()[:200]}")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def remount(path: Path, option: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{option}", str(path)], check=True, capture_output=True)


def test_a_full_disk_during_a_checkpoint_is_named_and_the_last_good_one_resumes(reference, project):
    """The experiment's checkpoints on a disk of their own that fills after the first (a tmpfs made
    smaller than two): the job's one console line names the folder, "no space left on the device"
    and the space needed, not torch's message; the partial checkpoint is gone, the first is whole;
    with space freed the same command resumes from it and ends equal to an uninterrupted run."""
    from cselab.training.checkpoints import damaged

    write_config(project, checkpoint_steps=2 * EVAL_EVERY)
    resume = project / "results" / "experiments" / EXP / "resume"
    resume.mkdir(parents=True)
    first_ckpt = resume / f"step-{2 * EVAL_EVERY:08d}"
    with mounted(resume, "-t", "tmpfs", "-o", "size=256m", "tmpfs"):
        job = start_smk(project, SUMMARY)
        deadline = time.monotonic() + 600
        while not (first_ckpt / "meta.json").is_file():
            assert job.poll() is None and time.monotonic() < deadline, logtail(job)
            time.sleep(0.05)
        used = sum(p.stat().st_size for p in resume.rglob("*") if p.is_file())
        remount(resume, f"size={used * 3 // 2 // 4096 * 4096}")  # the next one cannot fit
        assert job.wait(timeout=600) != 0
        out = job.log_path.read_text()
        lines = [x for x in out.splitlines() if "no space left on the device" in x]
        assert lines and f"cannot write {resume.relative_to(project)}" in lines[0] and "MB needed" in lines[0], out[-3000:]
        assert no_traceback(out, "no space left on the device") and "enforce fail" not in out, out[-3000:]
        assert sorted(p.name for p in resume.iterdir()) == [first_ckpt.name] and damaged(first_ckpt) is None
        remount(resume, "size=256m")  # space freed
        second = run_smk(project, SUMMARY)
        assert second.returncode == 0, second.stderr[-3000:]
    assert json.loads((project / SUMMARY).read_text())["resumed_from_step"] == 2 * EVAL_EVERY
    assert curve(project) == curve(reference) and same_weights(weights(project), weights(reference))
    record("disk full while writing the second checkpoint", "one line naming the folder and the cause; partial "
           "removed, the first kept; resumed from it after space was freed, results identical",
           lines[0].split("cselab error in rule")[-1], STEPS // 3, 0)


def test_a_read_only_results_folder_is_one_message(reference, tmp_path):
    """results/ read-only (a bind mount made read-only): the invocation's start stops with one line
    naming the file it cannot write and why, not a traceback from rules/common.smk; nothing changes."""
    project = copy_of(reference, tmp_path)
    results = project / "results"
    before = snapshot(results)
    with mounted(results, "--bind", str(results)):
        remount(results, "ro,bind")
        proc = run_smk(project, f"results/experiments/{EXP}/stsb_dev.json")  # a new result (no output to protect)
        out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "cannot write results/.mlflow.lock: the file system is read-only" in out, \
        out[-3000:]
    assert no_traceback(out, "the file system is read-only") and snapshot(results) == before, out[-3000:]
    record("results/ read-only at the start of a run", "one message naming the file and the cause, no traceback",
           next(x for x in out.splitlines() if "read-only" in x))


# -- a moved or copied folder ---------------------------------------------------------------------------

def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize("how", ["mv", "cp -a"])
def test_a_moved_or_copied_project_writes_only_inside_itself(reference, tmp_path, how):
    """A built project moved (``mv``) or copied (``cp -a``) elsewhere, then a table rebuilt there:
    the invocation's start points the MLflow store's artifact locations at the folder it is in,
    with one line; nothing is written in the first folder (after ``mv``: it is not made again);
    the old runs' artifacts, which travelled with the folder, are found again."""
    from mlflow.tracking import MlflowClient

    original = copy_of(reference, tmp_path)  # a project of its own: its store names its own folder
    before = snapshot(original)
    moved = tmp_path / "elsewhere" / "project"
    moved.parent.mkdir()
    subprocess.run(["mv", str(original), str(moved)] if how == "mv" else ["cp", "-a", str(original), str(moved)],
                   check=True)
    proc = run_smk(moved, "--forcerun", "table", "--", "results/table1.csv")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [x for x in proc.stderr.splitlines() if "kept its artifacts in" in x]
    assert (original / "results" / "mlartifacts").resolve().as_uri() in line and moved.resolve().as_uri() in line
    assert not original.exists() if how == "mv" else snapshot(original) == before
    client = MlflowClient(f"sqlite:///{moved}/results/mlflow.db")
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    assert runs and all(r.info.artifact_uri.startswith(moved.resolve().as_uri() + "/") for r in runs)
    (train,) = [r for r in runs if r.data.tags.get("rule") == "train"]
    got = Path(client.download_artifacts(train.info.run_id, "curve.csv", str(tmp_path / "dl")))
    assert got.read_bytes() == (moved / "results" / "experiments" / EXP / "curve.csv").read_bytes()
    assert table(moved) == table(reference)
    record(f"project folder {'moved (mv)' if how == 'mv' else 'copied (cp -a)'}, then a table rebuilt",
           "artifact locations corrected at the start; 0 bytes written in the old folder; old artifacts found",
           line.split("cselab: ")[-1], "-", 0)


# -- tracking outage --------------------------------------------------------------------------------

def start_server(port: int, root: Path) -> subprocess.Popen:
    from tests.test_mlflow_server import http, mlflow_server_cmd

    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost", MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    with (root / "server.log").open("a") as log:
        proc = subprocess.Popen(mlflow_server_cmd(port, root), cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if http("GET", f"http://127.0.0.1:{port}/health", timeout=2).strip() == b"OK":
                return proc
        except OSError:
            time.sleep(0.5)
        if proc.poll() is not None:
            pytest.skip(f"mlflow server exited: {(root / 'server.log').read_text()[-1000:]}")
    pytest.skip("mlflow server did not answer within 120 s")


def test_tracking_outage_loses_no_step_and_no_metric(reference, project, tmp_path):
    """The MLflow server is killed (SIGKILL) in mid-training and started again OUTAGE_S seconds
    later: training never stops, the metrics of the outage are buffered and replayed, and the
    run ends FINISHED with every step's metrics."""
    from tests.test_mlflow_server import api, free_port, stop

    store = tmp_path / "server"
    store.mkdir()
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    server = start_server(port, store)
    write_config(project, max_steps=STEPS * 2)  # long enough to train through the outage
    job = start_smk(project, SUMMARY, uri=uri)
    try:
        wait_for_step(project, EVAL_EVERY, job)
        stop(server)  # SIGTERM then SIGKILL to the server's process group
        killed_at = time.monotonic()
        time.sleep(OUTAGE_S)
        assert job.poll() is None, f"training stopped with the server: {logtail(job)}"
        server = start_server(port, store)
        down = time.monotonic() - killed_at
        assert job.wait(timeout=900) == 0, logtail(job)
        # read back from the restarted server, after the job has ended
        found = api(uri, "experiments/get-by-name", {"experiment_name": "cselab-faults"})["experiment"]
        runs = api(uri, "runs/search", body={"experiment_ids": [found["experiment_id"]], "max_results": 100})["runs"]
        (train,) = [r for r in runs if {t["key"]: t["value"] for t in r["data"]["tags"]}["rule"] == "train"]
        history = api(uri, "metrics/get-history", {"run_id": train["info"]["run_id"], "metric_key": "loss",
                                                   "max_results": 10000})["metrics"]
    finally:
        job.kill()
        stop(server)
    steps = sorted(m["step"] for m in history)
    assert train["info"]["status"] == "FINISHED"
    assert steps == list(range(1, 2 * STEPS + 1)), f"{len(steps)} loss values"
    summary = json.loads((project / SUMMARY).read_text())
    assert summary["steps"] == 2 * STEPS and summary["resumed_from_step"] == 0
    assert not (project / "results" / "experiments" / EXP / "mlflow_buffer.jsonl").exists()
    log = job_log(project).read_text()
    warned = next(line for line in log.splitlines() if "MLflow did not take" in line)
    record(f"MLflow server killed for {down:.0f} s in mid-training", "training went on; buffered, replayed; FINISHED",
           warned.split("WARNING")[-1], 0, 2 * STEPS - len(steps))


# -- changed data ------------------------------------------------------------------------------------

def copy_of(reference: Path, tmp_path: Path) -> Path:
    """A finished project with its own data (copied, its preparation records pointing at it) and
    the same results."""
    return copy_built(reference, tmp_path / "copy")


def no_traceback(text: str, message: str) -> bool:
    """The console of a failed invocation: its message once, and no traceback or Snakemake frame
    around it (issue 50's "0 tracebacks and 0 duplicated error messages")."""
    return clean_console(text, message)


def msrpar(root: Path) -> tuple[Path, Path]:
    # the manifest names a tree inside the project relative to it (cselab.io.as_recorded)
    folder = root / json.loads((root / "resources" / "senteval" / "manifest.json").read_text())["root"] / "STS"
    return (folder / "STS12-en-test" / "STS.input.MSRpar.txt", folder / "STS12-en-test" / "STS.gs.MSRpar.txt")


@pytest.mark.parametrize("change", ["truncate-both", "replace"])
def test_changed_senteval_file_is_caught_before_it_is_read(reference, tmp_path, change):
    """The SentEval tree is used in place: a file changed after preparation where Snakemake cannot
    see it (its modification time put back, as ``cp -p`` of an older file does) fails the next job
    that reads it, naming the file, the expected and found values and what to force to accept it
    (the issue's case: MSRpar's input and gold cut by the same number of lines)."""
    project = copy_of(reference, tmp_path)
    inp, gold = msrpar(project)  # the copy's own data
    assert inp.is_relative_to(project)
    saved = {p: (p.read_bytes(), p.stat()) for p in (inp, gold)}
    if change == "truncate-both":
        for p in (inp, gold):
            p.write_bytes(b"".join(saved[p][0].splitlines(keepends=True)[:-2]))
    else:
        inp.write_bytes(saved[gold][0])
    for p, (_, st) in saved.items():
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    proc = run_smk(project, "--forcerun", "evaluate_sts", "--", "results/table1.csv")
    text = proc.stdout + proc.stderr
    named = inp.relative_to(project)  # a file inside the project is named relative to it
    assert proc.returncode != 0 and f"{named} changed after rule senteval_reads prepared it" in text, text[-3000:]
    assert "--forcerun resources/senteval/reads/sts.json" in text and no_traceback(text, "changed after rule"), \
        text[-3000:]
    line = next(x for x in text.splitlines() if "changed after rule senteval_reads" in x)
    record(f"SentEval file {change} after preparation", "the reading job stops before reading it", line.split("cselab error in rule")[-1])


def test_a_changed_senteval_file_reruns_only_the_jobs_that_read_it(reference, tmp_path):
    """STS12's MSRpar, which no training reads, edited after everything was built: Snakemake
    prepares the files that read it again (its record, rule senteval_reads) and reruns the STS
    evaluation and the table; no training (they read STS-B dev's file alone)."""
    project = copy_of(reference, tmp_path)
    inp, _ = msrpar(project)
    inp.write_bytes(inp.read_bytes().replace(b"a", b"e", 1))
    planned = run_smk(project, "-n", "results/table1.csv").stdout
    assert all(f"rule {r}:" in planned for r in ("senteval_reads", "evaluate_sts", "table")), planned[-3000:]
    assert "rule train:" not in planned, planned[-3000:]
    trained = job_log(project).stat().st_mtime_ns
    proc = run_smk(project, "results/table1.csv")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert job_log(project).stat().st_mtime_ns == trained and same_weights(weights(project), weights(reference))
    assert table(project) != table(reference)  # STS12 scored on the new file
    record("a SentEval file no training reads (STS12 MSRpar) edited", "its record, the STS evaluation and the "
           "table rerun; 0 trainings", "planned: senteval_reads sts, evaluate_sts, table (train up to date)", 0, 0)


def test_a_nan_gold_score_is_refused_at_preparation(fresh_project):
    """float("nan") parses: a gold score of nan would make every STS12 score and the average NaN.
    Preparation refuses it, naming the file and the line."""
    gold = fresh_project / "data" / "senteval" / "STS" / "STS12-en-test" / "STS.gs.MSRpar.txt"
    lines = gold.read_text().splitlines()
    lines[2] = "nan"
    gold.write_text("\n".join(lines) + "\n")
    proc = run_smk(fresh_project, "resources/senteval/manifest.json")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"{gold.resolve()} is malformed: line 3: column 1 is 'nan', not a finite score" in out, \
        out[-3000:]
    assert no_traceback(out, "not a finite score") and not (fresh_project / "resources/senteval/manifest.json").exists()
    record("a nan gold score in SentEval (STS12 MSRpar)", "refused at preparation, naming the file and the line",
           next(x for x in out.splitlines() if "not a finite score" in x).split("cselab error in rule")[-1])


def test_changed_prepared_corpus_is_caught_and_a_replaced_source_replans(reference, tmp_path):
    """The prepared corpus edited under a finished training: planning stops naming it, before
    Snakemake plans the training again (the corpus is newer than the model), which would remove the
    intact model before the job stopped on the corpus; twice, nothing lost."""
    project = copy_of(reference, tmp_path)
    corpus = project / "resources" / "corpus" / "corpus.txt"
    data = corpus.read_bytes()
    corpus.write_bytes(data.replace(b" ", b"  ", 3))
    for _ in range(2):
        proc = run_smk(project, "results/table1.csv")
        text = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "resources/corpus/corpus.txt changed after rule prepare_corpus" in text, text[-2000:]
        assert no_traceback(text, "changed after rule prepare_corpus"), text[-3000:]
        assert not re.search(r"\] start ", text) and same_weights(weights(project), weights(reference))  # no job ran
    record("prepared corpus edited under a finished training", "planning stops naming it; the model kept",
           next(x for x in text.splitlines() if "changed after rule prepare_corpus" in x))


@pytest.mark.parametrize("name,rule", [("resources/plms/tiny.json", "resolve_plm"),
                                       ("resources/senteval/reads/stsb-dev.json", "senteval_reads")])
def test_a_damaged_record_of_prepared_data_stops_planning_and_keeps_the_model(reference, tmp_path, name, rule):
    """A PLM's record or a SentEval read record cut in half: newer than the trainings that read it,
    so Snakemake would plan them again and remove their models before the first one stopped on the
    record. Planning stops naming it and the rule that writes it; no job runs, the model is kept."""
    project = copy_of(reference, tmp_path)
    path = project / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    proc = run_smk(project, "results/table1.csv")
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"{name} is damaged" in text and f"--forcerun {rule}" in text, text[-2000:]
    assert no_traceback(text, f"{name} is damaged"), text[-3000:]
    assert not re.search(r"\] start ", text) and same_weights(weights(project), weights(reference))
    record(f"{name} cut in half", "planning stops naming it and its rule; the models kept",
           next(x for x in text.splitlines() if "is damaged" in x))



def test_replaced_corpus_source_stops_planning_until_told(reference, tmp_path):
    """The corpus source (used in place) replaced by another: every plan stops naming it until
    the user forces prepare_corpus, which then replans exactly the trainings that read it."""
    project = copy_of(reference, tmp_path)
    named = read_yaml(project / "test.yaml")["data"]["corpus"]["path"]  # the copy's own
    source = project / named
    source.write_bytes(source.read_bytes() + b"one more sentence for the corpus .\n")
    dry = run_smk(project, "-n", "results/table1.csv")
    forced = run_smk(project, "-n", "--forcerun", "prepare_corpus", "--", "results/table1.csv")
    text = dry.stdout + dry.stderr
    assert dry.returncode != 0 and f"the corpus {named} changed since rule prepare_corpus prepared it" in text
    assert no_traceback(text, "changed since rule prepare_corpus"), text[-3000:]
    planned = forced.stdout
    assert forced.returncode == 0 and all(f"{rule} " in planned for rule in ("prepare_corpus", "train", "table"))
    record("corpus source replaced in place", "planning stops, naming it; --forcerun prepare_corpus replans its "
           "trainings", next(x for x in text.splitlines() if "changed since rule prepare_corpus" in x))


# -- bad input ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("key,value", [("lr", ".nan"), ("max_grad_norm", ".inf"), ("temperature", "-.inf")])
def test_nan_and_inf_settings_are_refused_at_planning(project, key, value):
    text = (project / "test.yaml").read_text().replace(f"  {key}: ", f"  {key}: {value} #", 1)
    if f"  {key}: {value}" not in text:
        text = text.replace("training:\n", f"training:\n  {key}: {value}\n", 1)
    (project / "test.yaml").write_text(text)
    proc = run_smk(project, "-n", "results/table1.csv")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"config key 'training.{key}'" in out and "not a finite number" in out, out[-2000:]
    assert no_traceback(out, "not a finite number"), out[-3000:]
    record(f"training.{key}: {value}", "refused at planning", next(x for x in out.splitlines() if "finite" in x))


def test_an_untrained_experiments_model_is_refused_at_planning(project):
    """An untrained experiment has no training job: a target that needs its model (here its ONNX
    file) is one message at planning, not a training job that fails."""
    cfg = yaml.safe_load((project / "test.yaml").read_text())
    cfg["experiments"]["untrained-tiny"] = {"plm": "tiny", "method": "untrained"}
    (project / "test.yaml").write_text(yaml.safe_dump(cfg))
    proc = run_smk(project, "-n", "results/onnx/untrained-tiny/check.json")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "experiment 'untrained-tiny' is untrained" in out, out[-2000:]
    assert no_traceback(out, "is untrained"), out[-3000:]
    record("an untrained experiment's ONNX file asked for", "refused at planning",
           next(x for x in out.splitlines() if "is untrained" in x))

def test_a_plms_damaged_config_json_is_one_message(project):
    """A PLM folder whose ``config.json`` is cut off: rule resolve_plm names the file and why, and
    the project's other PLM record is kept."""
    shutil.copytree(project / "tiny-bert", project / "cut-bert")
    (project / "cut-bert" / "config.json").write_text('{"model_type": "bert", "hidden_size": 32')
    cfg = yaml.safe_load((project / "test.yaml").read_text())
    cfg["plms"]["cut"] = {"model": "./cut-bert"}
    (project / "test.yaml").write_text(yaml.safe_dump(cfg))
    kept = (project / "resources" / "plms" / "tiny.json").read_bytes()
    proc = run_smk(project, "resources/plms/cut.json")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "cannot read the model's" in out and "cut-bert/config.json" in out, out[-2000:]
    assert no_traceback(out, "cannot read the model's"), out[-3000:]
    assert not (project / "resources" / "plms" / "cut.json").exists()
    assert (project / "resources" / "plms" / "tiny.json").read_bytes() == kept
    record("a PLM's config.json cut off", "job refused, other records kept",
           next(x for x in out.splitlines() if "cannot read the model's" in x))


def test_corpus_control_characters_and_long_lines_are_cleaned_and_counted(fresh_project):
    from cselab.data.corpus import MAX_LINE_CHARS

    project = fresh_project
    corpus = project / "data" / "corpus.txt"
    lines = corpus.read_text().splitlines()
    lines[3] = "nul \x00 inside"
    lines[5] = "bell \x07 inside"
    lines[7] = "long " * 20_000
    corpus.write_text("\n".join(lines) + "\n")
    proc = run_smk(project, "resources/corpus/manifest.json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    manifest = json.loads((project / "resources" / "corpus" / "manifest.json").read_text())
    assert manifest["dropped_control_lines"] == 2 and manifest["truncated_lines"] == 1
    out = (project / "resources" / "corpus" / "corpus.txt").read_text().splitlines()
    assert len(out) == len(lines) - 2 and max(map(len, out)) == MAX_LINE_CHARS
    log = (project / "logs" / "prepare_corpus.log").read_text()
    record("corpus with NUL / control characters and a 100,000-character line",
           "2 lines dropped, 1 cut, counted in the manifest, the log and MLflow",
           next(x for x in log.splitlines() if "control characters dropped" in x).split("WARNING")[-1])


def test_damaged_mlflow_store_is_named(project):
    (project / "results").mkdir(parents=True, exist_ok=True)
    (project / "results" / "mlflow.db").write_bytes(b"this is not a database" * 100)
    proc = run_smk(project, "results/table1.csv")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "the MLflow store results/mlflow.db cannot be read" in out, out[-3000:]
    assert "mv results/mlflow.db results/mlflow.db.damaged" in out and no_traceback(out, "cannot be read"), out[-3000:]
    record("mlflow.db overwritten with garbage", "stops before any job, naming the file and the way out",
           next(x for x in out.splitlines() if "cannot be read" in x))
