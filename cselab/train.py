"""The one training loop every method shares: a plain, readable torch loop.

Per step: a shuffled batch of corpus sentences -> the method's objective (positive
construction + loss) -> AdamW with a linear learning-rate decay (the HF Trainer defaults that
SimCSE used: no weight decay, gradient norm clipped at 1.0). Every ``eval_steps`` (and at the
last step) the encoder is scored on STS-B dev (Spearman of raw [CLS] cosines, no MLP) and the
best checkpoint is kept, as in SimCSE and CompCSE. The per-step curve goes to a CSV and MLflow.
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from cselab.encoder import SentenceEncoder, load_encoder
from cselab.errors import DataError
from cselab.models import resolve_model
from cselab.objectives import objective_class

log = logging.getLogger(__name__)

CURVE_FIELDS = ["step", "epoch", "loss", "lr", "stsb_dev_spearman", "sentences_per_s"]


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def read_corpus(path: Path) -> list[str]:
    lines = [line.rstrip("\n") for line in Path(path).open(encoding="utf-8")]
    lines = [line for line in lines if line.strip()]
    if len(lines) < 2:
        raise DataError(f"training corpus {path} has {len(lines)} non-empty line(s); contrastive training "
                        f"needs at least 2 (check data.corpus.path / max_lines)")
    return lines


def autocast_for(device: torch.device, precision: str):
    if precision == "auto":
        precision = "bf16" if device.type == "cuda" else "fp32"
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


@dataclass
class TrainResult:
    best_step: int
    best_dev: float
    steps: int
    train_seconds: float
    sentences_per_s: float
    curve: list[dict] = field(repr=False, default_factory=list)


def train(spec: dict, corpus_path: Path, dev_score: Callable[[SentenceEncoder], float], out_dir: Path,
          on_log: Callable[[dict], None] | None = None, device: str | None = None) -> TrainResult:
    """Train one experiment. ``spec`` is ``cselab.config.experiment_spec``'s output.

    ``dev_score(encoder)`` returns STS-B dev Spearman x100 (the checkpoint-selection metric).
    The best checkpoint is written to ``out_dir/model`` (HF + sentence-transformers format) and
    the curve to ``out_dir/curve.csv``; ``on_log(row)`` receives every curve row (for MLflow).
    """
    t = spec["training"]
    set_seed(spec["seed"])
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    out_dir = Path(out_dir)
    model_dir = out_dir / "model"

    encoder = load_encoder(resolve_model(spec["model"]), pooler=t["pooler"], dropout=t.get("dropout"),
                           mlp_head=t.get("mlp_only_train", True)).to(dev)
    objective = objective_class(spec["objective"])(spec["options"], encoder.hidden_size, t["temperature"]).to(dev)

    sentences = read_corpus(corpus_path)
    ids = encoder.tokenize(sentences, t["max_len"])
    batch_size = t["batch_size"]
    per_epoch = len(ids) // batch_size + (1 if len(ids) % batch_size >= 2 else 0)
    if per_epoch == 0:
        raise DataError(f"training corpus {corpus_path} has {len(ids)} sentences, fewer than 2 per batch")
    total = per_epoch * t["epochs"]
    if t.get("max_steps"):
        total = min(total, t["max_steps"])

    params = [p for p in list(encoder.parameters()) + list(objective.parameters()) if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=t["lr"], weight_decay=t.get("weight_decay", 0.0))
    warmup = t.get("warmup_steps", 0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (total - s) / max(1, total - warmup)))
    generator = torch.Generator().manual_seed(spec["seed"])
    amp = autocast_for(dev, t.get("precision", "auto"))

    curve: list[dict] = []
    best_step, best_dev = -1, -math.inf

    def record(row: dict) -> None:
        curve.append(row)
        if on_log:
            on_log(row)

    def evaluate(step: int, epoch: int, keep: bool) -> None:
        nonlocal best_step, best_dev
        score = dev_score(encoder)
        log.info("step %d: STS-B dev Spearman %.2f", step, score)
        record({"step": step, "epoch": epoch, "stsb_dev_spearman": score})
        if keep and not math.isnan(score) and score > best_dev:
            best_step, best_dev = step, score
            encoder.save(model_dir)

    log.info("training %s: %d sentences, %d steps of %d, objective %s %s on %s",
             spec["id"], len(ids), total, batch_size, spec["objective"], spec["options"], dev)
    evaluate(0, 0, keep=False)
    encoder.train()
    step, seen, train_time = 0, 0, 0.0
    window = {"loss": 0.0, "n": 0, "seconds": 0.0}
    for epoch in range(t["epochs"]):
        order = torch.randperm(len(ids), generator=generator).tolist()
        for start in range(0, per_epoch * batch_size, batch_size):
            if step >= total:
                break
            tic = time.perf_counter()
            batch = encoder.pad([ids[i] for i in order[start:start + batch_size]])
            with amp:
                loss, extra = objective(encoder, batch)
            loss.backward()
            if t.get("max_grad_norm"):
                torch.nn.utils.clip_grad_norm_(params, t["max_grad_norm"])
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            value = loss.item()
            if not math.isfinite(value):
                raise FloatingPointError(f"loss became {value} at step {step + 1}; lower training.lr")
            step += 1
            seen += batch["input_ids"].size(0)
            elapsed = time.perf_counter() - tic
            train_time += elapsed
            window["loss"] += value
            window["n"] += 1
            window["seconds"] += elapsed
            if step % t.get("log_steps", 10) == 0 or step == total:
                record({"step": step, "epoch": epoch, "loss": window["loss"] / window["n"],
                        "lr": scheduler.get_last_lr()[0],
                        "sentences_per_s": window["n"] * batch_size / window["seconds"], **extra})
                window = {"loss": 0.0, "n": 0, "seconds": 0.0}
            if step % t["eval_steps"] == 0 or step == total:
                evaluate(step, epoch, keep=True)
                encoder.train()
    if best_step < 0:
        raise FloatingPointError("STS-B dev Spearman was NaN at every evaluation; the model collapsed")
    (model_dir / "cselab.json").write_text(json.dumps({"experiment": spec, "best_step": best_step,
                                                       "stsb_dev_spearman": best_dev}, indent=2, default=str))
    write_curve(curve, out_dir / "curve.csv")
    return TrainResult(best_step=best_step, best_dev=best_dev, steps=step, train_seconds=train_time,
                       sentences_per_s=seen / train_time if train_time else float("nan"), curve=curve)


def write_curve(curve: list[dict], path: Path) -> None:
    fields = CURVE_FIELDS + sorted({k for row in curve for k in row} - set(CURVE_FIELDS))
    with Path(path).open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(curve)
