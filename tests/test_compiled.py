"""training.compile's mode choice and its cache guard (cselab.training.compiled): a job killed
mid-compile leaves empty files in inductor's cache, and the next compiled run must still train,
to the same numbers."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from cselab.training import compiled
from tests.helpers import ROOT, make_corpus

RUN = """
import sys
from pathlib import Path
sys.path.insert(0, {root!r})
import json
from safetensors.torch import load_file
from torch._dynamo.utils import counters
from tests.test_train import spec_for
from cselab.training.loop import train
out, seen = Path(sys.argv[1]), {{}}
for name, compile_ in (("eager", False), ("compiled", True)):
    spec = spec_for(Path({bert!r}), "simcse", max_steps=6, eval_steps=None, log_steps=1, dropout=0.1,
                    batch_size=8, compile=compile_)  # as config.yaml's training section names it
    res = train(spec, Path({corpus!r}), lambda enc: 0.0, out / name, device="cpu",
                operational={{"pad_to_multiple_of": 16 if compile_ else None}})
    seen[name] = {{"losses": [r["loss"] for r in res.curve if "loss" in r],
                  "keys": sorted(load_file(out / name / "model" / "model.safetensors"))}}
print("RESULT", json.dumps({{**seen, "graphs": counters["stats"]["unique_graphs"]}}))
"""


@pytest.mark.parametrize("device, world, expected", [
    ("cuda", 1, "reduce-overhead"), ("cpu", 1, False), ("cuda", 2, False)])
def test_auto_is_cuda_graphs_on_one_gpu(device, world, expected):
    """With gradient caching too: its chunks are compiled in their fixed shape (tests/test_chunks.py)."""
    assert compiled.compile_mode("auto", torch.device(device), world) == expected
    for explicit in (False, True, "max-autotune"):  # a mode the config names is kept
        assert compiled.compile_mode(explicit, torch.device(device), world) == explicit


def test_empty_cache_files_are_removed_and_nothing_else(tmp_path, caplog):
    (tmp_path / "ab").mkdir()
    empty = [tmp_path / "ab" / "k.so", tmp_path / "c.py", tmp_path / "ab" / "t.cubin"]
    kept = [tmp_path / "ab" / "whole.so", tmp_path / "x.lock", tmp_path / "notes"]
    for path in empty + kept[1:]:
        path.write_bytes(b"")
    from tests.test_caches import real_library

    kept[0].write_bytes(real_library().read_bytes())
    with caplog.at_level(logging.WARNING, logger="cselab"):
        assert sorted(compiled.drop_partial_files(tmp_path)) == sorted(empty)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in empty)
    assert "removed 3 unreadable file(s)" in caplog.text
    assert compiled.drop_partial_files(tmp_path / "missing") == []


@contextlib.contextmanager
def held_by_another_process(lock):
    """``lock`` (an inductor lock file) held by another process until the block ends."""
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from torch.utils._filelock import FileLock
        with FileLock({str(lock)!r}):
            print("held", flush=True)
            sys.stdin.readline()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.communicate("done\n", timeout=60)


def test_an_empty_library_another_process_is_compiling_is_left_alone(tmp_path):
    """Jobs share a workflow's compile cache: while one job's g++ writes ``<key>.main.so`` (empty
    for a moment) under inductor's ``locks/<key>.lock``, another job's guard must not remove it;
    once that lock is free (the compiler was killed), the empty library goes. A file without a
    lock of its own (the C++ wrapper's ``<key2>.optimized.o``, built under the lock of the
    ``<key>.main.cpp`` beside it) is held by the locks of its folder's keys."""
    (tmp_path / "ab").mkdir()
    (tmp_path / "locks").mkdir()
    lock = tmp_path / "locks" / "cabc.lock"
    library = tmp_path / "ab" / "cabc.main.so"
    library.write_bytes(b"")
    with held_by_another_process(lock):
        assert compiled.drop_partial_files(tmp_path) == [] and library.exists()
    assert compiled.drop_partial_files(tmp_path) == [library] and not library.exists()
    partner = tmp_path / "ab" / "cdef.optimized.o"
    partner.write_bytes(b"")
    (tmp_path / "ab" / "cabc.main.cpp").write_text("// source")
    with held_by_another_process(lock):
        assert compiled.drop_partial_files(tmp_path) == [] and partner.exists()
    assert compiled.drop_partial_files(tmp_path) == [partner] and not partner.exists()


def test_a_failing_compile_is_retried_then_the_step_runs_eager(tiny_bert, tmp_path, monkeypatch, caplog):
    """Two failed compiles: a retry in a fresh cache, then the eager step, with the losses of an
    eager run (the retried step restores its random state: the same dropout)."""
    from torch._dynamo.exc import BackendCompilerFailed

    from cselab.training.loop import train
    from tests.test_train import spec_for

    corpus = make_corpus(tmp_path / "corpus.txt", 24)
    spec = spec_for(tiny_bert, "simcse", max_steps=3, eval_steps=None, log_steps=1, dropout=0.1)
    eager = train(spec, corpus, lambda enc: 0.0, tmp_path / "eager", device="cpu",
                  operational={"compile": False})
    calls = []

    def failing_compile(fn, **kwargs):
        def call(*args, **kw):
            calls.append(kwargs)
            raise BackendCompilerFailed(fn, OSError("a.so: file too short"), None)
        return call

    monkeypatch.setattr(torch, "compile", failing_compile)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))  # restored after the test
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    with caplog.at_level(logging.WARNING, logger="cselab"):
        res = train(spec, corpus, lambda enc: 0.0, tmp_path / "compiled", device="cpu",
                    operational={"compile": True})
    assert len(calls) == 2 and os.environ["TORCHINDUCTOR_CACHE_DIR"] != str(tmp_path / "cache")
    assert "compiling again in a fresh cache" in caplog.text and "a.so: file too short" in caplog.text
    assert "training goes on with the eager step" in caplog.text
    losses = [[r["loss"] for r in run.curve if "loss" in r] for run in (eager, res)]
    assert losses[1] == pytest.approx(losses[0], abs=1e-5)  # the padded forward of a compiled run: float rounding


def test_a_compile_killed_midway_does_not_break_the_next_run(tiny_bert, tmp_path):
    """``training.compile: true`` on the CPU (inductor), in a process of its own: the same losses
    as the eager step at every step, to float rounding (dropout on: its masks are keyed by row and
    position, so padding to multiples of 16 changes none of them, and it is masked), one compiled
    graph per batch width and one for the optimizer's step (no recompile per step: the step's seed
    and the learning rate are tensors), and the saved
    checkpoint's keys unchanged. (Weights are not compared to 1e-4: Adam turns float noise in
    near-zero gradients into steps of size lr; the losses of steps 2 to 6 already depend on the
    compiled updates.)

    Then one compiled .so truncated to 0 bytes (what a kill mid-write left here once: every later
    compiled step failed on it); the next process trains compiled, to the same losses. One
    library, not all: the guard is the same, and the next process rebuilds one kernel with g++
    instead of 27."""
    corpus = make_corpus(tmp_path / "corpus.txt", 48)
    script = tmp_path / "run.py"
    script.write_text(RUN.format(root=str(ROOT), bert=str(tiny_bert), corpus=str(corpus)))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}

    def run(name):
        out = subprocess.run([sys.executable, str(script), str(tmp_path / name)], env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        (result,) = [line.split(" ", 1)[1] for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        return json.loads(result), out.stderr

    first, _ = run("first")
    eager, compiled_ = first["eager"], first["compiled"]
    assert len(eager["losses"]) == 6 and compiled_["losses"] == pytest.approx(eager["losses"], abs=1e-4)
    assert 2 <= first["graphs"] <= 3, first["graphs"]  # widths 16 (and 32), and the optimizer's step
    assert compiled_["keys"] == eager["keys"]
    libraries = sorted((tmp_path / "cache").rglob("*.so"))
    assert libraries, "inductor wrote no compiled library"
    libraries[0].write_bytes(b"")
    second, stderr = run("second")
    assert "unreadable file(s), compiled again when needed" in stderr
    assert second["compiled"]["losses"] == compiled_["losses"]


def test_training_jobs_share_the_workflows_compile_cache_unless_one_is_named(tmp_path, monkeypatch):
    """A training job compiles into results/cache/compile of the workflow's folder (a cluster's
    jobs share no temporary folder), unless the environment names another cache than torch's
    default."""
    from types import SimpleNamespace

    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from cselab.pipeline import tracking
    from cselab.pipeline.jobs import train as train_job
    from cselab.training import loop

    seen = []
    monkeypatch.setattr(loop, "train_job", lambda kwargs: seen.append(os.environ["TORCHINDUCTOR_CACHE_DIR"]))
    monkeypatch.setattr(tracking.RunMetrics, "of", classmethod(lambda cls, run: None))
    monkeypatch.chdir(tmp_path)
    smk = SimpleNamespace(input=SimpleNamespace(corpus=str(make_corpus(tmp_path / "corpus.txt", 4))), params=
                          SimpleNamespace(artifacts={}), log=[], threads=1)
    one_process = SimpleNamespace(training=SimpleNamespace(devices=1, nodes=1))
    for named in (None, os.path.abspath(default_cache_dir()), str(tmp_path / "mine")):
        if named is None:
            monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
        else:
            monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", named)
        train_job._loop(smk, spec=one_process, out_dir=tmp_path / "run", dev_score=None, r=None)
    shared = str(tmp_path / "results" / "cache" / "compile")
    assert seen == [shared, shared, str(tmp_path / "mine")]
    assert compiled.cache_dir() == tmp_path / "mine"


def test_an_eager_training_job_does_not_import_inductor(tmp_path):
    """Naming the workflow's cache imports no compiler when ``TORCHINDUCTOR_CACHE_DIR`` is unset
    (importing inductor costs an eager job about 2 CPU-s); torch's own default is read only when
    the variable names a folder."""
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    check = (f"import sys; from pathlib import Path; sys.path.insert(0, {str(ROOT)!r}); import os;"
             "from cselab.training import compiled; compiled.share_cache(Path(sys.argv[1]));"
             "print(os.environ['TORCHINDUCTOR_CACHE_DIR'], 'torch._inductor' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", check, str(tmp_path / "cache")], env=env, capture_output=True,
                         text=True, check=True)
    assert out.stdout.split() == [str((tmp_path / "cache").resolve()), "False"], out.stderr[-2000:]


class _NoMethods(torch.nn.Module):
    def param_groups(self, lr):
        return []


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_the_compiled_optimizer_step_is_the_eager_one(precision):
    """``training.compile``: AdamW's step (and, without fp16's scaler, the gradient clipping) through
    inductor, its learning rates tensors the linear schedule (warm-up, decay) fills in place: 8 steps
    give the eager step's parameters to fp32 rounding, and the schedule's new rate at every step
    compiles nothing after the first step (fp16: the scaler's unscale and skip stay eager; its
    activations in fp16, the later steps' gradients round apart by a thousandth of a step)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from cselab.settings import training_settings
    from cselab.training.numerics import Precision, linear_schedule, make_optimizer

    t = training_settings({"lr": 1e-2, "weight_decay": 0.01, "max_grad_norm": 0.5, "warmup_steps": 3})
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(1))
    runs = {}
    for compiled_step in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
        optimizer = make_optimizer(model, _NoMethods(), t, torch.device("cpu"))
        params = [p for g in optimizer.param_groups for p in g["params"]]
        scheduler, numerics = linear_schedule(optimizer, 8, 3), Precision(precision, torch.device("cpu"))
        torch._dynamo.reset()
        counters.clear()
        if compiled_step:
            numerics.compile_update(optimizer, params, t.max_grad_norm)
        graphs = []
        for _ in range(8):
            with numerics.autocast():
                loss = (model(x).float() ** 2).mean()
            numerics.backward(loss)
            numerics.step(optimizer, params, t.max_grad_norm)
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            graphs.append(counters["stats"]["unique_graphs"])
        runs[compiled_step] = [p.detach().clone() for p in model.parameters()], graphs, scheduler.get_last_lr()
        # AdamW's step itself traced (not skipped as the schedule's wrapper of it would be): only the
        # graph breaks torch's optimizer step makes around itself (its grad mode)
        assert not [k for k in counters["graph_break"] if "graph_break()" not in k], dict(counters["graph_break"])
    (eager, _, eager_lr), (compiled_, graphs, lr) = runs[False], runs[True]
    assert graphs[0] >= 1 and set(graphs[1:]) == {graphs[0]}, graphs  # compiled once, at the first step
    # fp16's activations round the next steps' gradients anew on any difference of the weights: a
    # thousandth of a step (lr 1e-2) there, fp32 rounding in fp32
    assert max((a - b).abs().max().item() for a, b in zip(eager, compiled_)) <= (1e-6 if precision == "fp32" else 1e-5)
    assert [float(r) for r in lr] == pytest.approx(eager_lr)
