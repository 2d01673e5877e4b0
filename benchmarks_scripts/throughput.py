"""This pipeline against plain references, in one run: training steps and 7-task STS evaluation.

Training: ``cselab.training.loop.train`` (token cache, tensor batches, no per-step sync) against
a plain fp32 PyTorch loop written here the way a SimCSE/CompCSE script usually is (tokenise the
batch's strings every step, ``loss.item()`` every step, CompCSE's halves split per sentence in
Python). Same sentences in the same order, same batch size and max_len, same math (dropout
views, MLP head over [CLS], InfoNCE at temperature 0.05, AdamW with linear decay, gradient
clipping at 1.0). Evaluation: ``evaluate_sts`` (one deduplicated, length-sorted encoding pass
over the 7 tasks, batches chosen by tokens) against a plain Hugging Face evaluator that encodes
each subset's two sides on their own in length-sorted batches of 128. The two sides are run
alternately, ``--rounds`` times, so drift of the machine hits both; the CSV holds every round
and the ratios of the medians. ``--profile`` adds the host overhead of the pipeline's training
step from the PyTorch profiler: the share of a step (range ``cselab.step``) not spent in the
forward, the backward or the optimizer. On CUDA the rows also carry tokens/s and the model
FLOPs utilisation (bf16 dense peak from ``--peak-tflops``), both over real (unpadded) tokens:
the full model's FLOPs per real token, whatever the forward skips.

    python benchmarks_scripts/throughput.py --corpus ../shared/data/wiki1m_for_simcse.txt \\
        --senteval ../shared/data/SentEval --out results/benchmarks/throughput.csv --profile
    # GPU, BERT-base built from a config (no download): --size base --batch-size 64
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_settings as settings  # noqa: E402

TEMPERATURE, LR, MAX_GRAD_NORM = 0.05, 3e-5, 1.0


# -- the plain references -----------------------------------------------------------------------

def plain_train(model_dir: Path, sentences: list[str], method: str, batch_size: int, max_len: int, steps: int,
                device: str, seed: int = 42) -> dict:
    """A plain fp32 (bf16 autocast on CUDA) SimCSE / CompCSE loop; returns sentences/s over
    the steps after the first two and the real (unpadded) tokens its encoder passes read."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModel, AutoTokenizer

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).to(device).train()
    hidden = model.config.hidden_size
    head = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.Tanh()).to(device)
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, (steps - s) / steps))
    order = torch.randperm(len(sentences), generator=torch.Generator().manual_seed(seed)).tolist()
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else _null()

    def cls(ids, mask):
        return model(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]

    def info_nce(u, v):
        sim = F.cosine_similarity(u.float()[:, None], v.float()[None], dim=-1) / TEMPERATURE
        return F.cross_entropy(sim, torch.arange(len(u), device=u.device))

    times, tokens = [], 0
    for step in range(steps):
        tic = time.perf_counter()
        batch = [sentences[i] for i in order[step * batch_size:(step + 1) * batch_size]]
        enc = tok(batch, padding=True, truncation=True, max_length=max_len, return_tensors="pt")
        real = int(enc["attention_mask"].sum())  # on the host: no sync
        enc = enc.to(device)
        with amp:
            if method == "simcse":
                ids, mask = enc["input_ids"].repeat(2, 1), enc["attention_mask"].repeat(2, 1)
                z = head(cls(ids, mask))
                loss = info_nce(z[:batch_size], z[batch_size:])
                tokens += 2 * real
            else:  # CompCSE: anchor + the average of the two halves' [CLS], head after aggregation
                from cselab.training.methods.compcse import split_ids

                halves = [[], []]
                for row, n in zip(enc["input_ids"].tolist(), enc["attention_mask"].sum(1).tolist()):
                    for j, part in enumerate(split_ids(row[:n], 2)):
                        halves[j].append(part)
                parts = tok.pad({"input_ids": halves[0] + halves[1]}, return_tensors="pt")
                tokens += real + int(parts["attention_mask"].sum())
                parts = parts.to(device)
                full = head(cls(enc["input_ids"], enc["attention_mask"]))
                pooled = cls(parts["input_ids"], parts["attention_mask"]).view(2, len(batch), -1).mean(0)
                loss = info_nce(full, head(pooled))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        opt.step()
        sched.step()
        opt.zero_grad()
        loss.item()  # the usual per-step logging
        times.append(time.perf_counter() - tic)
    steady = times[2:] or times
    return {"sentences_per_s": batch_size * len(steady) / sum(steady), "tokens": tokens, "seconds": sum(times)}


def plain_sts(model_dir: Path, root: Path, device: str, batch_size: int = 128) -> float:
    """7-task STS with a plain HF evaluator; returns the average Spearman (x100)."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    from cselab.data.senteval import STS_TASKS
    from cselab.data.tasks import load_sts_task
    from cselab.evaluation.sts import correlations

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).to(device).eval()

    def encode(sentences):
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        out = np.empty((len(sentences), model.config.hidden_size), dtype=np.float32)
        with torch.no_grad():
            for s in range(0, len(order), batch_size):
                idx = order[s:s + batch_size]
                enc = tok([sentences[i] for i in idx], padding=True, truncation=True, max_length=512,
                          return_tensors="pt").to(device)
                out[idx] = model(**enc).last_hidden_state[:, 0].float().cpu().numpy()
        return out

    scores = []
    for task in STS_TASKS:
        preds, gold = [], []
        for sub in load_sts_task(root, task):
            a, b = encode(sub.sent1), encode(sub.sent2)
            a /= np.linalg.norm(a, axis=1, keepdims=True)
            b /= np.linalg.norm(b, axis=1, keepdims=True)
            preds.append((a * b).sum(1))
            gold.append(sub.gold)
        scores.append(correlations(np.concatenate(preds), np.concatenate(gold))[0])
    return float(np.mean(scores))


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# -- this pipeline ------------------------------------------------------------------------------

def spec_for(method: str, model_dir: Path, batch_size: int, max_len: int, steps: int, compile_: bool,
             precision: str = "fp32") -> dict:
    options = {"partitions": 2, "aggregation": "avg"} if method == "compcse" else {}
    return {"id": f"bench-{method}-s42", "name": method, "plm": "bench", "model": str(model_dir), "method": method,
            "objective": method, "weight": 1.0, "options": options, "auxiliaries": {}, "signature": method,
            "seed": 42, "training": settings.training(
                batch_size=batch_size, max_len=max_len, epochs=1, max_steps=steps, lr=LR, temperature=TEMPERATURE,
                pooler="cls", eval_steps=None, log_steps=1, max_grad_norm=MAX_GRAD_NORM, weight_decay=0.0,
                warmup_steps=0, precision=precision, compile=compile_)}


def pipeline_train(spec: dict, corpus: Path, work: Path, device: str, profile: bool = False) -> dict:
    """sentences/s of the shared loop over the steps after the first two (one window per step)."""
    import torch

    from cselab.training.loop import train

    ctx = _null()
    if profile:
        ctx = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    with ctx as prof:
        res = train(spec, corpus, lambda encoder: 0.0, work / spec["id"], device=device,
                    token_cache=work / "tokens")
    rates = [r["sentences_per_s"] for r in res.curve if r.get("sentences_per_s")]
    steady = rates[2:] or rates
    out = {"sentences_per_s": len(steady) / sum(1 / r for r in steady)}
    if profile:
        events = {e.key: e.cpu_time_total for e in prof.key_averages() if e.key.startswith("cselab.")}
        inside = sum(events.get(f"cselab.{k}", 0.0) for k in ("forward", "backward", "optimizer"))
        out["host_overhead"] = 1 - inside / events["cselab.step"] if events.get("cselab.step") else math.nan
        out["profile"] = {k: v / 1e3 for k, v in events.items()}
    return out


def pipeline_sts(model_dir: Path, root: Path, device: str, batch_size: int, max_tokens: int | None) -> float:
    from functools import partial

    from cselab.evaluation.sts import evaluate_sts
    from cselab.models.encoder import load_encoder

    encoder = load_encoder(model_dir).to(device)
    return evaluate_sts(partial(encoder.encode, batch_size=batch_size, max_tokens=max_tokens), root)["avg"]


# -- the run ---------------------------------------------------------------------------------------

def timed(fn, *args, **kwargs):
    tic = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - tic


def flops_per_token(config, seq_len: int) -> float:
    """Training FLOPs per token of an encoder (forward + backward = 3 x forward): 6 x the
    non-embedding parameters plus the attention scores and values (12 x layers x hidden x T)."""
    h, layers, inter = config.hidden_size, config.num_hidden_layers, config.intermediate_size
    params = layers * (4 * h * h + 2 * h * inter)
    return 6 * params + 12 * layers * h * seq_len


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, type=Path)
    ap.add_argument("--senteval", type=Path, help="SentEval data (the folder holding downstream/); no STS without it")
    ap.add_argument("--model", default="all-MiniLM-L6-v2", help="a model name or folder (ignored with --size)")
    ap.add_argument("--size", choices=("tiny", "base", "large"), help="a random BERT of this size, built from a config")
    ap.add_argument("--methods", default="simcse,compcse")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-len", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sts-rounds", type=int, default=None, help="rounds of the STS comparison (default: --rounds)")
    ap.add_argument("--eval-batch-size", type=int, default=128)
    ap.add_argument("--eval-max-tokens", type=int, default=16384)
    ap.add_argument("--compile", action="store_true", help="the pipeline side with training.compile")
    ap.add_argument("--profile", action="store_true", help="host overhead of the pipeline's step (PyTorch profiler)")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="the device's dense bf16 peak (H100 SXM: 989)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path("results/benchmarks/throughput.csv"))
    args = ap.parse_args(argv)

    import torch
    from transformers import AutoConfig

    from cselab.io import process_folder
    from cselab.models.checkpoints import resolve_model

    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    work = process_folder("cselab-bench-")  # its models, corpora and runs: gone with the process
    if args.size:
        from train_speed import build_model

        model_dir = build_model(work / "model", args.size, None)
    else:
        model_dir = resolve_model(args.model)
    config = AutoConfig.from_pretrained(model_dir)
    lines = [ln for ln in args.corpus.read_text(encoding="utf-8").splitlines() if ln.strip()]
    lines = lines[:args.steps * args.batch_size]
    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    where = torch.cuda.get_device_name() if device == "cuda" else f"cpu x{torch.get_num_threads()}"
    rows = []

    def row(kind, method, side, rnd, value, unit, **extra):
        rows.append({"kind": kind, "method": method, "side": side, "round": rnd, "value": round(value, 5),
                     "unit": unit, "device": where, "model": args.size or args.model, "batch_size": args.batch_size,
                     "max_len": args.max_len, **extra})
        print(rows[-1], flush=True)

    for method in args.methods.split(","):
        # the plain loop's numerics: bf16 autocast on CUDA, fp32 elsewhere
        spec = spec_for(method, model_dir, args.batch_size, args.max_len, args.steps, args.compile,
                        "bf16" if device == "cuda" else "fp32")
        if args.compile:  # compile once outside the timed rounds
            pipeline_train(spec, corpus, work, device)
        for rnd in range(args.rounds):
            ours = pipeline_train(spec, corpus, work, device)
            plain = plain_train(model_dir, lines, method, args.batch_size, args.max_len, args.steps, device)
            extra = {}
            if device == "cuda":
                tokens_per_sentence = plain["tokens"] / (args.steps * args.batch_size)
                tps = ours["sentences_per_s"] * tokens_per_sentence
                extra = {"tokens_per_s": round(tps), "mfu": round(
                    tps * flops_per_token(config, args.max_len) / (args.peak_tflops * 1e12), 4)}
            row("train", method, "pipeline", rnd, ours["sentences_per_s"], "sentences/s", **extra)
            row("train", method, "plain", rnd, plain["sentences_per_s"], "sentences/s")
        if args.profile:
            prof = pipeline_train(spec, corpus, work, device, profile=True)
            row("host_overhead", method, "pipeline", 0, prof["host_overhead"], "fraction of step",
                **{f"ms_{k.removeprefix('cselab.')}": round(v, 1) for k, v in prof["profile"].items()})
    if args.senteval:
        root = args.senteval / "downstream" if (args.senteval / "downstream").is_dir() else args.senteval
        for rnd in range(args.sts_rounds or args.rounds):
            score, ours = timed(pipeline_sts, model_dir, root, device, args.eval_batch_size, args.eval_max_tokens)
            row("sts", "-", "pipeline", rnd, ours, "seconds", avg_spearman=round(score, 2))
            score, plain = timed(plain_sts, model_dir, root, device)
            row("sts", "-", "plain", rnd, plain, "seconds", avg_spearman=round(score, 2))
    for kind, method in sorted({(r["kind"], r["method"]) for r in rows if r["kind"] in ("train", "sts")}):
        side = {s: statistics.median(r["value"] for r in rows
                                     if (r["kind"], r["method"], r["side"]) == (kind, method, s))
                for s in ("pipeline", "plain")}
        row(f"{kind}_ratio", method, "pipeline/plain", -1, side["pipeline"] / side["plain"],
            "x (speed)" if kind == "train" else "x (time)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(args.out, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out}")
    return rows


if __name__ == "__main__":
    main()
