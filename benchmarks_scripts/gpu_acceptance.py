"""GPU acceptance in one run: every method trains, the step stays on the device, the numerics
agree across forward layouts and devices, and the pipeline is timed against a plain loop.

On the GPU machine (shared/gpu/README.md), BERT-base built from a config:

    python benchmarks_scripts/gpu_acceptance.py --senteval ../shared/data/senteval \\
        --corpus ../shared/data/wiki1m_head.txt --out results/benchmarks/gpu_acceptance

At tiny size on the CPU (the test suite runs this, so it cannot rot; at that size the BERT's and
the generator's vocabulary is cut to what the sentences need, ``train_speed.cut_vocabulary``):

    python benchmarks_scripts/gpu_acceptance.py --device cpu --size tiny --steps 6 --batch-sizes 16,32 \\
        --out /tmp/acceptance

Checks (a failed one makes the exit status 1; every row lands in ``<out>/acceptance.csv`` and
``acceptance.md``, which name the device, the date and the command):

1. ``train``: every method for ``--steps`` steps on one repeated batch, in each precision the
   device supports (fp32, bf16, fp16 on CUDA; fp32, bf16 on the CPU): SimCSE, CompCSE in every
   aggregation, DiffCSE and the edits as SimCSE's negatives (a generator built from a config),
   InfoCSE stage 1 and stage 2 (from that stage 1), every loss of the gradient paradigm. Finite
   step losses, the loss on that batch at fixed randomness (the same masks, edits and dropout)
   lower after the steps than before, and the peak memory. On
   CUDA each step runs under ``torch.cuda.set_sync_debug_mode("error")``: a host sync fails it.
2. ``layouts``: the unpadded forward against the padded one (embeddings and gradients, keyed
   dropout on): fp32 to 1e-5, bf16 to 2e-2 (relative to the largest value).
3. ``sts``: the 7 STS averages of one fixed checkpoint on the device and on the CPU in the
   device's precision (CUDA encodes in bf16: the CPU under bf16 autocast beside it), within 0.02
   points, the CPU's fp32 average beside them (what bf16 moves: 0.025 points for the tiny random
   BERT), and the time of the device's evaluation (with ``--senteval``).
4. ``distributed``: a one-process process group (NCCL on CUDA, gloo on the CPU) training a
   BatchNorm head over the global batch: the same losses as without a process group.
5. ``speed``: the pipeline against ``throughput.py``'s plain Hugging Face loop, alternating,
   ``--rounds`` times: SimCSE and CompCSE at the first batch size, SimCSE at the second; every
   other method at its paper batch (pipeline only); gradient caching (chunk 16 at 64, chunk 128
   at 1024) against the unchunked step. Sentences/s, real tokens/s, MFU over real tokens (the
   full model's FLOPs per real token, ``--peak-tflops``), peak memory. Reported, not asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import functools
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_settings as settings  # noqa: E402
import throughput  # noqa: E402

AGGREGATIONS = ("sum", "avg", "concat_halves", "concat_project", "concat_absdiff_project")
PARADIGM = {"head": "linear", "head_std": 6e-3, "m": 0.30, "tau": 0.05}
GEN = "GEN"  # stands for the generator built from a config
#: losses whose gradient is not their value's (a stop-gradient surrogate: MHS pushes each row from
#: its nearest detached row of the other view): training need not lower the value, so their check
#: is a finite loss that training moves
SURROGATES = ("paradigm-mhs",)


def method_cases(paradigm_losses: tuple[str, ...]) -> dict[str, tuple]:
    """name -> (objective, options, auxiliaries, paper batch, training overrides)."""
    cases = {"simcse": ("simcse", {}, {}, 64, {})}
    cases.update({f"compcse-{a}": ("compcse", {"aggregation": a}, {}, 64, {}) for a in AGGREGATIONS})
    cases["diffcse"] = ("simcse", {"head": "batchnorm"},
                        {"rtd": {"weight": 5e-3, "options": {"mask_ratio": 0.3, "generator": GEN}}}, 64, {})
    cases["diffcse-edits"] = ("simcse_edits", {"use": "negative", "augment": "replace", "mask_ratio": 0.15,
                                               "generator": GEN}, {}, 64, {})
    cases["infocse-stage1"] = ("infocse_pretrain", {"mask_ratio": 0.15, "whole_word": True, "extra_layers": 2},
                               {}, 1024, {"chunk_size": 128, "warmup_ratio": 0.0, "weight_decay": 0.01})
    cases["infocse-stage2"] = ("simcse", {"head": "batchnorm"},
                               {"infocse_mlm": {"weight": 1e-5, "options": {"mask_ratio": 0.4, "pretrained": True}}},
                               64, {})
    for loss in paradigm_losses:
        cases[f"paradigm-{loss}"] = ("paradigm", {**PARADIGM, "loss": loss}, {}, 128, {})
    return cases


def precisions(device: str) -> tuple[str, ...]:
    return ("fp32", "bf16", "fp16") if device == "cuda" else ("fp32", "bf16")


def spec_for(name: str, case: tuple, model_dir: Path, generator: Path, batch: int, steps: int, precision: str,
             lr: float = 5e-5, **training) -> dict:
    objective, options, auxiliaries, _, overrides = case

    def gen(opts: dict) -> dict:
        return {k: str(generator) if v == GEN else v for k, v in opts.items()}

    auxiliaries = {k: {**a, "options": gen(a["options"])} for k, a in auxiliaries.items()}
    t = settings.training(**{"batch_size": batch, "max_len": 32, "epochs": steps, "max_steps": steps, "lr": lr,
                             "eval_steps": None, "log_steps": 1, "warmup_steps": 0, "precision": precision,
                             **overrides, **training})
    return {"id": f"{name}-{precision}-b{batch}", "name": name, "plm": "bench", "model": str(model_dir),
            "method": objective, "objective": objective, "weight": 1.0, "options": gen(options),
            "auxiliaries": auxiliaries, "signature": name, "seed": 42, "training": t}


class Report:
    """The rows of the run; ``check`` rows say ok / FAILED."""

    def __init__(self, device_name: str, out: Path, command: str):
        self.rows: list[dict] = []
        self.device_name, self.out, self.command = device_name, out, command
        self.failed = 0

    def add(self, section: str, name: str, ok: bool | None, **values) -> None:
        """Record a row and write the report at once: a run cut short keeps every row it made."""
        status = "-" if ok is None else "ok" if ok else "FAILED"
        self.failed += ok is False
        row = {"section": section, "name": name, "status": status, **values}
        self.rows.append(row)
        print(row, flush=True)
        self.write()

    def write(self) -> None:
        out, command = self.out, self.command
        out.mkdir(parents=True, exist_ok=True)
        fields = list(dict.fromkeys(k for r in self.rows for k in r))
        with open(out / "acceptance.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields)
            writer.writeheader()
            writer.writerows(self.rows)
        lines = [f"# GPU acceptance on {self.device_name}", "",
                 f"{datetime.date.today().isoformat()}, `{command}`; {self.failed} check(s) failed."]
        for section in dict.fromkeys(r["section"] for r in self.rows):  # a table per section, its own columns
            rows = [r for r in self.rows if r["section"] == section]
            columns = [f for f in dict.fromkeys(k for r in rows for k in r) if f != "section"]
            lines += ["", f"## {section}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            lines += ["| " + " | ".join(_cell(r.get(f)) for f in columns) + " |" for r in rows]
        (out / "acceptance.md").write_text("\n".join(lines) + "\n")


def _cell(value) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value).replace("|", "/")


# -- the pieces ------------------------------------------------------------------------------------

@contextlib.contextmanager
def peak_memory(device: str):
    """Yields a dict that holds ``peak_mb`` (CUDA's peak allocated memory) when the block ends."""
    import torch

    out: dict = {}
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    yield out
    if device == "cuda":
        torch.cuda.synchronize()
        out["peak_mb"] = round(torch.cuda.max_memory_allocated() / 2 ** 20)


# Ops whose output shape or value the host must read: on CUDA each one waits for the device.
SYNCING_OPS = {"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique", "_unique2", "unique_dim",
               "unique_consecutive", "equal", "is_nonzero", "argwhere"}


def syncing_op(func, args, kwargs) -> bool:
    """Whether an aten call would make the host wait for a CUDA device."""
    import torch

    name = func._overloadpacket.__name__
    if name in SYNCING_OPS:
        return True
    if name in ("index", "index_put", "index_put_", "_index_put_impl_"):  # a boolean-mask index is a nonzero
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        return any(t is not None and t.dtype in (torch.bool, torch.uint8) for t in indices)
    if name == "repeat_interleave":
        return kwargs.get("output_size") is None and (len(args) < 4 or args[3] is None)
    return False


#: (file, function) of the step's code that works on host tensors by design, on CUDA too: the
#: batch builder's CPU ``lengths`` (the packing, the natural width) and the optimizer's CPU step
#: counters (the plain loop's optimizer reads them alike)
HOST_SIDE = {("unpadded.py", "__init__"), ("mlm.py", "batch_width"), ("numerics.py", "step")}


def host_side() -> bool:
    """Whether the op being dispatched comes from :data:`HOST_SIDE` code (the caller's frames,
    walked without reading their source lines as ``traceback.extract_stack`` would)."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if (os.path.basename(code.co_filename), code.co_name) in HOST_SIDE:
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def steps_without_host_sync(device: str):
    """Every training step (not the set-up, logging or evaluation around it) with no host sync.

    On CUDA under ``torch.cuda.set_sync_debug_mode("error")``: a device-to-host sync raises. On the
    CPU a dispatch mode raises at any op that would sync on CUDA (a host read, a boolean-mask index,
    nonzero, unique...), so the CPU run finds them too."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from cselab.training.loop import Trainer

    class NoSyncingOps(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if syncing_op(func, args, kwargs or {}) and not host_side():
                raise RuntimeError(f"called a synchronizing op on CUDA: {func}")
            return func(*args, **(kwargs or {}))

    step = Trainer.step

    def guarded(self, *args, **kwargs):
        if device != "cuda":
            with NoSyncingOps():
                return step(self, *args, **kwargs)
        torch.cuda.set_sync_debug_mode("error")
        try:
            return step(self, *args, **kwargs)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    Trainer.step = guarded
    before = os.environ.get("CSELAB_SYNC_FREE")
    os.environ["CSELAB_SYNC_FREE"] = "1"  # on the CPU too, the paths CUDA takes
    try:
        yield
    finally:
        Trainer.step = step
        if before is None:
            del os.environ["CSELAB_SYNC_FREE"]
        else:
            os.environ["CSELAB_SYNC_FREE"] = before


def repeated_corpus(lines: list[str], batch: int, work: Path) -> Path:
    """A corpus of exactly one batch: every step trains on the same sentences."""
    path = work / f"repeated-{batch}.txt"
    if not path.exists():
        path.write_text("\n".join((lines * (batch // max(1, len(lines)) + 1))[:batch]) + "\n")
    return path


def train_case(spec: dict, corpus: Path, work: Path, device: str, artifacts: dict | None = None):
    from cselab.training.loop import train

    stage = spec["objective"] == "infocse_pretrain"
    return train(spec, corpus, None if stage else (lambda encoder: 0.0), work / spec["id"], device=device,
                 artifacts=artifacts, token_cache=work / "tokens")


def fixed_loss(run, index, seed: int = 1234) -> float:
    """The objective on ``index`` at fixed randomness (the same masks, edits and dropout keys
    every call), without a graph: what the optimizer should bring down on a repeated batch."""
    import torch

    from cselab.data.tokens import to_device

    with torch.random.fork_rng(devices=[run.dev] if run.dev.type == "cuda" else []), torch.no_grad():
        torch.manual_seed(seed)
        host = run.corpus.batch(index, run.encoder.tokenizer.pad_token_id)
        batch = run.objective.prepare({**to_device(host, run.dev), "index": index, "lengths": run.corpus.lengths[index]})
        run.objective.runner.begin(len(index), 0, run.dev)
        with run.precision.autocast():
            loss, _, _ = run.trainable(batch)
    return float(loss)


def train_repeated(spec: dict, corpus: Path, work: Path, device: str, artifacts: dict | None) -> dict:
    """``steps`` optimizer steps of the shared loop's :meth:`Trainer.step` on one batch: each
    step's loss, and the loss at fixed randomness before and after (a stage exports its model)."""
    import torch

    from cselab.settings import ExperimentSpec
    from cselab.training.loop import Trainer, Window, set_seed

    set_seed(spec["seed"])
    run = Trainer(ExperimentSpec.of(spec), torch.device(device), work / spec["id"], None, None)
    run.set_up(corpus, artifacts, work / "tokens")
    run.optimizer_and_schedule()
    run.process_group()
    run.objective.train()
    run.encoder.train()
    index = torch.arange(len(run.corpus))
    before, losses = fixed_loss(run, index), []
    for _ in range(spec["training"]["max_steps"]):
        window = Window()
        run.step(index, window, 1)
        losses.append(window.means()["loss"])
    after = fixed_loss(run, index)
    if spec["objective"] == "infocse_pretrain":
        run.finish(None)
    return {"losses": losses, "before": before, "after": after}


def check_training(report: Report, args, model_dir: Path, generator: Path, lines: list[str], work: Path) -> None:
    from cselab.training.methods.infocse import ARTIFACT
    from cselab.training.methods.paradigm import LOSSES

    cases = method_cases(LOSSES)
    only = set(args.methods.split(",")) if args.methods else None
    for precision in precisions(args.device):
        stage1 = None
        for name, case in cases.items():
            if only and name not in only and not (name == "infocse-stage1" and "infocse-stage2" in only):
                continue
            batch = min(case[3], args.batch_sizes[0])
            spec = spec_for(name, case, model_dir, generator, batch, args.steps, precision, lr=1e-4,
                            **({"chunk_size": None} if batch <= 128 else {}))
            artifacts = {ARTIFACT: stage1} if name == "infocse-stage2" else None
            if name == "infocse-stage2" and stage1 is None:
                report.add("train", name, False, precision=precision, batch=batch, error="stage 1 did not train")
                continue
            try:
                with peak_memory(args.device) as mem, steps_without_host_sync(args.device):
                    res = train_repeated(spec, repeated_corpus(lines, batch, work), work, args.device, artifacts)
            except Exception as e:  # noqa: BLE001 (the row says what failed; the run goes on)
                report.add("train", name, False, precision=precision, batch=batch, error=f"{type(e).__name__}: {e}"[:300])
                continue
            if name == "infocse-stage1":
                stage1 = work / spec["id"] / "model"
            finite = all(math.isfinite(v) for v in res["losses"])
            moved = res["after"] != res["before"] if name in SURROGATES else res["after"] < res["before"]
            report.add("train", name, finite and moved, precision=precision, batch=batch,
                       loss_before=res["before"], loss_after=res["after"], last_step_loss=res["losses"][-1], **mem,
                       sync_checked=True)


def check_layouts(report: Report, args, model_dir: Path, lines: list[str]) -> None:
    import torch

    from cselab.models import keyed
    from cselab.models.encoder import load_encoder

    for dtype, tol in (("fp32", 1e-5), ("bf16", 2e-2)):
        for pooler in ("cls", "avg"):
            torch.manual_seed(0)
            encoder = load_encoder(model_dir, pooler=pooler, dropout=0.1).to(args.device).train()
            keyed.install(encoder, "encoder")
            ids = encoder.tokenize(lines[:32], 32)
            batch = encoder.pad(ids)
            lengths = torch.tensor([len(i) for i in ids])
            keys = keyed.mix(torch.arange(len(ids), device=args.device))
            outs = []
            for unpadded in (True, False):
                encoder.use_unpadded(unpadded)
                encoder.zero_grad()
                amp = (torch.autocast(args.device, dtype=torch.bfloat16) if dtype == "bf16"
                       else contextlib.nullcontext())
                with keyed.keys(keys), amp:
                    out = encoder(batch["input_ids"], batch["attention_mask"], lengths).float()
                out.square().sum().backward()
                grad = torch.cat([p.grad.float().reshape(-1) for p in encoder.parameters() if p.grad is not None])
                outs.append((out.detach(), grad))
            (a, ga), (b, gb) = outs  # the largest difference relative to the largest value
            err = max(float((a - b).abs().max() / a.abs().max()), float((ga - gb).abs().max() / ga.abs().max()))
            report.add("layouts", f"unpadded-vs-padded-{pooler}", err <= tol, precision=dtype, max_rel_diff=err,
                       tolerance=tol)


def check_sts(report: Report, args, model_dir: Path) -> None:
    import torch

    from cselab.evaluation.sts import evaluate_sts
    from cselab.models.encoder import load_encoder

    root = args.senteval / "downstream" if (args.senteval / "downstream").is_dir() else args.senteval
    encoder = load_encoder(model_dir).to(args.device)

    def average(autocast: bool = False) -> float:
        amp = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
        with amp:
            return evaluate_sts(functools.partial(encoder.encode, batch_size=128, max_tokens=16384), root)["avg"]

    for run in range(args.sts_repeats):  # the first pays the warm-up
        tic = time.perf_counter()
        device_avg = average()
        report.add("sts", f"7-task STS on {args.device}, run {run + 1}", None, seconds=time.perf_counter() - tic,
                   avg=device_avg)
    if args.sts_compare and args.device != "cpu":
        encoder.to("cpu")
        same, fp32 = average(autocast=True), average()  # CUDA encodes in bf16 (Encoder.encode)
        diff = abs(device_avg - same)
        report.add("sts", f"{args.device} vs cpu, both bf16", diff <= 0.02, diff=diff, tolerance=0.02, avg=same)
        report.add("sts", "cpu fp32 (what bf16 moves)", None, avg=fp32, diff=abs(device_avg - fp32))


def check_distributed(report: Report, args, model_dir: Path, generator: Path, lines: list[str], work: Path) -> None:
    import torch.distributed as dist

    from cselab.training import distributed as D

    case = ("simcse", {"head": "batchnorm"}, {}, 16, {})
    corpus = repeated_corpus(lines, 16, work)
    plain = train_case(spec_for("bn-plain", case, model_dir, generator, 16, 4, "fp32"), corpus, work, args.device)
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(throughput_free_port())}
    os.environ.update(env)
    try:
        D.setup(120)
        backend = dist.get_backend()
        grouped = train_case(spec_for("bn-group", case, model_dir, generator, 16, 4, "fp32"), corpus, work,
                             args.device)
    finally:
        D.teardown()
        for key in env:
            os.environ.pop(key, None)
    a, b = ([r["loss"] for r in res.curve if "loss" in r] for res in (plain, grouped))
    diff = max(abs(x - y) for x, y in zip(a, b))
    report.add("distributed", f"one process, {backend}, global BatchNorm", diff <= 1e-5, max_loss_diff=diff)


def throughput_free_port() -> int:
    from cselab.training.distributed import _free_port

    return _free_port()


# -- speed -------------------------------------------------------------------------------------

def pipeline_speed(spec: dict, corpus: Path, work: Path, device: str) -> dict:
    """Steady sentences/s, real tokens/s and MFU of the shared loop (windows after the first two)."""
    with peak_memory(device) as mem:
        res = train_case(spec, corpus, work, device)
    rows = [r for r in res.curve if r.get("sentences_per_s")]
    steady = rows[2:] or rows
    out = {"sentences_per_s": len(steady) / sum(1 / r["sentences_per_s"] for r in steady),
           "tokens_per_s": statistics.fmean(r["tokens_per_s"] for r in steady), **mem}
    if all("mfu" in r for r in steady):
        out["mfu"] = statistics.fmean(r["mfu"] for r in steady)
    return out


def speed_corpus(lines: list[str], batch: int, steps: int, work: Path) -> Path:
    """``steps`` batches of the sentences, repeated as needed (a fresh sentence every row)."""
    needed = steps * batch
    corpus = work / f"speed-{batch}-{steps}.txt"
    corpus.write_text("\n".join((lines * (needed // max(1, len(lines)) + 1))[:needed]) + "\n")
    return corpus


def speed_cases(args, keys: list[str] | None = None) -> list[tuple[str, str, int, dict, bool]]:
    """(label, case name, batch, training overrides, with a plain loop beside it)."""
    from cselab.training.methods.paradigm import LOSSES

    small, large = args.batch_sizes[0], args.batch_sizes[-1]
    eager = {"compile": False}
    # the unlabelled rows run config.yaml's defaults (compile: auto), the others name their mode
    rows = [("simcse", "simcse", small, {}, True), ("compcse", "compcse-avg", small, {}, True),
            ("simcse", "simcse", large, {}, True), ("simcse eager", "simcse", small, eager, True),
            ("compcse eager", "compcse-avg", small, eager, True), ("simcse eager", "simcse", large, eager, True)]
    if args.device == "cuda":  # the other modes of docs/speed.md, each beside the plain loop
        rows += [("simcse padded", "simcse", small, {"unpadded": False, **eager}, True),
                 ("simcse compiled", "simcse", small, {"compile": True}, True),
                 ("simcse cudagraphs", "simcse", small, {"compile": "reduce-overhead"}, True)]
    for name, case in method_cases(LOSSES).items():
        if name not in ("simcse", "compcse-avg") and not name.startswith("compcse-"):
            batch = case[3] if args.device == "cuda" else min(case[3], small)
            rows.append((name, name, batch, {"chunk_size": None}, False))
    for batch, chunk in ((64, 16), (1024, 128)) if args.device == "cuda" else ((small, small // 4), (large, large // 8)):
        # the default (compile: auto) compiles gradient caching's chunks in one fixed shape; each beside
        # the unchunked step, eager and in the default mode, and the eager chunks
        rows += [(f"simcse unchunked b{batch}", "simcse", batch, {"chunk_size": None, **eager}, False),
                 (f"simcse unchunked auto b{batch}", "simcse", batch, {"chunk_size": None}, False),
                 (f"simcse chunk {chunk} b{batch}", "simcse", batch, {"chunk_size": chunk}, False),
                 (f"simcse chunk {chunk} eager b{batch}", "simcse", batch, {"chunk_size": chunk, **eager}, False)]
    stage1 = 1024 if args.device == "cuda" else small  # InfoCSE's stage 1 in accumulated micro-batches of an eighth
    rows.append(("infocse-stage1 micro", "infocse-stage1", stage1, {"chunk_size": stage1 // 8}, False))
    keys = keys or (args.speed_cases.split(",") if args.speed_cases else None)
    if keys:
        by_key = {f"{r[0].replace(' ', '_')}@{r[2]}": r for r in rows}
        unknown = [k for k in keys if k not in by_key]
        if unknown:
            raise SystemExit(f"unknown speed case(s) {unknown}; known: {sorted(by_key)}")
        rows = [by_key[k] for k in keys]  # in the order asked
    return rows


def check_speed(report: Report, args, model_dir: Path, generator: Path, lines: list[str], work: Path) -> None:
    from cselab.training.methods.paradigm import LOSSES

    cases = method_cases(LOSSES)
    precision = "bf16" if args.device == "cuda" else "fp32"
    for label, name, batch, overrides, plain in speed_cases(args):
        if name == "infocse-stage2" or name == "infocse-stage1":
            overrides = {**overrides, "chunk_size": None} if batch <= 128 else overrides
        corpus = speed_corpus(lines, batch, args.speed_steps, work)
        corpus_lines = corpus.read_text().splitlines()
        spec = spec_for(name, cases[name], model_dir, generator, batch, args.speed_steps, precision, lr=3e-5,
                        peak_tflops=args.peak_tflops if args.device == "cuda" else None,
                        log_steps=args.log_steps, **overrides)
        spec["id"] += f"-{label.replace(' ', '_')}"
        if name == "infocse-stage2":
            report.add("speed", label, None, batch=batch, note="timed as stage 2 without stage 1 weights")
            spec["auxiliaries"]["infocse_mlm"]["options"]["pretrained"] = False
        ours, theirs = [], []
        for _ in range(args.rounds):
            ours.append(pipeline_speed(spec, corpus, work, args.device))
            if plain:
                method = "compcse" if name.startswith("compcse") else "simcse"
                theirs.append(throughput.plain_train(model_dir, corpus_lines, method, batch, 32, args.speed_steps,
                                                     args.device))
        median = {k: statistics.median(o[k] for o in ours) for k in ours[0]}
        extra = {}
        if plain:
            extra = {"plain_sentences_per_s": statistics.median(t["sentences_per_s"] for t in theirs)}
            extra["ratio_to_plain"] = median["sentences_per_s"] / extra["plain_sentences_per_s"]
        report.add("speed", label, None, batch=batch, precision=precision, **median, **extra)


def profile_case(spec: dict, corpus: Path, work: Path, device: str, skip: int, active: int) -> dict:
    """The shared loop under PyTorch's profiler for ``active`` steps after ``skip``: the device's
    busy share of those steps' wall time (kernel time summed over wall time), the step time and
    the top kernels by device time (``table``)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from cselab.training.loop import Trainer

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    prof = profile(activities=activities, schedule=schedule(wait=skip - 1, warmup=1, active=active, repeat=1))
    step, seen, clock = Trainer.step, [0], {}

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def profiled(self, *args, **kwargs):
        if seen[0] == skip:
            sync()
            clock["start"] = time.perf_counter()
        out = step(self, *args, **kwargs)
        seen[0] += 1
        if seen[0] == skip + active:
            sync()
            clock["end"] = time.perf_counter()
        prof.step()
        return out

    Trainer.step = profiled
    try:
        with prof:
            train_case(spec, corpus, work, device)
    finally:
        Trainer.step = step
    events = prof.key_averages()
    attr = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    wall = clock["end"] - clock["start"]
    out = {"step_ms": 1e3 * wall / active, "table": events.table(sort_by=attr, row_limit=15)}
    if device == "cuda":  # the kernels' busy time (their intervals' union) over the steps' wall time
        kernels = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                         if e.device_type == torch.autograd.DeviceType.CUDA)
        busy, end = 0.0, -math.inf
        for start, stop in kernels:
            busy += max(0.0, stop - max(start, end))
            end = max(end, stop)
        out.update(device_busy=busy / 1e6 / wall, kernels_per_step=len(kernels) / active,
                   kernel_ms_per_step=busy / 1e3 / active)
    return out


def check_profile(report: Report, args, model_dir: Path, generator: Path, lines: list[str], work: Path) -> None:
    """``--profile-cases`` (label@batch of the speed cases) profiled: where a step's time goes."""
    cases = method_cases(())
    precision = "bf16" if args.device == "cuda" else "fp32"
    wanted = args.profile_cases.split(",")
    for label, name, batch, overrides, _ in speed_cases(args, keys=wanted):
        steps, skip, active = args.speed_steps, max(2, args.speed_steps // 2), max(1, args.speed_steps // 4)
        corpus = speed_corpus(lines, batch, steps, work)
        spec = spec_for(name, cases[name], model_dir, generator, batch, steps, precision, lr=3e-5,
                        log_steps=args.log_steps, **overrides)
        spec["id"] += f"-profile-{label.replace(' ', '_')}"
        res = profile_case(spec, corpus, work, args.device, skip, active)
        (args.out / f"profile-{label.replace(' ', '_')}-b{batch}.txt").write_text(res.pop("table") + "\n")
        report.add("profile", label, None, batch=batch, precision=precision, **res)


# -- the run ----------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for acceptance.csv and acceptance.md")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when there is one")
    ap.add_argument("--size", choices=("tiny", "base", "large"), default="base")
    ap.add_argument("--corpus", type=Path, help="sentences to train on (default: generated)")
    ap.add_argument("--senteval", type=Path, help="SentEval data: the STS check needs it")
    ap.add_argument("--steps", type=int, default=30, help="steps of each method's training check")
    ap.add_argument("--speed-steps", type=int, default=30)
    ap.add_argument("--log-steps", type=int, default=5, help="the timed runs' logging window (the first two "
                    "windows are warm-up, the rest timed; config.yaml logs every 10)")
    ap.add_argument("--sts-repeats", type=int, default=1, help="timed STS evaluations on the device")
    ap.add_argument("--no-sts-compare", dest="sts_compare", action="store_false",
                    help="time the device's STS evaluation only (no CPU evaluation beside it)")
    ap.add_argument("--profile-cases", default="simcse@64", help="the profiled cases, as --speed-cases")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-sizes", default="64,512", help="the timed SimCSE batch sizes (CompCSE: the first)")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak (H100 SXM: 989)")
    ap.add_argument("--sections", default="train,layouts,sts,distributed,speed")
    ap.add_argument("--methods", default=None, help="the training check's methods (default: all)")
    ap.add_argument("--speed-cases", default=None, help="the timed cases, as label@batch (e.g. simcse@64,"
                    "simcse_chunk_16_b64@64; default: all)")
    args = ap.parse_args(argv)
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")]

    import torch

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name() if args.device == "cuda" else f"cpu x{torch.get_num_threads()}"
    given = argv if argv is not None else sys.argv[1:]
    command = " ".join(["python", "benchmarks_scripts/gpu_acceptance.py", *given])
    args.out.mkdir(parents=True, exist_ok=True)
    report = Report(f"{name}, torch {torch.__version__}, {args.size} BERT", args.out, command)
    with tempfile.TemporaryDirectory(prefix="cselab-acceptance-") as scratch:  # models and corpora: hundreds of MB
        run_sections(report, args, Path(scratch))
    report.write()
    print(f"wrote {args.out / 'acceptance.csv'}; {report.failed} check(s) failed")
    return 1 if report.failed else 0


def run_sections(report: Report, args, work: Path) -> None:
    """Each section asked for, in order; one that raises is a failed row, not the end of the run."""
    model_dir, generator, lines = prepare(args, work)
    sections = args.sections.split(",")
    checks = {"train": lambda: check_training(report, args, model_dir, generator, lines, work),
              "layouts": lambda: check_layouts(report, args, model_dir, lines),
              "sts": lambda: check_sts(report, args, model_dir) if args.senteval else None,
              "distributed": lambda: check_distributed(report, args, model_dir, generator, lines, work),
              "speed": lambda: check_speed(report, args, model_dir, generator, lines, work),
              "profile": lambda: check_profile(report, args, model_dir, generator, lines, work)}
    for section in sections:
        try:
            checks[section]()
        except Exception as exc:  # noqa: BLE001 - one broken section must not hide the others' figures
            import traceback

            traceback.print_exc()
            report.add(section, "section raised", False, error=f"{type(exc).__name__}: {exc}"[:300])


def prepare(args, work: Path) -> tuple[Path, Path, list[str]]:
    """The BERT (built from a config), a generator of its vocabulary, and the sentences; at tiny
    size both with their vocabulary cut to what the sentences need (``train_speed.cut_vocabulary``)."""
    import random

    import torch
    from transformers import AutoConfig, BertForMaskedLM

    from train_speed import build_model, cut_vocabulary, kept_tokens

    if args.corpus:
        lines = [ln for ln in args.corpus.read_text(encoding="utf-8").splitlines() if ln.strip()]
    else:
        rng = random.Random(0)
        words = "a the man woman dog cat plays runs street garden music river quickly under over".split()
        lines = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 20))) + " ." for _ in range(4096)]
    model_dir = build_model(work / "model", args.size, None)
    torch.manual_seed(1)
    generator = work / "generator"
    config = AutoConfig.from_pretrained(model_dir)
    config.num_hidden_layers = max(1, config.num_hidden_layers // 2)  # DiffCSE's generator: a smaller MLM
    BertForMaskedLM(config).save_pretrained(generator)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (model_dir / name).exists():
            (generator / name).write_bytes((model_dir / name).read_bytes())
    if args.size == "tiny":
        kept = kept_tokens(model_dir, lines)
        cut_vocabulary(model_dir, kept)
        cut_vocabulary(generator, kept)
    return model_dir, generator, lines


if __name__ == "__main__":
    sys.exit(main())
