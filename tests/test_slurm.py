"""The SLURM profiles: the site profile's shape (no cluster needed), and the tiny workflow
submitted through real sbatch to a private one-node cluster on localhost
(tests/slurm_cluster.py, profiles/slurm-localhost).

Where that cluster cannot be started (not root, slurm-wlm/munge not installed, a daemon not
coming up) the cluster tests are skipped with the reason, never passed silently.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.built import prepared_project
from tests.helpers import make_workflow_data, read_yaml
from tests.slurm_cluster import ClusterUnavailable, slurm_cluster
from tests.test_workflow import write_config

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "profiles" / "slurm"
LOCAL = ROOT / "profiles" / "slurm-localhost"
EXP = "simcse-tiny"
EXP_ID = f"{EXP}-s42"
RULES = {"prepare_corpus", "senteval_reads", "resolve_plm", "train", "evaluate_sts", "table"}
SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+) \(log: (\S+)\)\.")


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k != "MLFLOW_TRACKING_URI" and not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}


def _job_resources(dry_run_output: str) -> dict[str, list[dict[str, str]]]:
    """Rule name -> the `resources:` of each of its jobs in a dry run's output."""
    out: dict[str, list[dict[str, str]]] = {}
    rule = None
    for line in dry_run_output.splitlines():
        m = re.match(r"^(local)?rule (\w+):$", line)
        if m:
            rule = None if m.group(1) else m.group(2)
            continue
        if rule and line.strip().startswith("resources:"):
            pairs = (p.split("=", 1) for p in line.split(":", 1)[1].split(", "))
            out.setdefault(rule, []).append({k.strip(): v.strip() for k, v in pairs})
            rule = None
    return out


def test_site_profile_names_the_executor_and_site_settings():
    profile = read_yaml(SITE / "config.yaml")
    assert profile["executor"] == "slurm"
    assert profile["slurm-requeue"] is True and profile["retries"] >= 1 and profile["rerun-incomplete"]
    defaults = profile["default-resources"]
    assert {"slurm_account", "slurm_partition", "mem_mb", "runtime"} <= set(defaults)
    for gpu_rule in ("train", "pretrain"):  # every rule whose job asks for a GPU
        res = profile["set-resources"][gpu_rule]
        # the GPU count comes from the rule (training.devices x nodes); the profile must not override it
        assert "gpu" not in res and res["cpus_per_gpu"] >= 1 and res["mem_mb"] and res["runtime"]
        assert res["slurm_partition"] != defaults["slurm_partition"]
    # the localhost variant keeps the same structure
    local = read_yaml(LOCAL / "config.yaml")
    for gpu_rule in ("train", "pretrain"):
        assert local["executor"] == "slurm" and local["set-resources"][gpu_rule]["gpu"] == 1
        assert local["set-resources"][gpu_rule]["slurm_partition"] == "gpu"
    assert local["default-resources"]["slurm_partition"] == "cpu"


def test_site_profile_gives_every_rule_a_partition(tmp_path):
    """A dry run of the paper-scale workflow through the site profile (no SLURM needed):
    every job gets an account, a partition, memory and a time limit; a job that asks for a GPU
    goes to the GPU partition (a new GPU rule needs its set-resources entry), the rest to the
    CPU partition."""
    profile = read_yaml(SITE / "config.yaml")
    cpu_partition = profile["default-resources"]["slurm_partition"]
    train = profile["set-resources"]["train"]
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
           "--profile", str(SITE), "--dry-run", "--forceall"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs = _job_resources(proc.stdout)
    assert {"prepare_corpus", "senteval_reads", "resolve_plm", "train", "evaluate_sts", "table"} <= set(jobs)
    for rule, resources in jobs.items():
        for res in resources:
            assert res.get("slurm_partition") and res.get("slurm_account"), (rule, res)
            assert int(res["mem_mb"]) > 0 and int(res["runtime"]) > 0, (rule, res)
            if res.get("gpu", "0") != "0":
                assert res["slurm_partition"] == train["slurm_partition"], \
                    f"GPU rule {rule} is not sent to the GPU partition: add it to set-resources in {SITE}"
                assert res.get("cpus_per_gpu"), (rule, res)
            else:
                assert res["slurm_partition"] == cpu_partition, (rule, res)
    (train_job, *_) = jobs["train"]
    assert train_job["gpu"] == "1" and train_job["nodes"] == "1"
    assert train_job["cpus_per_gpu"] == str(train["cpus_per_gpu"])
    assert train_job["mem_mb"] == str(train["mem_mb"]) and train_job["runtime"] == str(train["runtime"])


def test_site_profile_asks_for_the_configured_gpus_and_nodes(tmp_path):
    """training.devices and training.nodes become the train jobs' `gpu` (total) and `nodes`
    resources (-> sbatch --gpus, --nodes), and change no experiment id."""
    def plan(*extra):
        cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
               "--profile", str(SITE), "--dry-run", "--forceall", *extra, "--", "results/table1.csv"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(), cwd=tmp_path, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    base = read_yaml(ROOT / "config.yaml")
    (tmp_path / "multi.yaml").write_text(yaml.safe_dump({"training": {**base["training"], "devices": 4, "nodes": 2}}))
    one, multi = plan(), plan("--configfile", str(ROOT / "config.yaml"), str(tmp_path / "multi.yaml"))
    jobs = _job_resources(multi)["train"]
    assert jobs and all(j["gpu"] == "8" and j["nodes"] == "2" for j in jobs), jobs
    wildcards = re.compile(r"wildcards: exp=(\S+)")
    assert sorted(wildcards.findall(one)) == sorted(wildcards.findall(multi))


# --- the real thing: sbatch on a localhost cluster ---


@pytest.fixture(scope="module")
def cluster():
    cm = slurm_cluster()
    try:
        c = cm.__enter__()
    except ClusterUnavailable as e:
        pytest.skip(f"localhost SLURM cluster unavailable: {e.reason}")
    try:
        yield c
    finally:
        cm.__exit__(None, None, None)


@pytest.fixture(scope="module")
def slurm_run(cluster, tmp_path_factory):
    """One trained tiny experiment up to Table 1, every job through sbatch (max_steps 2)."""
    workdir = tmp_path_factory.mktemp("slurm-wf")
    make_workflow_data(workdir, 100)
    # one training job of 2 processes (gloo on the node's CPUs): training.devices through the profile
    write_config(workdir, training={"max_steps": 2, "eval_steps": 2, "log_steps": 1, "devices": 2})
    cfg = read_yaml(workdir / "test.yaml")
    cfg["experiments"] = {EXP: {"plm": "tiny", "method": "simcse"}}
    cfg["tables"] = {"table1": {"experiments": [EXP]}}
    (workdir / "test.yaml").write_text(yaml.safe_dump(cfg))

    env = {**_clean_env(), **cluster.env}
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(workdir / "test.yaml"), "--profile", str(LOCAL), "--", "results/table1.csv"]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=workdir, timeout=900)
    elapsed = time.monotonic() - start
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        slurm_logs = "\n".join(f"== {p}\n{p.read_text()[-2000:]}"
                               for p in sorted((workdir / ".snakemake" / "slurm_logs").rglob("*.log")))
        raise AssertionError(f"snakemake through SLURM failed after {elapsed:.0f} s:\n{output[-6000:]}\n"
                             f"{slurm_logs[-6000:]}\n{cluster.log_tail('slurmctld')}")
    print(f"workflow through localhost SLURM: {elapsed:.0f} s")
    return workdir, output


def test_workflow_runs_through_sbatch(slurm_run):
    workdir, _ = slurm_run
    df = pd.read_csv(workdir / "results" / "table1.csv")
    assert list(df["experiment"]) == [EXP]
    assert df["Avg"].between(-100, 100).all()
    assert (workdir / "results" / "experiments" / EXP_ID / "model" / "config.json").is_file()


def test_every_job_was_a_slurm_job(slurm_run, cluster):
    workdir, output = slurm_run
    submitted = SUBMITTED.findall(output)
    by_rule = {}
    for _, slurm_id, log in submitted:
        rule = re.search(r"/slurm_logs/rule_(\w+?)/", log).group(1)
        by_rule.setdefault(rule, []).append((slurm_id, Path(log)))
    assert set(by_rule) == RULES and len(submitted) == len(RULES) + 1, output[-3000:]  # senteval_reads: STS, STS-B dev
    run_id = re.search(r"SLURM run ID: (\S+)", output).group(1)
    queue = cluster.run("squeue", "--states=all", "--noheader", "--name", run_id, "--format=%i|%T|%P").stdout
    states = {i: (state, part) for i, state, part in (line.split("|") for line in queue.split())}
    for rule, jobs in by_rule.items():
        for slurm_id, log in jobs:
            assert states.get(slurm_id, ("?",))[0] == "COMPLETED", (rule, slurm_id, queue)
            # the plugin's per-job SLURM log (kept by the localhost profile) shows the rule ran in it
            assert log.is_file() and f"rule {rule}:" in log.read_text(), (rule, log)
            assert log.parent.parent.name == f"rule_{rule}" or log.parent.name == f"rule_{rule}"
            want = "gpu" if rule == "train" else "cpu"
            assert states[slurm_id][1] == want, (rule, slurm_id, states[slurm_id])


def test_train_job_ran_two_processes(slurm_run):
    """training.devices 2: the job's log has rank 0's lines and the 2-process training."""
    workdir, _ = slurm_run
    log = (workdir / "logs" / "train" / f"{EXP_ID}.log").read_text()
    assert "rank 0 cselab.training.loop INFO training" in log and "2 processes" in log, log[-3000:]
    summary = json.loads((workdir / "results" / "experiments" / EXP_ID / "train_summary.json").read_text())
    assert summary["steps"] == 2


def test_train_job_asked_for_a_gpu(slurm_run, cluster):
    _, output = slurm_run
    (train_id,) = [i for _, i, log in SUBMITTED.findall(output) if "/rule_train/" in log]
    job = cluster.job(train_id)
    assert job["Partition"] == "gpu", job
    assert "gpu:1" in job.get("TresPerJob", ""), job  # sbatch --gpus=1 against the fake gres
    assert job.get("CpusPerTres") == "gres:gpu:1", job  # --cpus-per-gpu=1 (profile)
    assert job["JobState"] == "COMPLETED", job
    for other in (i for _, i, log in SUBMITTED.findall(output) if "/rule_train/" not in log):
        assert "gpu" not in cluster.job(other).get("TresPerJob", ""), other


def test_warning_signal_checkpoints_requeues_and_resumes(cluster, tmp_path_factory, tmp_path):
    """SLURM's warning signal (SIGUSR1 to the job's processes, what ``--signal=USR1@<s>`` sends
    before the time limit; here sent at once with ``scancel --signal=USR1``) during training:
    the training process writes a checkpoint and requeues its own job; SLURM starts it again
    under the same id, it resumes from that checkpoint and completes, and Snakemake, which
    never saw a failure, spends no retry. Starts from the prepared project (tests/built.py): the
    training is the only job."""
    workdir = prepared_project(tmp_path_factory, tmp_path / "wf")
    write_config(workdir, training={"batch_size": 8, "max_steps": 180, "epochs": 6, "eval_steps": 30,
                                    "log_steps": 1, "checkpoint_steps": 1000})
    cfg = read_yaml(workdir / "test.yaml")
    cfg["experiments"] = {EXP: {"plm": "tiny", "method": "simcse"}}
    cfg["tables"] = {"table1": {"experiments": [EXP]}}
    (workdir / "test.yaml").write_text(yaml.safe_dump(cfg))
    summary = workdir / "results" / "experiments" / EXP_ID / "train_summary.json"
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(workdir / "test.yaml"), "--profile", str(LOCAL), "--",
           str(summary.relative_to(workdir))]
    with open(tmp_path / "smk.log", "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**_clean_env(), **cluster.env},
                                cwd=workdir)
    log = workdir / "logs" / "train" / f"{EXP_ID}.log"
    deadline = time.monotonic() + 600
    while not (log.is_file() and "step 60: STS-B dev" in log.read_text()):
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "smk.log").read_text()[-3000:]
        time.sleep(0.5)
    job_id = cluster.run("squeue", "--noheader", "--partition=gpu", "--format=%i").stdout.split()[0]
    cluster.run("scancel", "--signal=USR1", job_id)
    assert proc.wait(timeout=900) == 0, (tmp_path / "smk.log").read_text()[-4000:]
    output = (tmp_path / "smk.log").read_text()
    result = json.loads(summary.read_text())
    assert result["resumed_from_step"] >= 60 and f"resuming {EXP_ID} from step {result['resumed_from_step']}" \
        in log.read_text()  # the requeued attempt's log
    assert cluster.job(job_id).get("Restarts") == "1", cluster.job(job_id)
    trains = [i for _, i, path in SUBMITTED.findall(output) if "/rule_train/" in path]
    assert trains == [job_id], "the job was requeued by SLURM under its id, not resubmitted by Snakemake"
