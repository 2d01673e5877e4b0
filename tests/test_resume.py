"""Resumable training: kill-and-resume is bit-identical, stale or half-written checkpoints are
ignored, ``stop_at`` keeps the schedule, and the dev metrics come from one encoding pass."""

import csv
import json
import logging
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from cselab.evaluation import sts
from cselab.evaluation.geometry import align_uniform
from cselab.evaluation.sts import dev_metrics
from cselab.training.loop import TIMING_FIELDS, train
from tests.helpers import make_corpus
from tests.test_train import spec_for

PROBE = ["a man plays a guitar .", "a dog runs .", "the cat sleeps in the kitchen .", "a child rides a horse ."]
SUBSET = SimpleNamespace(
    sent1=["a man plays a guitar .", "a dog runs .", "a woman cuts a cake .", "it rains ."],
    sent2=["a man plays the guitar .", "a cat sleeps .", "a woman is cutting a cake .", "the sun shines ."],
    gold=np.array([4.8, 1.0, 4.6, 0.2]))

SCRIPT = """
import json, sys, time
from pathlib import Path
from cselab.training.loop import TIMING_FIELDS, train

spec, corpus, out, hang_at = json.loads(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
probe = json.loads(sys.argv[5])
logged = []

def dev(encoder):  # a deterministic function of the weights, the same in every process
    return 100 * float(encoder.encode(probe, batch_size=4).mean())

def on_log(row):
    logged.append(row["step"])
    if row["step"] == hang_at and "loss" in row:
        print("hanging", flush=True)  # the checkpoint of step hang_at - 1 is on disk: kill me now
        time.sleep(300)

res = train(spec, corpus, dev, out, on_log=on_log, checkpoint_dir=out / "resume")
(out / "result.json").write_text(json.dumps({"best_step": res.best_step, "best_dev": res.best_dev,
                                             "steps": res.steps, "resumed_from": res.resumed_from,
                                             "logged": logged}))
"""


def probe_dev(encoder):
    return 100 * float(encoder.encode(PROBE, batch_size=4).mean())


def resume_spec(tiny_bert, objective="simcse", **training):
    """10 steps (80 sentences, batch 8), a curve row every step, a checkpoint every 2, STS-B dev
    at steps 3, 6, 9 and the last."""
    return spec_for(tiny_bert, objective, **{"max_steps": None, "eval_steps": 3, "eval_at_end": True,
                                             "log_steps": 1, "checkpoint_steps": 2, **training})


def curve_rows(out: Path) -> list[dict]:
    """curve.csv without its timing column."""
    return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in csv.DictReader((out / "curve.csv").open())]


def weights(model_dir: Path) -> dict:
    state = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        state.update(load_file(f))
    state.update({f"head.{k}": v for k, v in torch.load(model_dir / "head.pt").items()})
    return state


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys() and wa
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


class Crash(Exception):
    pass


def crash_at(step: int):
    def on_log(row):
        if row["step"] == step and "loss" in row:
            raise Crash
    return on_log


@pytest.fixture(scope="module", params=["simcse", "compcse"])
def reference(tiny_bert, tmp_path_factory, request):
    """The uninterrupted 10-step run the interrupted ones must reproduce, for each method."""
    tmp = tmp_path_factory.mktemp("reference")
    corpus, out, logged = make_corpus(tmp / "corpus.txt", 80), tmp / "out", []
    spec = partial(resume_spec, tiny_bert, request.param)
    result = train(spec(), corpus, probe_dev, out, on_log=lambda row: logged.append(row["step"]))
    assert result.steps == 10 and logged[0] == 0
    assert [r["step"] for r in curve_rows(out) if r["stsb_dev_spearman"]] == ["0", "3", "6", "9", "10"]
    return SimpleNamespace(corpus=corpus, out=out, result=result, spec=spec)


def assert_same_run(out: Path, result, ref) -> None:
    assert curve_rows(out) == curve_rows(ref.out)
    assert (result.best_step, result.best_dev, result.steps) == (ref.result.best_step, ref.result.best_dev, 10)
    assert_same_weights(out / "model", ref.out / "model")
    assert not (out / "resume").exists()


def test_killed_run_resumes_bit_identical(tiny_bert, reference, tmp_path):
    script, out = tmp_path / "run_train.py", tmp_path / "out"
    script.write_text(SCRIPT)
    cmd = [sys.executable, str(script), json.dumps(reference.spec()), str(reference.corpus), str(out)]
    with (tmp_path / "stderr.txt").open("w") as err:
        proc = subprocess.Popen(cmd + ["5", json.dumps(PROBE)], stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            assert proc.stdout.readline().strip() == "hanging", (tmp_path / "stderr.txt").read_text()
            assert (out / "resume" / "step-00000004" / "meta.json").is_file()
        finally:
            proc.kill()
            proc.wait()
    assert not (out / "curve.csv").exists()
    shutil.rmtree(out / "model")  # Snakemake removes a failed job's outputs before the rerun
    done = subprocess.run(cmd + ["-1", json.dumps(PROBE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    res = json.loads((out / "result.json").read_text())
    assert res["resumed_from"] == 4 and min(res["logged"]) == 5  # rows up to the checkpoint: not again
    assert_same_run(out, SimpleNamespace(**res), reference)


def test_changed_spec_starts_over(tiny_bert, reference, tmp_path, caplog):
    out = tmp_path / "out"
    with pytest.raises(Crash):
        train(reference.spec(lr=2e-3), reference.corpus, probe_dev, out, on_log=crash_at(3),
              checkpoint_dir=out / "resume")
    assert (out / "resume" / "step-00000002").is_dir()
    rows = []
    with caplog.at_level(logging.WARNING, logger="cselab.training"):
        res = train(reference.spec(), reference.corpus, probe_dev, out, on_log=rows.append,
                    checkpoint_dir=out / "resume")
    assert "discarding checkpoint" in caplog.text
    assert res.resumed_from == 0 and rows[0]["step"] == 0
    assert_same_run(out, res, reference)


def test_half_written_checkpoint_is_ignored(tiny_bert, reference, tmp_path, caplog):
    out, resume = tmp_path / "out", tmp_path / "out" / "resume"
    with pytest.raises(Crash):
        train(reference.spec(), reference.corpus, probe_dev, out, on_log=crash_at(5), checkpoint_dir=resume)
    assert sorted(p.name for p in resume.iterdir()) == ["step-00000002", "step-00000004"]  # the two latest
    stray = resume / ".step-00000006.tmp"  # killed while writing the next checkpoint
    stray.mkdir()
    (stray / "state.pt").write_bytes(b"\x80\x02 truncated")
    with caplog.at_level(logging.INFO, logger="cselab.training"):
        res = train(reference.spec(), reference.corpus, probe_dev, out, checkpoint_dir=resume)
    assert res.resumed_from == 4 and "from step 4" in caplog.text
    assert_same_run(out, res, reference)


@pytest.mark.parametrize("damage", ["truncate", "flip", "unloadable-without-checksums"])
def test_damaged_checkpoint_is_moved_aside_and_the_previous_one_resumes(tiny_bert, reference, tmp_path, caplog,
                                                                         damage):
    """A truncated or bit-flipped state.pt fails its checksum; an old checkpoint without
    checksums that does not load fails its load: either is moved aside (``.corrupt``) with one
    message naming it, the run resumes from the previous checkpoint and ends as the reference."""
    out, resume = tmp_path / "out", tmp_path / "out" / "resume"
    with pytest.raises(Crash):
        train(reference.spec(), reference.corpus, probe_dev, out, on_log=crash_at(5), checkpoint_dir=resume)
    state = resume / "step-00000004" / "state.pt"
    data = state.read_bytes()
    if damage == "truncate":
        state.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        state.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    else:
        meta = json.loads((state.parent / "meta.json").read_text())
        (state.parent / "meta.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "files"}))
        state.write_bytes(data[: len(data) // 2])
    with caplog.at_level(logging.INFO, logger="cselab.training"):
        res = train(reference.spec(), reference.corpus, probe_dev, out, checkpoint_dir=resume)
    assert res.resumed_from == 2
    assert "step-00000004 is damaged" in caplog.text and "resuming from the previous one, step-00000002" in caplog.text
    assert_same_run(out, res, reference)
    assert not resume.exists()  # a completed run removes its checkpoints, the damaged one too


def test_every_checkpoint_damaged_starts_over(tiny_bert, reference, tmp_path, caplog):
    out, resume = tmp_path / "out", tmp_path / "out" / "resume"
    with pytest.raises(Crash):
        train(reference.spec(), reference.corpus, probe_dev, out, on_log=crash_at(5), checkpoint_dir=resume)
    for state in resume.glob("step-*/state.pt"):
        state.write_bytes(b"")
    with caplog.at_level(logging.INFO, logger="cselab.training"):
        res = train(reference.spec(), reference.corpus, probe_dev, out, checkpoint_dir=resume)
    assert res.resumed_from == 0 and "starting from step 0" in caplog.text
    assert_same_run(out, res, reference)


def test_same_seed_same_curve_and_weights_with_dev_metrics(tiny_bert, tmp_path):
    corpus = make_corpus(tmp_path / "corpus.txt", 40)
    dev = lambda enc: dev_metrics(partial(enc.encode, batch_size=8), SUBSET)  # noqa: E731
    for i in range(2):
        train(spec_for(tiny_bert, log_steps=1, dropout=0.3), corpus, dev, tmp_path / f"out{i}")
    assert curve_rows(tmp_path / "out0") == curve_rows(tmp_path / "out1")
    assert_same_weights(tmp_path / "out0" / "model", tmp_path / "out1" / "model")
    header = next(csv.reader((tmp_path / "out0" / "curve.csv").open()))
    assert header[:6] == ["step", "epoch", "loss", "lr", "stsb_dev_spearman", "sentences_per_s"]
    assert {"alignment", "uniformity"} <= set(header)
    evals = [r for r in curve_rows(tmp_path / "out0") if r["stsb_dev_spearman"]]
    assert [r["step"] for r in evals] == ["0", "3"] and all(r["alignment"] and r["uniformity"] for r in evals)


def test_stop_at_keeps_the_schedule(tiny_bert, reference, tmp_path):
    part = train(reference.spec(stop_at=4), reference.corpus, probe_dev, tmp_path / "part")
    assert part.steps == 4 and part.best_step <= 4
    trained = [(r["step"], r["loss"], r["lr"]) for r in part.curve if "loss" in r]
    assert trained == [(r["step"], r["loss"], r["lr"]) for r in reference.result.curve if "loss" in r][:4]
    assert trained[-1][2] > 0  # the schedule runs over all 10 steps, not 4
    assert [r["step"] for r in part.curve if "stsb_dev_spearman" in r] == [0, 3, 4]


def test_dev_metrics_encode_once(tiny_encoder, monkeypatch):
    calls = []
    encode = tiny_encoder.encode
    monkeypatch.setattr(tiny_encoder, "encode", lambda s, **kw: calls.append(len(s)) or encode(s, **kw))
    out = dev_metrics(partial(tiny_encoder.encode, batch_size=4), SUBSET)
    assert calls == [8]  # the unique sentences, once
    assert set(out) == {"stsb_dev_spearman", "alignment", "uniformity", "anisotropy", "effective_rank"}
    direct = lambda s: encode(s, batch_size=4)  # noqa: E731
    assert out["stsb_dev_spearman"] == sts.spearman_on_subset(direct, SUBSET)
    geometry = align_uniform(direct, SUBSET)
    assert (out["alignment"], out["uniformity"]) == (geometry["alignment"], geometry["uniformity"])


def test_an_interrupted_run_is_resumed_or_retired(tmp_path, monkeypatch):
    """Tracking after a hard kill: the job's run id waits in its folder; an attempt that resumes
    the checkpoint continues that run (its params kept, a changed operational one as a tag), one
    that starts over marks it KILLED and the two runs point to each other."""
    import mlflow

    from cselab.pipeline import tracking

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    common = {"uri": uri, "experiment_name": "resume-test", "rule": "train", "experiment_id": "e-s1"}
    client = mlflow.MlflowClient(uri)
    killed = client.create_run(tracking.init_store(uri, "resume-test"), tags={"rule": "train"}).info.run_id
    client.log_param(killed, "training.lr", "0.001")
    client.log_param(killed, "operational.devices", "2")
    tracking.remember_run(tmp_path, killed)
    assert tracking.previous_run(tmp_path) == killed

    with tracking.mlflow_run(**common, params={"training": {"lr": 1e-3}, "operational": {"devices": 1}},
                             resume=killed) as r:
        assert r.run_id == killed
    run = client.get_run(killed)
    assert run.info.status == "FINISHED" and run.data.tags["cselab.resumed"] == "1"
    assert run.data.params["operational.devices"] == "2" and run.data.tags["cselab.resume.operational.devices"] == "1"

    stale = client.create_run(run.info.experiment_id).info.run_id  # killed before any checkpoint
    with tracking.mlflow_run(**common) as r:
        tracking.retire(stale, successor=r.run_id)
        new = r.run_id
    assert client.get_run(stale).info.status == "KILLED"
    assert client.get_run(stale).data.tags["cselab.successor_run_id"] == new
    assert client.get_run(new).data.tags["cselab.predecessor_run_id"] == stale
    tracking.forget_run(tmp_path)
    assert tracking.previous_run(tmp_path) is None
