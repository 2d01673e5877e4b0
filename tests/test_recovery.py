"""A dead invocation recognised (:mod:`cselab.pipeline.recovery`), as library calls: its record
without an end, its jobs' records, Snakemake's incomplete markers and lock files cleared for what
is complete and verified, partial outputs removed (the fault file kills a real snakemake)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from cselab.pipeline import recovery
from cselab.pipeline.locks import INVOCATION_INFO, hold_invocation, last_holder


def marker(output: str) -> Path:
    """Snakemake's incomplete marker of ``output`` (FilePersistence's layout: the path in URL-safe
    base64, split into "@"-prefixed parts under the name length limit)."""
    b64 = base64.urlsafe_b64encode(output.encode()).decode()
    parts = [b64[i:i + 254] for i in range(0, len(b64), 254)]
    path = Path(".snakemake", "incomplete", *["@" + p for p in parts[:-1]], parts[-1])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"external_jobid": None}))
    return path


def test_an_invocation_that_ended_says_so_and_one_killed_does_not(tmp_path):
    script = ("import sys, os; sys.path.insert(0, sys.argv[1]);"
              "from cselab.pipeline.locks import hold_invocation;"
              "hold_invocation(sys.argv[2], 'snakemake x', 'inv-1');"
              "os.kill(os.getpid(), 9) if sys.argv[3] == 'kill' else None")
    root = Path(__file__).resolve().parents[1]
    for how in ("exit", "kill"):
        subprocess.run([sys.executable, "-c", script, str(root), str(tmp_path), how])
        record = last_holder(tmp_path / INVOCATION_INFO)
        assert record["invocation"] == "inv-1" and ("ended" in record) == (how == "exit")
        dead = recovery.dead_invocation(record, tmp_path, holding=False)
        assert (dead is None) == (how == "exit")


def test_a_dead_invocations_state_is_cleared_keeping_what_is_complete(tmp_path, monkeypatch, capsys):
    from cselab.models.checkpoints import record_model_files

    monkeypatch.chdir(tmp_path)
    state = Path(".snakemake/cselab")
    exp = Path("results/experiments/a-s42")
    (exp / "model").mkdir(parents=True)
    (exp / "model" / "model.safetensors").write_bytes(b"weights" * 100)
    record_model_files(exp / "model")
    for name in ("curve.csv", "train_summary.json"):
        (exp / name).write_text("{}")
    (exp / "sts.json").write_text('{"scores": {"a": 1.0}, "avg": 1.0}')  # no record: its job did not end
    done = {"pid": 999999, "started": 1.0, "rule": "train", "wildcards": {"exp": "a-s42"}, "invocation": "inv-1",
            "outputs": [str(exp / "model"), str(exp / "curve.csv"), str(exp / "train_summary.json")], "ended": "done"}
    cut = {"pid": 999998, "started": 1.0, "rule": "evaluate_sts", "wildcards": {"exp": "a-s42"},
           "invocation": "inv-1", "outputs": [str(exp / "sts.json"), str(exp / "sts_pairs.npz")]}
    (state / "jobs").mkdir(parents=True)
    for rec in (done, cut):
        (state / "jobs" / f"{rec['pid']}.json").write_text(json.dumps(rec))
    markers = [marker(o) for o in done["outputs"] + cut["outputs"]]
    Path(".snakemake/locks").mkdir()
    Path(".snakemake/locks/0.output.lock").write_text(str(exp))
    previous = {"pid": 999997, "host": "elsewhere", "since": "then", "what": "snakemake --cores 2 x",
                "invocation": "inv-1"}
    dead = recovery.recover(previous, state, {"mlflow": {}}, executing=True, successor="inv-2")
    assert [(j.label, j.state) for j in dead.jobs] == [("evaluate_sts exp=a-s42", "incomplete"),
                                                       ("train exp=a-s42", "finished")]
    assert not any(m.exists() for m in markers) and not list(Path(".snakemake/locks").glob("*"))
    assert (exp / "model" / "model.safetensors").is_file() and not (exp / "sts.json").exists()
    assert not list((state / "jobs").glob("*.json"))
    err = capsys.readouterr().err
    assert "died without ending: snakemake --cores 2 x (host elsewhere, pid 999997" in err
    assert "kept 3 output(s) complete and verified" in err and "removed 2 partial one(s)" in err


def test_a_job_records_itself_and_says_how_it_ended(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    smk = SimpleNamespace(rule="train", wildcards={"exp": "a"}, output=["results/x"])
    path = tmp_path / "jobs" / f"{os.getpid()}.json"
    with recovery.job_record(smk, tmp_path):
        running = json.loads(path.read_text())
        assert running["rule"] == "train" and "ended" not in running and recovery.alive(running["pid"],
                                                                                       running["started"])
    assert json.loads(path.read_text())["ended"] == "done"
    with pytest.raises(RuntimeError), recovery.job_record(smk, tmp_path):
        raise RuntimeError("the job failed")
    assert json.loads(path.read_text())["ended"] == "failed"
    recovery.prune_job_records(tmp_path)
    assert not path.exists()


def test_hold_invocation_returns_the_last_holders_record_once(tmp_path, monkeypatch):
    from cselab.pipeline import locks

    (tmp_path / INVOCATION_INFO).write_text(json.dumps({"pid": 1, "what": "old", "invocation": "inv-0"}))
    monkeypatch.setattr(locks, "_INVOCATION", None)
    assert hold_invocation(tmp_path, "snakemake y", "inv-9")["invocation"] == "inv-0"
    assert last_holder(tmp_path / INVOCATION_INFO)["invocation"] == "inv-9"
    assert hold_invocation(tmp_path, "snakemake y", "inv-9") is None
    locks._INVOCATION.close()
    monkeypatch.setattr(locks, "_INVOCATION", None)
