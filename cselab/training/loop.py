"""The one training loop every method shares: a plain, readable torch loop.

Per step: a shuffled batch of corpus sentences -> the method's ``prepare`` (outside the
forward, no gradients) -> its forward in ``training.precision`` (named loss terms) -> AdamW
with a linear learning-rate decay (the HF Trainer defaults SimCSE used: no weight decay,
gradient norm clipped at 1.0). Precision is part of the experiment: the paper configs train
SimCSE, CompCSE, DiffCSE and InfoCSE in ``fp16`` with a gradient scaler, as their references
ran ``--fp16``, and the gradient paradigm in ``fp32``, as its scripts did; ``bf16`` autocast is
an option (no scaler). Loss
terms are accumulated on the device and read once per logging window. The encoder is scored
on STS-B dev at multiples of ``eval_steps`` (as the references' trainer does; the last step
too only with ``eval_at_end``) and the best checkpoint is kept. A pretraining stage runs the
same loop without dev scoring and exports its final state instead.

One training job may run on several processes (``cselab.training.distributed``, started by
torchrun): every process reads its own slice of the same shuffled global batch, in-batch
losses gather the embeddings of all of them, DistributedDataParallel averages the gradients,
and rank 0 alone scores STS-B dev, writes checkpoints and outputs and reports to ``on_log``.
The global batch (``batch_size``) and therefore the math do not depend on the number of
processes; ``accumulation_steps`` splits each step's batch into micro-batches run one after
the other (each with its own in-batch negatives), for a global batch the devices cannot hold.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import math
import random
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn
from torch.profiler import record_function

from cselab.data.corpus import read_sentences
from cselab.data.tokens import to_device, tokenize_corpus
from cselab.errors import ConfigError, DataError
from cselab.io import link_or_copy, open_atomic, write_json, write_with
from cselab.models.checkpoints import resolve_model
from cselab.models.encoder import SentenceEncoder, load_encoder
from cselab.models.heads import save_head
from cselab.training import distributed as D
from cselab.training.checkpoints import Checkpoints, fingerprint, rng_state, set_rng_state
from cselab.training.methods import build_objective

log = logging.getLogger(__name__)

CURVE_FIELDS = ["step", "epoch", "loss", "lr", "stsb_dev_spearman", "sentences_per_s"]
DevScore = Callable[[SentenceEncoder], "float | dict"]
#: training.precision -> autocast dtype (None: no autocast)
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Precision:
    """Autocast and loss scaling for one ``training.precision``: ``fp32`` (no autocast), ``bf16``
    (autocast, no scaler needed) or ``fp16`` (autocast with a gradient scaler, as the references'
    HF Trainer ran ``--fp16``). The loss terms are computed in fp32 either way
    (:func:`cselab.training.losses.fp32`)."""

    def __init__(self, name: str, device: torch.device):
        if name not in DTYPES:
            raise ConfigError(f"config key 'training.precision': {name!r} is not one of {list(DTYPES)}")
        self.name, self.device = name, device
        self.dtype = DTYPES[name]
        self.scaler = torch.amp.GradScaler(device.type, enabled=name == "fp16")
        if self.scaler.is_enabled():  # a step the scaler skips (overflow) still advances the schedule, as in HF
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before")

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def step(self, optimizer: torch.optim.Optimizer, params: list, max_grad_norm: float | None) -> None:
        """Unscale, clip, step (skipped by the scaler when fp16 gradients overflowed), update."""
        if max_grad_norm:
            self.scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        self.scaler.step(optimizer)
        self.scaler.update()


class Window:
    """Sums of the logged values over a logging window, kept on the device (no per-step sync)."""

    def __init__(self):
        self.sums: dict[str, torch.Tensor | float] = {}
        self.steps = self.sentences = 0
        self.start = time.perf_counter()

    def add(self, values: dict, sentences: int, weight: float = 1.0, step_end: bool = True) -> None:
        """Add one batch's values (``weight``: its share of the step, for micro-batches)."""
        for key, value in values.items():
            value = (value.detach().float() if isinstance(value, torch.Tensor) else float(value)) * weight
            self.sums[key] = self.sums[key] + value if key in self.sums else value
        self.steps += step_end
        self.sentences += sentences

    def _reduced(self) -> dict[str, float]:
        """The sums averaged over processes (one collective and one device sync)."""
        keys = list(self.sums)
        if not keys:
            return {}
        device = next((v.device for v in self.sums.values() if isinstance(v, torch.Tensor)), torch.device("cpu"))
        values = torch.stack([torch.as_tensor(self.sums[k], dtype=torch.float32, device=device) for k in keys])
        return dict(zip(keys, D.mean_over_processes(values).tolist()))

    def state(self) -> dict:
        """Plain floats averaged over processes, so a checkpoint loads on any device and any
        number of processes (every process must call it)."""
        return {"sums": self._reduced(), "steps": self.steps, "sentences": self.sentences}

    @classmethod
    def restore(cls, state: dict | None) -> "Window":
        window = cls()
        if state:
            window.sums, window.steps, window.sentences = state["sums"], state["steps"], state["sentences"]
        return window

    def means(self) -> dict[str, float]:
        """Read the window's means over steps and processes (one device sync) and its wall time."""
        out = {k: v / self.steps for k, v in self._reduced().items()}
        self.seconds = time.perf_counter() - self.start
        return out


class Trainable(nn.Module):
    """The trained networks as one module (what DistributedDataParallel wraps): the encoder and
    the objective with its heads; ``forward(batch)`` is the objective's."""

    def __init__(self, encoder: nn.Module, objective: nn.Module):
        super().__init__()
        self.encoder, self.objective = encoder, objective

    def forward(self, batch: dict):
        return self.objective(batch)


@dataclass
class TrainResult:
    best_step: int
    best_dev: float
    steps: int
    train_seconds: float
    sentences_per_s: float
    curve: list[dict] = field(repr=False, default_factory=list)
    resumed_from: int = 0


def train(spec: dict, corpus_path: Path, dev_score: DevScore | None, out_dir: Path,
          on_log: Callable[[dict], None] | None = None, device: str | None = None,
          checkpoint_dir: Path | None = None, artifacts: dict[str, Path] | None = None,
          token_cache: Path | None = None, operational: dict | None = None) -> TrainResult:
    """Train one experiment (or pretraining stage). ``spec`` is ``experiment_spec``'s output.

    ``dev_score(encoder)`` returns STS-B dev Spearman x100 (the checkpoint-selection metric), or
    a dict with it under ``stsb_dev_spearman`` plus other metrics for the curve; the best
    checkpoint goes to ``out_dir/model`` (HF + sentence-transformers format, plus the primary
    method's head in ``head.pt``). Without ``dev_score`` (a pretraining stage) nothing is scored
    and the primary method exports its final state to ``out_dir/model``. The curve goes to
    ``out_dir/curve.csv``; ``on_log(row)`` receives every curve row (for MLflow) once.
    ``training.stop_at`` ends the run early without shortening the learning-rate schedule.
    ``checkpoint_dir`` holds the resumable state (``training.checkpoint_steps``); it is deleted
    when training completes. ``artifacts`` are the upstream artifacts the methods declared.
    ``token_cache`` is the folder of tokenised corpora shared by experiments
    (:func:`cselab.data.tokens.tokenize_corpus`); None tokenises without caching.
    ``operational``: settings that change how the run goes, not what it computes (logging,
    checkpoints, processes, compile; :data:`cselab.pipeline.config.OPERATIONAL`): read like
    training settings, but not part of the checkpoints' fingerprint, so a changed one resumes.
    """
    t = {**spec["training"], **(operational or {})}
    set_seed(spec["seed"])  # the same on every process: the data order is shared
    main, world = D.is_main(), D.world_size()
    if device is None:
        device = (f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() and D.is_distributed()
                  else "cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    out_dir = Path(out_dir)
    model_dir = out_dir / "model"

    plm_dir = resolve_model(spec["model"])
    encoder = load_encoder(plm_dir, pooler=t.get("pooler", "cls"), dropout=t.get("dropout")).to(dev)
    padded_because = encoder.use_unpadded(t.get("unpadded", True))
    if padded_because:
        log.info("training.unpadded: the padded forward for %s (%s)", spec["model"], padded_because)
    objective = build_objective({**spec, "training": t}, encoder, artifacts, plm_dir).to(dev)

    sentences = read_sentences(corpus_path, min_lines=2)

    def tokenize(texts: list[str]):
        return tokenize_corpus(texts, encoder.tokenizer, t["max_len"], token_cache)

    corpus = tokenize(sentences)
    objective.attach_corpus(sentences, corpus, tokenize)
    n_sentences, batch_size = len(corpus), t["batch_size"]
    per_epoch = n_sentences // batch_size + (1 if n_sentences % batch_size >= 2 else 0)
    if per_epoch == 0:
        raise DataError(f"training corpus {corpus_path} has {n_sentences} sentences, fewer than 2 per batch")
    total = per_epoch * t["epochs"]  # the schedule's length
    if t.get("max_steps"):
        total = min(total, t["max_steps"])
    last = min(total, t.get("stop_at") or total)  # the last step actually trained
    accumulate = t.get("accumulation_steps") or 1
    remainder = n_sentences % batch_size
    smallest = remainder if remainder >= 2 and last >= per_epoch else batch_size  # the epoch's last batch
    if smallest < 2 * world * accumulate:  # a BatchNorm head or an in-batch loss needs 2 rows
        raise DataError(f"a batch of {smallest} sentences (training.batch_size {batch_size}, corpus of {n_sentences}) "
                        f"cannot be split into {world} process(es) x {accumulate} accumulation step(s) of at least "
                        "2 sentences; lower training.devices or training.accumulation_steps")

    optimizer = make_optimizer(encoder, objective, t, dev)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    scheduler = linear_schedule(optimizer, total, warmup_steps(t, total))
    generator = torch.Generator().manual_seed(spec["seed"])
    precision = Precision(t.get("precision", "fp32"), dev)
    trainable: nn.Module = Trainable(encoder, objective)
    if world > 1:
        if t.get("batchnorm_stats", "global") == "global":  # the single-process math, on every backend
            D.global_batchnorm(trainable)
        # parameters a method never uses (e.g. BERT's pooler under cls_before_pooler) are found once
        # (static_graph), or on every backward where micro-batches skip the gradient sync
        # (no_sync does not combine with static_graph)
        trainable = nn.parallel.DistributedDataParallel(
            trainable, device_ids=[dev] if dev.type == "cuda" else None,
            **({"find_unused_parameters": True} if accumulate > 1 else {"static_graph": True}))

    curve: list[dict] = []
    best_step, best_dev = -1, -math.inf
    step, seen, train_time = 0, 0, 0.0
    epoch0, order, start0, window_state = 0, None, 0, None

    def record(row: dict) -> None:
        curve.append(row)
        if on_log and main:
            on_log(row)

    def save_model(target: Path) -> None:
        def fill(tmp: Path) -> None:
            if dev_score is None:
                objective.primary.export(tmp)
                return
            encoder.save(tmp)
            head, kind = getattr(objective.primary, "head", None), getattr(objective.primary.options, "head", None)
            if isinstance(head, torch.nn.Module) and kind:
                save_head(tmp, head, kind)
        write_with(target, fill)

    def evaluate(step: int, epoch: int, keep: bool) -> None:
        """Rank 0 scores and keeps the best model; the others go on to the next step's collectives."""
        nonlocal best_step, best_dev
        if not main:
            return
        out = dev_score(encoder)
        metrics = dict(out) if isinstance(out, dict) else {"stsb_dev_spearman": out}
        score = metrics["stsb_dev_spearman"]
        log.info("step %d: STS-B dev Spearman %.2f", step, score)
        record({"step": step, "epoch": epoch, **metrics})
        if keep and not math.isnan(score) and score > best_dev:
            best_step, best_dev = step, score
            save_model(model_dir)

    every = t.get("checkpoint_steps") or 0
    checkpoints = Checkpoints(checkpoint_dir, fingerprint(spec, corpus_path, artifacts)) if checkpoint_dir else None
    # rank 0 picks (and cleans up) the checkpoint; every process reads the same one
    found = D.broadcast_object(checkpoints.latest() if checkpoints and main else None)
    state = checkpoints.read(found) if found else None
    if state:
        log.info("resuming %s from step %d", spec["id"], state["step"])
        encoder.load_state_dict(state["encoder"])
        objective.load_state_dict(state["objective"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        precision.scaler.load_state_dict(state["scaler"])
        ranks = state.get("rng_ranks")
        if ranks and len(ranks) == world:
            set_rng_state(ranks[D.rank()], generator)
        else:
            set_rng_state(state["rng"], generator)
            if world > 1 or ranks and len(ranks) > 1:
                log.info("resuming a %d-process checkpoint on %d process(es): same data order, new dropout streams",
                         len(ranks or [0]), world)
        curve = state["curve"]
        step, seen, train_time = state["step"], state["seen"], state["train_time"]
        best_step, best_dev = state["best_step"], state["best_dev"]
        epoch0, start0 = state["epoch"], state["next_start"]
        order = None if state["order"] is None else torch.as_tensor(state["order"], dtype=torch.long)
        window_state = state["window"]
        if main and best_step >= 0:  # the job runner may have deleted out_dir/model with the failed job's outputs
            write_with(model_dir, lambda tmp: shutil.copytree(state["best_dir"], tmp, copy_function=link_or_copy))
        elif main:
            shutil.rmtree(model_dir, ignore_errors=True)
    resumed_from = step

    pad_id = encoder.tokenizer.pad_token_id
    # with torch.compile, a few padded lengths (multiples of 8) instead of every length up to max_len
    multiple = t.get("pad_to_multiple_of") or (8 if t.get("compile") else 1)
    if t.get("compile"):
        encoder.compile_backbone(mode=None if t["compile"] is True else t["compile"])
    log.info("training %s: %d sentences, %d of %d steps of %d, methods %s on %s (%s, %s%s%s)", spec["id"],
             n_sentences, last, total, batch_size, " + ".join(objective.names), dev, precision.name,
             "unpadded" if encoder.unpadded and not t.get("compile") else "padded",
             ", compiled" if t.get("compile") else "", f", {world} processes" if world > 1 else "")
    if not state and dev_score is not None:
        evaluate(0, 0, keep=False)
    objective.train()
    encoder.train()
    window = Window.restore(window_state)
    eval_steps, log_steps = t.get("eval_steps") or 0, t.get("log_steps", 10)
    for epoch in range(epoch0, t["epochs"]):
        if step >= last:
            break
        if order is None:
            order = torch.randperm(n_sentences, generator=generator)
        for start in range(start0, per_epoch * batch_size, batch_size):
            with record_function("cselab.step"):  # named ranges: the profiler's view of a step
                index = order[start:start + batch_size]
                micro = torch.tensor_split(index, accumulate)
                for m, micro_index in enumerate(micro):
                    with record_function("cselab.batch"):
                        local = D.shard(micro_index)
                        # index and lengths stay on the host (CompCSE's parts; the unpadded forward's packing)
                        batch = {**to_device(corpus.batch(local, pad_id, multiple), dev), "index": local,
                                 "lengths": corpus.lengths[local]}
                    with record_function("cselab.prepare"), torch.no_grad():
                        batch = objective.prepare(batch)
                    # gradients are averaged over processes once, after the last micro-batch
                    sync = contextlib.nullcontext() if world == 1 or m == len(micro) - 1 else trainable.no_sync()
                    with sync:
                        with record_function("cselab.forward"), precision.autocast():
                            loss, terms, scalars = trainable(batch)
                        with record_function("cselab.backward"):
                            precision.backward(loss / accumulate if accumulate > 1 else loss)
                    window.add({"loss": terms.pop("total"), **{f"loss.{k}": v for k, v in terms.items()},
                                **scalars}, len(micro_index), 1 / len(micro), step_end=m == len(micro) - 1)
                with record_function("cselab.optimizer"):
                    precision.step(optimizer, params, t.get("max_grad_norm"))
                    scheduler.step()
                    optimizer.zero_grad(set_to_none=True)
                step += 1
                seen += len(index)
            if step % log_steps == 0 or step == last:
                means = window.means()
                if not math.isfinite(means["loss"]):
                    raise FloatingPointError(f"loss became {means['loss']} by step {step}; lower training.lr")
                train_time += window.seconds
                record({"step": step, "epoch": epoch, **means, "lr": scheduler.get_last_lr()[0],
                        "sentences_per_s": window.sentences / window.seconds})
                window = Window()
            if dev_score is not None and ((eval_steps and step % eval_steps == 0)
                                          or (t.get("eval_at_end") and step == last)):
                evaluate(step, epoch, keep=True)
                encoder.train()
                window.start = time.perf_counter() if window.steps == 0 else window.start
            if step >= last:
                break
            if checkpoints and every and step % every == 0:  # after the step's evaluation: RNGs as they are now
                rngs, window_now = D.all_objects(rng_state(generator)), window.state()  # every process joins
                if main:  # parameters and optimizer state are identical on every process
                    checkpoints.save({
                        "encoder": encoder.state_dict(), "objective": objective.state_dict(),
                        "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                        "scaler": precision.scaler.state_dict(), "rng": rngs[0], "rng_ranks": rngs,
                        "epoch": epoch, "order": order, "next_start": start + batch_size,
                        "step": step, "seen": seen, "train_time": train_time, "best_step": best_step,
                        "best_dev": best_dev, "curve": curve, "window": window_now, "world_size": world,
                    }, model_dir if best_step >= 0 else None)
        order, start0 = None, 0
    if main:  # the other processes are done: rank 0 writes the outputs
        if dev_score is None or best_step < 0:
            if dev_score is not None and any("stsb_dev_spearman" in r and r["step"] > 0 for r in curve):
                raise FloatingPointError("STS-B dev Spearman was NaN at every evaluation; the model collapsed")
            if dev_score is not None:
                log.warning("no STS-B dev evaluation in %d steps (eval_steps %s): keeping the final weights", step,
                            eval_steps)
            best_step, best_dev = step, math.nan
            save_model(model_dir)
        write_json(model_dir / "cselab.json",
                   {"experiment": spec, "best_step": best_step, "stsb_dev_spearman": best_dev})
        write_curve(curve, out_dir / "curve.csv")
        if checkpoint_dir:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)
    return TrainResult(best_step=best_step, best_dev=best_dev, steps=step, train_seconds=train_time,
                       sentences_per_s=seen / train_time if train_time else float("nan"), curve=curve,
                       resumed_from=resumed_from)

def make_optimizer(encoder: nn.Module, objective: nn.Module, t: dict, dev: torch.device) -> torch.optim.AdamW:
    """AdamW over the encoder and the methods' parameter groups. With ``weight_decay``, biases
    and LayerNorm weights are not decayed (the HF Trainer's rule, which the references used);
    fused on CUDA (one kernel for all parameters, no host sync), foreach elsewhere."""
    groups = [{"params": [p for p in encoder.parameters() if p.requires_grad], "lr": t["lr"]},
              *objective.param_groups(t["lr"])]
    decay = t.get("weight_decay", 0.0)
    if decay:
        exempt = {id(p) for module in (encoder, objective) for m in module.modules()
                  for name, p in m.named_parameters(recurse=False)
                  if name == "bias" or isinstance(m, nn.LayerNorm) or "layernorm" in type(m).__name__.lower()}
        groups = [{**g, "params": ps, "weight_decay": wd} for g in groups
                  for ps, wd in (([p for p in g["params"] if id(p) not in exempt], decay),
                                 ([p for p in g["params"] if id(p) in exempt], 0.0)) if ps]
    return torch.optim.AdamW(groups, lr=t["lr"], weight_decay=decay, fused=True if dev.type == "cuda" else None)


def warmup_steps(t: dict, total: int) -> int:
    """``warmup_steps``, or ``ceil(warmup_ratio * total)`` (the HF Trainer's rounding)."""
    return t.get("warmup_steps") or math.ceil(t.get("warmup_ratio", 0.0) * total)


def linear_schedule(optimizer: torch.optim.Optimizer, total: int, warmup: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The HF Trainer's linear schedule: from 0 up to ``lr`` over ``warmup`` steps, then down to 0
    at step ``total`` (the first step of a warm-up trains at lr 0, as there)."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: s / max(1, warmup) if s < warmup else max(0.0, (total - s) / max(1, total - warmup)))


def train_job(kwargs: dict) -> TrainResult:
    """:func:`train` with its arguments in one picklable dict: the entry of a multi-process job
    (:func:`cselab.training.distributed.launch`); callables in it must be picklable (a
    module-level function or a ``functools.partial`` of one)."""
    return train(**kwargs)


def write_curve(curve: list[dict], path: Path) -> None:
    fields = CURVE_FIELDS + sorted({k for row in curve for k in row} - set(CURVE_FIELDS))
    with open_atomic(path) as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(curve)
