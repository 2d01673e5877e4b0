"""One training job on several processes (gloo on CPU, a tiny random BERT, dropout off): the
same math as one process at the same global batch, resume across world sizes, failures that
name the rank instead of hanging."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch

from cselab.training import distributed as D
from tests.helpers import make_corpus
from tests.test_train import spec_for

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-5


def constant_dev(encoder, value: float = 1.0) -> float:
    return value


def failing_dev(encoder):
    if D.rank() == 0 and os.environ.get("CSELAB_TEST_FAIL_RANK") == "0":
        raise ValueError("dev scoring exploded on purpose")
    return 1.0


def spec(tiny_bert, objective="simcse", options=None, **training):
    # lr 1e-4: AdamW turns float noise in a near-zero gradient into a full step (lr) of either
    # sign; at 1e-4 that noise stays under the 1e-5 tolerance while parameters move by ~3e-4
    # padded forward: every row is computed the same whatever the batch holds, so 1 and 2
    # processes agree to float rounding; the random tiny BERT's InfoNCE gradient is mostly
    # cancellation (all sentences embed alike), which turns the unpadded forward's
    # batch-dependent rounding into 1e-3 relative differences (its own test, below)
    t = {"batch_size": 8, "max_steps": 3, "eval_steps": None, "log_steps": 1, "dropout": 0.0, "lr": 1e-4,
         "unpadded": False, **training}
    return spec_for(tiny_bert, objective, options, **t)


def run(spec_, corpus, out: Path, devices: int, timeout_s: float = 120, entry="cselab.training.loop:train_job",
        **kwargs):
    kwargs = {"spec": spec_, "corpus_path": corpus, "dev_score": constant_dev, "out_dir": out, **kwargs}
    return D.launch(entry, kwargs, devices=devices, workdir=out.parent / f".{out.name}-job",
                    threads=2, timeout_s=timeout_s)


def state(out: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    weights = load_file(out / "model" / "model.safetensors")
    head = out / "model" / "head.pt"
    if head.is_file():
        weights.update({f"head.{k}": v for k, v in torch.load(head).items()})
    return weights


def assert_same(a: Path, b: Path) -> None:
    sa, sb = state(a), state(b)
    assert sa.keys() == sb.keys()
    worst = max((sa[k].float() - sb[k].float()).abs().max().item() for k in sa)
    assert worst < TOL, f"parameters differ by {worst}"


def losses(result) -> list[float]:
    return [row["loss"] for row in result.curve if "loss" in row]


RECORDING = "tests.test_distributed:recording_gradients"
PLAIN = "cselab.training.loop:train_job"
#: the runs compared on 1 and 2 processes: (entry, spec arguments, training settings) by name
TWO_PROCESS_RUNS = {
    "simcse": (RECORDING, ("simcse", {}), {}),
    "compcse": (RECORDING, ("compcse", {"partitions": 2}), {}),
    "batchnorm": (RECORDING, ("simcse", {"head": "batchnorm"}), {}),
    "batchnorm-per-process": (PLAIN, ("simcse", {"head": "batchnorm"}),
                              {"max_steps": 1, "batchnorm_stats": "per_process"}),
    "unpadded": (RECORDING, ("simcse", None), {"unpadded": True, "max_steps": 1}),
    "accumulation": (PLAIN, ("simcse", None), {"accumulation_steps": 2}),
}


def run_each(jobs: list[tuple[str, dict]]) -> list:
    """Training entries run one after another in the same processes (one process group): the
    2-process runs of :data:`TWO_PROCESS_RUNS` pay the workers' start once."""
    return [D._resolve(entry)(kwargs) for entry, kwargs in jobs]


@pytest.fixture(scope="module")
def two_processes(tiny_bert, tmp_path_factory) -> dict[str, tuple[object, Path]]:
    """name -> (rank 0's result, output folder) of every run of :data:`TWO_PROCESS_RUNS`, trained
    on 2 processes in one launch. Tests compare against them and never write to them."""
    base = tmp_path_factory.mktemp("two-processes")
    corpus = make_corpus(base / "corpus.txt", 40)
    jobs = [(entry, {"spec": spec(tiny_bert, *args, **training), "corpus_path": corpus, "dev_score": constant_dev,
                     "out_dir": base / name})
            for name, (entry, args, training) in TWO_PROCESS_RUNS.items()]
    results = D.launch("tests.test_distributed:run_each", jobs, devices=2, workdir=base / ".job", threads=2,
                       timeout_s=120)
    return {name: (result, base / name) for name, result in zip(TWO_PROCESS_RUNS, results)}


def one_and_two(two_processes, tiny_bert, tmp_path, name: str):
    """The run ``name`` on 1 process here (the same entry, spec and corpus), beside its 2-process
    run: ``(one, two, two_dir)``, the 1-process run's folder being ``tmp_path/"one"``."""
    entry, args, training = TWO_PROCESS_RUNS[name]
    two, two_dir = two_processes[name]
    one = run(spec(tiny_bert, *args, **training), two_dir.parent / "corpus.txt", tmp_path / "one", devices=1,
              entry=entry)
    return one, two, two_dir


@pytest.mark.parametrize("name", ["simcse", "compcse", "batchnorm"])
def test_two_processes_equal_one_at_the_same_global_batch(two_processes, tiny_bert, tmp_path, name):
    """Global batch 8, three steps: the same losses, the same averaged gradient at every step
    (the check AdamW's scale invariance cannot hide) and the same parameters, within 1e-5. A
    BatchNorm head normalises over the global batch on gloo too: the same gradients and running
    statistics (its parameters are not compared: BatchNorm makes the gradient of a shift of every
    row exactly 0, e.g. for the encoder's last LayerNorm bias, and AdamW turns the 1e-9 float
    noise there into steps of either sign)."""
    one, two, two_dir = one_and_two(two_processes, tiny_bert, tmp_path, name)
    assert len(losses(one)) == len(losses(two)) == 3
    for a, b in zip(losses(one), losses(two)):
        assert abs(a - b) < TOL, (losses(one), losses(two))
    grads = [torch.load(folder / "grads.pt") for folder in (tmp_path / "one", two_dir)]
    assert len(grads[0]) == len(grads[1]) == 3
    for step, (a, b) in enumerate(zip(*grads)):
        assert [x is None for x in a] == [y is None for y in b]
        worst = max((x - y).abs().max().item() for x, y in zip(a, b) if x is not None)
        # the first step's gradient is pure math (same parameters); later ones also carry the
        # parameters' float noise through AdamW
        assert worst < (1e-7 if step == 0 else TOL), f"step {step + 1}: gradients differ by {worst}"
    if name == "batchnorm":
        a, b = state(tmp_path / "one"), state(two_dir)
        for k in (k for k in a if "running" in k):
            assert (a[k] - b[k]).abs().max().item() < TOL, k
        return
    assert_same(tmp_path / "one", two_dir)
    moved = max((v - state_of_plm(tiny_bert)[k]).abs().max().item() for k, v in state(two_dir).items()
                if not k.startswith("head."))
    assert moved > 10 * TOL  # equal because the same, not because nothing moved (moves ~2e-4)


def test_per_process_batchnorm_statistics_are_another_experiment(two_processes, tiny_bert, tmp_path):
    """batchnorm_stats: per_process normalises each process's shard (DDP's default): not the
    single-process math, which is why it is part of the experiment and not the default."""
    one, two, _ = one_and_two(two_processes, tiny_bert, tmp_path, "batchnorm-per-process")
    a, b = losses(one)[0], losses(two)[0]  # small (dropout off: two identical views), but far apart
    assert abs(a - b) > 0.5 * max(a, b), (a, b)


def test_two_processes_equal_one_with_the_unpadded_forward(two_processes, tiny_bert, tmp_path):
    """The unpadded forward on 2 processes: the same losses and the same first gradient up to
    the rounding its per-process packing brings (1e-2 of the largest gradient, see ``spec``);
    a wrong scale or missing negatives would be off by order one."""
    one, two, two_dir = one_and_two(two_processes, tiny_bert, tmp_path, "unpadded")
    assert losses(one) == pytest.approx(losses(two), abs=TOL)
    a, b = (torch.load(folder / "grads.pt")[0] for folder in (tmp_path / "one", two_dir))
    scale = max(x.abs().max().item() for x in a if x is not None)
    worst = max((x - y).abs().max().item() for x, y in zip(a, b) if x is not None)
    assert worst < 1e-2 * scale, f"gradients differ by {worst} (largest {scale})"


def state_of_plm(tiny_bert) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(Path(tiny_bert) / "model.safetensors")


def test_gather_puts_the_local_shard_back(tiny_bert, tmp_path):
    """Outside a process group the helpers are the identity; the loss marker keeps the value."""
    x = torch.randn(4, 3, requires_grad=True)
    assert D.gather(x) is x and D.world_size() == 1 and D.shard(torch.arange(5)).tolist() == [0, 1, 2, 3, 4]
    loss = (x ** 2).sum()
    assert D.global_term(loss) is loss


def test_accumulation_splits_the_step_into_micro_batches(two_processes, tiny_bert, tmp_path):
    """Two micro-batches of 4 on one process = two processes with two micro-batches of 2 each:
    the micro-batch, not the process, is the unit of in-batch negatives."""
    one, two, two_dir = one_and_two(two_processes, tiny_bert, tmp_path, "accumulation")
    for a, b in zip(losses(one), losses(two)):
        assert abs(a - b) < TOL
    assert_same(tmp_path / "one", two_dir)
    plain = run(spec(tiny_bert), two_dir.parent / "corpus.txt", tmp_path / "plain", devices=1)
    assert abs(losses(plain)[0] - losses(one)[0]) > 1e-4  # fewer negatives per micro-batch: another loss


def _workers_die_with_their_agent(job_folder: str) -> None:
    """The workers of a job killed outright do not wait out the process group's timeout."""
    import time

    import psutil

    deadline = time.monotonic() + 30
    while left := [p for p in psutil.process_iter(["cmdline", "status"])
                   if job_folder in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE]:
        assert time.monotonic() < deadline, f"the killed job's workers outlived it: {[p.pid for p in left]}"
        time.sleep(0.2)


def test_kill_two_processes_and_resume_on_one(tiny_bert, tmp_path):
    """A 2-process job killed after its step-2 checkpoint resumes on 1 process and ends where an
    uninterrupted run ends."""
    corpus = make_corpus(tmp_path / "corpus.txt", 64)
    s = spec(tiny_bert, max_steps=6, checkpoint_steps=2)
    run(s, corpus, tmp_path / "ref", devices=1)

    out, ckpt = tmp_path / "killed", tmp_path / "killed" / "resume"
    script = (f"import sys; sys.path.insert(0, {str(ROOT)!r});"
              "import json, pickle; from pathlib import Path; from cselab.training import distributed as D;"
              f"kw = pickle.loads(Path({str(tmp_path / 'kw.pkl')!r}).read_bytes());"
              f"D.launch('tests.test_distributed:slow_after_checkpoint', kw, devices=2,"
              f" workdir=Path({str(tmp_path / 'killed-job')!r}), threads=2, timeout_s=600)")
    import pickle

    (tmp_path / "kw.pkl").write_bytes(pickle.dumps({"spec": s, "corpus_path": corpus, "dev_score": constant_dev,
                                                    "out_dir": out, "checkpoint_dir": ckpt}))
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    marker = out / "paused"
    import time

    deadline = time.monotonic() + 180
    while not marker.exists():
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "the 2-process run never reached its checkpoint"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-00000002"]
    _workers_die_with_their_agent(str(tmp_path / "killed-job"))

    resumed = run(s, corpus, out, devices=1, checkpoint_dir=ckpt)
    assert resumed.resumed_from == 2 and resumed.steps == 6
    assert_same(tmp_path / "ref", out)
    assert not ckpt.exists()


def slow_after_checkpoint(kwargs: dict):
    """The training entry with a stall after step 2's checkpoint (where the test kills it)."""
    from cselab.training import loop

    original = loop.Checkpoints.save

    def save(self, state, best):
        original(self, state, best)
        Path(kwargs["out_dir"]).mkdir(parents=True, exist_ok=True)
        (Path(kwargs["out_dir"]) / "paused").touch()
        import time

        time.sleep(600)

    loop.Checkpoints.save = save  # only ever run in a worker process of its own
    return loop.train_job(kwargs)


def test_a_failing_rank_stops_the_job_with_its_rank_named(tiny_bert, tmp_path, monkeypatch):
    corpus = make_corpus(tmp_path / "corpus.txt", 40)
    monkeypatch.setenv("CSELAB_TEST_FAIL_RANK", "0")
    s = spec(tiny_bert, eval_steps=1)
    with pytest.raises(D.DistributedError, match=r"rank 0 of 2 .*failed: .*dev scoring exploded on purpose"):
        run(s, corpus, tmp_path / "out", devices=2, dev_score=failing_dev, timeout_s=60)


def test_too_small_a_batch_for_the_processes_is_one_message(tiny_bert, tmp_path):
    corpus = make_corpus(tmp_path / "corpus.txt", 40)
    with pytest.raises(D.DistributedError, match=r"rank \d of 2 .*cannot be split into 2 process"):
        run(spec(tiny_bert, batch_size=2), corpus, tmp_path / "out", devices=2)


def test_partial_dev_score_is_picklable():
    assert partial(constant_dev, value=3.0)(None) == 3.0


def recording_gradients(kwargs: dict):
    """The training entry, saving the (averaged) gradients every step on rank 0 to
    ``out_dir/grads.pt``: the check that does not go through Adam's normalisation."""
    from cselab.training import loop

    original, grads = loop.Precision.step, []

    def step(self, optimizer, params, max_grad_norm):
        if D.is_main():
            grads.append([p.grad.detach().clone() if p.grad is not None else None for p in params])
        original(self, optimizer, params, max_grad_norm)

    loop.Precision.step = step
    try:
        result = loop.train_job(kwargs)
    finally:  # a 1-process launch runs in the test's own process
        loop.Precision.step = original
    if D.is_main():
        torch.save(grads, Path(kwargs["out_dir"]) / "grads.pt")
    return result


def test_scaling_benchmark_runs_on_cpu_processes(tmp_path, monkeypatch):
    """benchmarks_scripts/scaling.py stays runnable without GPUs (gloo processes on the CPU). The
    2-process launch leaves nothing in the temporary folder (torchrun's error files are in the
    launch's own folder, removed when it ends); the benchmark's work folder goes at exit."""
    import tempfile

    sys.path.insert(0, str(ROOT / "benchmarks_scripts"))
    import scaling

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    corpus = make_corpus(tmp_path / "corpus.txt", 64)
    rows = scaling.main(["--corpus", str(corpus), "--size", "tiny", "--devices", "1,2", "--steps", "3",
                         "--per-device-batch", "8", "--threads", "2", "--out", str(tmp_path / "scaling.csv")])
    assert [r["processes"] for r in rows] == [1, 2] and [r["global_batch"] for r in rows] == [8, 16]
    assert all(r["sentences_per_s"] > 0 and r["tokens_per_s"] > 0 for r in rows)
    assert rows[0]["allreduce_mb"] == 0 and rows[1]["allreduce_mb"] > 4 * rows[1]["params"] / 1e6 * 0.99
    assert (tmp_path / "scaling.csv").read_text().startswith("processes,")
    # torch's shared inductor cache (torchinductor_<user>) may be made here too, when first imported
    left = sorted(p.name for p in (tmp_path / "tmp").iterdir() if not p.name.startswith("torchinductor_"))
    assert len(left) == 1 and left[0].startswith("cselab-scaling-"), left  # no torchelastic_* folder
    assert not (tmp_path / "tmp" / left[0] / "launch-2").exists()


def test_workflow_trains_one_experiment_on_two_processes(tmp_path_factory, tmp_path):
    """rule train with training.devices 2 (no SLURM): one MLflow run, logged by rank 0 while it
    trains, with world_size 2; the outputs of a single-process job."""
    import json

    import mlflow

    from tests.built import prepared_project
    from tests.test_workflow import snakemake, write_config

    prepared_project(tmp_path_factory, tmp_path)
    write_config(tmp_path, training={"batch_size": 16, "max_len": 32, "max_steps": 4, "lr": 1e-4, "eval_steps": 2,
                                     "log_steps": 1, "devices": 2},
                 experiments={"simcse-tiny": {"plm": "tiny", "method": "simcse"}})
    summary = tmp_path / "results" / "experiments" / "simcse-tiny-s42" / "train_summary.json"
    console = snakemake(tmp_path, "--cores", "2", "--", str(summary.relative_to(tmp_path))).stderr.splitlines()
    # the workers' console is the job's: rank 0's progress named by the job, their records in its log alone
    assert any(x.endswith("] train exp=simcse-tiny-s42: training: 0 of 4 steps (0%), 0.0 steps/s, 0:00 elapsed, "
                          "ETA unknown") for x in console), console
    assert not any(" cselab INFO " in x or " rank 0 " in x for x in console), console
    log = (tmp_path / "logs" / "train" / "simcse-tiny-s42.log").read_text()
    assert " rank 0 cselab.training.loop INFO training simcse-tiny-s42: " in log
    result = json.loads(summary.read_text())
    assert result["steps"] == 4 and result["best_step"] in (2, 4)
    assert (summary.parent / "model" / "model.safetensors").is_file() and not (summary.parent / "resume").exists()
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}")
    (run,) = [r for r in client.search_runs([e.experiment_id for e in client.search_experiments()])
              if r.data.tags.get("rule") == "train"]
    assert run.data.params["world_size"] == "2" and run.data.params["operational.devices"] == "2"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [1, 2, 3, 4]
    log = (tmp_path / "logs" / "train" / "simcse-tiny-s42.log").read_text()
    assert run.info.status == "FINISHED" and "rank 0" in log


def test_multi_node_agent_entry_and_refusal(tiny_bert, tmp_path, monkeypatch):
    """The per-node agent that srun starts (``python -m cselab.training.distributed agent``)
    trains when its rendezvous is reachable (here: one node, the endpoint on localhost); outside
    an allocation of enough nodes a multi-node job is refused in one message; the srun line
    starts one agent per node inside the job's step."""
    import pickle

    corpus = make_corpus(tmp_path / "corpus.txt", 40)
    kwargs = {"spec": spec(tiny_bert), "corpus_path": corpus, "dev_score": constant_dev, "out_dir": tmp_path / "out"}
    job = {"entry": "cselab.training.loop:train_job", "payload": pickle.dumps(kwargs),
           "result": str(tmp_path / "result.pt"), "timeout_s": 60, "log_file": None, "threads": 1,
           "sys_path": sys.path}
    (tmp_path / "job.pkl").write_bytes(pickle.dumps(job))
    monkeypatch.setattr(D, "head_node", lambda: "localhost")
    monkeypatch.setenv("CSELAB_RDZV_PORT", str(D._free_port()))
    assert D.main(["agent", str(tmp_path / "job.pkl"), "2", "1"]) == 0
    assert torch.load(tmp_path / "result.pt", weights_only=False).steps == 3

    for var in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(D.DistributedError, match=r"training.nodes is 2 but this job runs in no SLURM allocation"):
        D.launch("cselab.training.loop:train_job", kwargs, devices=2, nodes=2, workdir=tmp_path / "multi",
                 timeout_s=600)
    cmd = D.srun_command(tmp_path / "job.pkl", devices=4, nodes=2, python="python")
    assert cmd[:6] == ["srun", "--overlap", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert cmd[6:] == ["python", "-m", "cselab.training.distributed", "agent", str(tmp_path / "job.pkl"), "4", "2"]


def killed_rank_one(kwargs: dict):
    """The training entry, with rank 1 killed by SIGKILL at its first step (as the OOM killer does)."""
    from cselab.training import loop

    if D.rank() == 1:
        original = loop.Precision.step

        def step(self, *args):
            os.kill(os.getpid(), signal.SIGKILL)
            original(self, *args)

        loop.Precision.step = step
    return loop.train_job(kwargs)


def test_a_killed_rank_is_named_not_waited_for(tiny_bert, tmp_path):
    corpus = make_corpus(tmp_path / "corpus.txt", 40)
    with pytest.raises(D.DistributedError, match=r"rank 1 of 2 .*killed by SIGKILL"):
        run(spec(tiny_bert), corpus, tmp_path / "out", devices=2, entry="tests.test_distributed:killed_rank_one",
            timeout_s=60)
