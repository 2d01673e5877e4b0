"""The one training loop every method shares: a plain, readable torch loop.

Per step: a shuffled batch of corpus sentences -> the method's objective (positive
construction + loss) -> AdamW with a linear learning-rate decay (the HF Trainer defaults that
SimCSE used: no weight decay, gradient norm clipped at 1.0). Every ``eval_steps`` (and at the
last step) the encoder is scored on STS-B dev (Spearman of raw [CLS] cosines, no MLP) and the
best checkpoint is kept, as in SimCSE and CompCSE. The per-step curve goes to a CSV and MLflow.

With ``training.checkpoint_steps`` the full training state (weights, optimizer, scheduler, RNGs,
data position, curve so far) is saved every N steps under ``checkpoint_dir``, and a restarted
job with the same spec and corpus resumes bit-for-bit where the last checkpoint left off.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import logging
import math
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from cselab.data import read_sentences
from cselab.encoder import SentenceEncoder, load_encoder
from cselab.errors import DataError
from cselab.models import resolve_model
from cselab.objectives import objective_class

log = logging.getLogger(__name__)

CURVE_FIELDS = ["step", "epoch", "loss", "lr", "stsb_dev_spearman", "sentences_per_s"]
DevScore = Callable[[SentenceEncoder], "float | dict"]


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def read_corpus(path: Path) -> list[str]:
    lines = read_sentences(path)
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


def dev_metrics(encoder: SentenceEncoder, subset, batch_size: int = 128) -> dict:
    """STS-B dev Spearman x100, alignment and uniformity from one encoding pass over ``subset``
    (anything with ``sent1``, ``sent2``, ``gold``)."""
    from cselab.geometry import align_uniform
    from cselab.sts import spearman_on_subset

    memo: dict[str, np.ndarray] = {}

    def encode(sentences: list[str]) -> np.ndarray:
        missing = [s for s in dict.fromkeys(sentences) if s not in memo]
        if missing:
            memo.update(zip(missing, encoder.encode(missing, batch_size=batch_size)))
        return np.stack([memo[s] for s in sentences])

    spearman = spearman_on_subset(encode, subset)
    geometry = align_uniform(encode, subset)
    return {"stsb_dev_spearman": spearman, "alignment": geometry["alignment"],
            "uniformity": geometry["uniformity"]}


@dataclass
class TrainResult:
    best_step: int
    best_dev: float
    steps: int
    train_seconds: float
    sentences_per_s: float
    curve: list[dict] = field(repr=False, default_factory=list)
    resumed_from: int = 0


def train(spec: dict, corpus_path: Path, dev_score: DevScore, out_dir: Path,
          on_log: Callable[[dict], None] | None = None, device: str | None = None,
          checkpoint_dir: Path | None = None) -> TrainResult:
    """Train one experiment. ``spec`` is ``cselab.config.experiment_spec``'s output.

    ``dev_score(encoder)`` returns STS-B dev Spearman x100 (the checkpoint-selection metric), or
    a dict with it under ``stsb_dev_spearman`` plus other metrics for the curve. The best
    checkpoint is written to ``out_dir/model`` (HF + sentence-transformers format) and the curve
    to ``out_dir/curve.csv``; ``on_log(row)`` receives every curve row (for MLflow) once.
    ``training.stop_at`` ends the run early without shortening the learning-rate schedule.
    ``checkpoint_dir`` holds the resumable state (``training.checkpoint_steps``; see
    :class:`Checkpoints`); it is deleted when training completes.
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
    total = per_epoch * t["epochs"]  # the schedule's length
    if t.get("max_steps"):
        total = min(total, t["max_steps"])
    last = min(total, t.get("stop_at") or total)  # the last step actually trained

    params = [p for p in list(encoder.parameters()) + list(objective.parameters()) if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=t["lr"], weight_decay=t.get("weight_decay", 0.0))
    warmup = t.get("warmup_steps", 0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (total - s) / max(1, total - warmup)))
    generator = torch.Generator().manual_seed(spec["seed"])
    amp = autocast_for(dev, t.get("precision", "auto"))

    curve: list[dict] = []
    best_step, best_dev = -1, -math.inf
    step, seen, train_time = 0, 0, 0.0
    window = {"loss": 0.0, "n": 0, "seconds": 0.0}
    epoch0, order, start0 = 0, None, 0

    def record(row: dict) -> None:
        curve.append(row)
        if on_log:
            on_log(row)

    def evaluate(step: int, epoch: int, keep: bool) -> None:
        nonlocal best_step, best_dev
        out = dev_score(encoder)
        metrics = dict(out) if isinstance(out, dict) else {"stsb_dev_spearman": out}
        score = metrics["stsb_dev_spearman"]
        log.info("step %d: STS-B dev Spearman %.2f", step, score)
        record({"step": step, "epoch": epoch, **metrics})
        if keep and not math.isnan(score) and score > best_dev:
            best_step, best_dev = step, score
            _replace_dir(model_dir, encoder.save)

    every = t.get("checkpoint_steps") or 0
    checkpoints = Checkpoints(checkpoint_dir, fingerprint(spec, corpus_path)) if checkpoint_dir else None
    state = checkpoints.load() if checkpoints else None
    if state:
        log.info("resuming %s from step %d", spec["id"], state["step"])
        encoder.load_state_dict(state["encoder"])
        objective.load_state_dict(state["objective"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        _set_rng_state(state["rng"], generator)
        curve, window = state["curve"], state["window"]
        step, seen, train_time = state["step"], state["seen"], state["train_time"]
        best_step, best_dev = state["best_step"], state["best_dev"]
        epoch0, order, start0 = state["epoch"], state["order"], state["next_start"]
        if best_step >= 0:  # the job runner may have deleted out_dir/model with the failed job's outputs
            _replace_dir(model_dir, lambda tmp: shutil.copytree(state["best_dir"], tmp, copy_function=_link))
        else:
            shutil.rmtree(model_dir, ignore_errors=True)
    resumed_from = step

    log.info("training %s: %d sentences, %d of %d steps of %d, objective %s %s on %s",
             spec["id"], len(ids), last, total, batch_size, spec["objective"], spec["options"], dev)
    if not state:
        evaluate(0, 0, keep=False)
    encoder.train()
    for epoch in range(epoch0, t["epochs"]):
        if step >= last:
            break
        if order is None:
            order = torch.randperm(len(ids), generator=generator).tolist()
        for start in range(start0, per_epoch * batch_size, batch_size):
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
            if step % t.get("log_steps", 10) == 0 or step == last:
                record({"step": step, "epoch": epoch, "loss": window["loss"] / window["n"],
                        "lr": scheduler.get_last_lr()[0],
                        "sentences_per_s": window["n"] * batch_size / window["seconds"], **extra})
                window = {"loss": 0.0, "n": 0, "seconds": 0.0}
            if step % t["eval_steps"] == 0 or step == last:
                evaluate(step, epoch, keep=True)
                encoder.train()
            if step >= last:
                break
            if checkpoints and every and step % every == 0:  # after the step's evaluation: RNGs as they are now
                checkpoints.save({
                    "encoder": encoder.state_dict(), "objective": objective.state_dict(),
                    "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                    "rng": _rng_state(generator), "epoch": epoch, "order": order, "next_start": start + batch_size,
                    "step": step, "seen": seen, "train_time": train_time, "best_step": best_step,
                    "best_dev": best_dev, "curve": curve, "window": window,
                }, model_dir if best_step >= 0 else None)
        order, start0 = None, 0
    if best_step < 0:
        raise FloatingPointError("STS-B dev Spearman was NaN at every evaluation; the model collapsed")
    (model_dir / "cselab.json").write_text(json.dumps({"experiment": spec, "best_step": best_step,
                                                       "stsb_dev_spearman": best_dev}, indent=2, default=str))
    write_curve(curve, out_dir / "curve.csv")
    if checkpoint_dir:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    return TrainResult(best_step=best_step, best_dev=best_dev, steps=step, train_seconds=train_time,
                       sentences_per_s=seen / train_time if train_time else float("nan"), curve=curve,
                       resumed_from=resumed_from)


def write_curve(curve: list[dict], path: Path) -> None:
    fields = CURVE_FIELDS + sorted({k for row in curve for k in row} - set(CURVE_FIELDS))
    with Path(path).open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(curve)


def fingerprint(spec: dict, corpus_path: Path) -> str:
    """sha256 of the spec plus the corpus's size and first and last MiB (cheap, catches a new corpus)."""
    h = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode())
    size = Path(corpus_path).stat().st_size
    h.update(str(size).encode())
    with Path(corpus_path).open("rb") as fh:
        h.update(fh.read(1 << 20))
        fh.seek(max(0, size - (1 << 20)))
        h.update(fh.read(1 << 20))
    return h.hexdigest()


class Checkpoints:
    """The resumable state of one run: ``root/step-<N>/`` holding ``state.pt``, ``meta.json``
    (fingerprint, step) and ``best/`` (the best model so far, hard-linked where possible).

    A checkpoint is written as a hidden ``.tmp-step-<N>`` directory and renamed into place
    before older ones are removed, so a kill at any point leaves the previous one usable.
    """

    def __init__(self, root: Path, fingerprint: str):
        self.root, self.fingerprint = Path(root), fingerprint

    def load(self) -> dict | None:
        """The latest checkpoint's state if its fingerprint matches; otherwise clear ``root``."""
        found = sorted(p for p in self.root.glob("step-*") if (p / "meta.json").is_file())
        if not found:
            shutil.rmtree(self.root, ignore_errors=True)
            return None
        path = found[-1]
        if json.loads((path / "meta.json").read_text())["fingerprint"] != self.fingerprint:
            log.warning("discarding checkpoint %s: the training spec or corpus changed; starting over", path)
            shutil.rmtree(self.root, ignore_errors=True)
            return None
        self._remove_all_but(path)
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=False)  # our own file
        return {**state, "best_dir": path / "best"}

    def save(self, state: dict, best: Path | None) -> None:
        name = f"step-{state['step']:08d}"
        tmp, final = self.root / f".tmp-{name}", self.root / name
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        with (tmp / "state.pt").open("wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        if best is not None:
            shutil.copytree(best, tmp / "best", copy_function=_link)
        (tmp / "meta.json").write_text(json.dumps({"fingerprint": self.fingerprint, "step": state["step"]}))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        self._remove_all_but(final)

    def _remove_all_but(self, keep: Path) -> None:
        for p in self.root.iterdir():
            if p != keep:
                shutil.rmtree(p) if p.is_dir() else p.unlink()


def _link(src: str, dst: str) -> None:
    """Hard link (files under ``model/`` and checkpoints are never rewritten in place), else copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _replace_dir(target: Path, fill: Callable[[Path], object]) -> None:
    """Replace directory ``target`` by what ``fill(tmp)`` writes, never leaving a half-written one."""
    tmp, old = target.with_name(f".{target.name}.tmp"), target.with_name(f".{target.name}.old")
    for p in (tmp, old):
        shutil.rmtree(p, ignore_errors=True)
    fill(tmp)
    if target.exists():
        target.rename(old)
    tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def _rng_state(generator: torch.Generator) -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "data": generator.get_state()}


def _set_rng_state(rng: dict, generator: torch.Generator) -> None:
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    generator.set_state(rng["data"])
