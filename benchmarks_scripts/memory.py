"""Peak memory and step time against the global batch, with and without gradient caching.

For each global batch (``--batches``) and each ``training.chunk_size`` (``--chunks``; ``none``
is off) a fresh process builds a randomly initialised BERT of the paper's size (``--size``; the
memory does not depend on the weights) with the shipped MiniLM's WordPiece tokenizer, sets up
the pipeline's own training run (:class:`cselab.training.loop.Trainer`: SimCSE by default, the
experiment's settings from config.yaml, max_len 32) on the first lines of ``--corpus`` and
runs ``--steps`` optimizer steps. Measured over the steps only (after the set-up):

- CPU: the peak resident set (``VmHWM`` of ``/proc/self/status``, reset before the first step
  through ``/proc/self/clear_refs``); CUDA: ``torch.cuda.max_memory_allocated``;
- the resident (allocated) memory before the first step (weights, tokenised corpus) and the
  step's own share (peak minus that);
- the median time of the steps after the first, per sentence.

The configurations run in one invocation, alternating chunked and unchunked at each batch, so
their times compare on one machine. A configuration that runs out of memory (or past
``--max-rss-gb`` of predicted need) is recorded as skipped. Writes a CSV and a figure.

    python benchmarks_scripts/memory.py --corpus ../shared/data/wiki1m_head.txt \
        --batches 64,128,256,512,1024 --chunks none,64,128 --out results/benchmarks/memory_cpu.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_settings as settings  # noqa: E402
from train_speed import SIZES, build_model  # noqa: E402

FIELDS = ["device", "size", "method", "batch_size", "chunk_size", "steps", "peak_mb", "before_mb", "step_mb",
          "s_per_step", "ms_per_sentence", "status"]


def _status_kb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak(device) -> float:
    """Reset the peak counter; return the memory in use now (MB)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated() / 2 ** 20
    Path("/proc/self/clear_refs").write_text("5")  # Linux: VmHWM := VmRSS
    return _status_kb("VmRSS") / 1024


def _peak(device) -> float:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2 ** 20
    return _status_kb("VmHWM") / 1024


def measure(args: dict) -> dict:
    """One configuration, in this (fresh) process: set up the run, reset the peak, time the steps."""
    import torch

    from cselab.settings import ExperimentSpec
    from cselab.training.loop import Trainer, Window

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    batch, chunk, steps = args["batch_size"], args["chunk_size"], args["steps"]
    spec = {"id": f"{args['method']}-memory-s42", "name": args["method"], "plm": args["size"],
            "model": args["model"], "method": args["method"], "objective": args["method"], "weight": 1.0,
            "options": {}, "auxiliaries": {}, "signature": args["method"], "seed": 42,
            "training": settings.training(batch_size=batch, max_len=32, epochs=1, max_steps=steps, eval_steps=None,
                                          chunk_size=chunk, precision=args["precision"])}
    run = Trainer(ExperimentSpec.of(spec), device, Path(args["out"]), None, None)
    run.set_up(Path(args["corpus"]), None, None)
    run.optimizer_and_schedule()
    run.process_group()
    run.objective.train(), run.encoder.train()
    before = _reset_peak(device)
    order, times, window = torch.arange(len(run.corpus)), [], Window()
    for k in range(steps):
        tic = time.perf_counter()
        run.step(order[k * batch:(k + 1) * batch], window, 1)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - tic)
    peak = _peak(device)
    s_per_step = statistics.median(times[1:] or times)
    return {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "peak_mb": round(peak),
            "before_mb": round(before), "step_mb": round(peak - before), "s_per_step": round(s_per_step, 3),
            "ms_per_sentence": round(1000 * s_per_step / batch, 3), "status": "ok"}


def run_one(config: dict, timeout_s: float) -> dict:
    """:func:`measure` in a fresh process (its own peak), or why it could not run."""
    proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(config)], capture_output=True,
                          text=True, timeout=timeout_s)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["killed"])[-1]
        status = "out of memory" if proc.returncode in (-9, 137) or "out of memory" in tail.lower() else tail[:120]
        return {"status": status}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def draw(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (mem, speed) = plt.subplots(1, 2, figsize=(10, 4))
    for chunk in dict.fromkeys(r["chunk_size"] for r in rows):
        done = [r for r in rows if r["chunk_size"] == chunk and r["status"] == "ok"]
        label = "no chunks" if chunk is None else f"chunk_size {chunk}"
        mem.plot([r["batch_size"] for r in done], [r["peak_mb"] / 1024 for r in done], marker="o", label=label)
        speed.plot([r["batch_size"] for r in done], [r["ms_per_sentence"] for r in done], marker="o", label=label)
    device = next((r["device"] for r in rows if r.get("device")), "?")
    for ax, ylabel in ((mem, "peak memory of the step (GiB)"), (speed, "time per sentence (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("global batch (sentences)")
        ax.set_ylabel(ylabel)
        ax.legend()
    fig.suptitle(f"SimCSE step, BERT-{rows[0]['size']} size, max_len 32, {device}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus")
    ap.add_argument("--size", default="base", choices=sorted(SIZES))
    ap.add_argument("--method", default="simcse")
    ap.add_argument("--batches", default="64,128,256,512,1024")
    ap.add_argument("--chunks", default="none,64,128", help="chunk sizes (rows per network run); none: off")
    ap.add_argument("--unchunked-max", type=int, default=None,
                    help="the largest batch to try without chunks (beyond it the step would not fit)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--timeout-s", type=float, default=3600)
    ap.add_argument("--out", default="results/benchmarks/memory.csv")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(measure(json.loads(args.worker))))
        return
    if not args.corpus:
        ap.error("--corpus is required")

    from cselab.io import process_folder

    tmp = process_folder("cselab-memory-")  # its model and corpus: gone with the process
    model = build_model(tmp / "model", args.size, None)
    batches = [int(b) for b in args.batches.split(",")]
    lines = [ln for ln in Path(args.corpus).read_text(encoding="utf-8").splitlines() if ln.strip()]
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(lines[: max(batches) * args.steps]) + "\n", encoding="utf-8")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for batch in batches:
        for chunk in (None if c == "none" else int(c) for c in args.chunks.split(",")):
            row = {"size": args.size, "method": args.method, "batch_size": batch, "chunk_size": chunk,
                   "steps": args.steps}
            if chunk is None and args.unchunked_max and batch > args.unchunked_max:
                rows.append({**row, "status": "not tried (beyond --unchunked-max)"})
                continue
            config = {**row, "model": str(model), "corpus": str(corpus), "out": str(tmp / "out"),
                      "precision": args.precision}
            rows.append({**row, **run_one(config, args.timeout_s)})
            print(json.dumps(rows[-1]), flush=True)
            with out.open("w", newline="") as fh:  # after every configuration: a killed run keeps its rows
                writer = csv.DictWriter(fh, fieldnames=FIELDS)
                writer.writeheader()
                writer.writerows(rows)
    draw(rows, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
