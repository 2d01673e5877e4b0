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
import dataclasses
import json
import logging
import math
import random
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn
from torch.profiler import record_function

from cselab.data.corpus import read_sentences
from cselab.data.tokens import host_sum, to_device, tokenize_corpus
from cselab.errors import CselabError, DataError, NumericError
from cselab.io import Progress, link_or_copy, open_atomic, write_json, write_with
from cselab.models.checkpoints import record_model_files, resolve_model
from cselab.models.encoder import SentenceEncoder, load_encoder
from cselab.models.heads import save_head
from cselab.settings import to_plain
from cselab.settings.spec import ExperimentSpec
from cselab.training import compiled, diagnostics, memory
from cselab.training import distributed as D
from cselab.training.checkpoints import Checkpoints, fingerprint, rng_state, set_rng_state
from cselab.training.methods import method_config
from cselab.training.objective import build_objective
from cselab.training.numerics import Precision, linear_schedule, make_optimizer, warmup_steps
from cselab.training.preemption import Preempted, StopFlag, stop_on_signals

log = logging.getLogger(__name__)

CURVE_FIELDS = ["step", "epoch", "loss", "lr", "stsb_dev_spearman", "sentences_per_s"]
#: the curve's wall-clock columns: the only ones two runs of the same experiment may differ in
TIMING_FIELDS = ("sentences_per_s", "tokens_per_s", "mfu")
DevScore = Callable[[SentenceEncoder], "float | dict"]


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Window:
    """Sums of the logged values over a logging window, kept on the device (no per-step sync)."""

    def __init__(self):
        self.sums: dict[str, torch.Tensor | float] = {}
        self.steps = self.sentences = self.tokens = self.encoded = 0
        self.start = time.perf_counter()

    def add(self, values: dict, sentences: int, weight: float = 1.0, step_end: bool = True, tokens: int = 0,
            encoded: int = 0) -> None:
        """Add one batch's values (``weight``: its share of the step, for micro-batches), its
        sentences and real tokens (the global batch's) and the tokens this process's encoder ran."""
        for key, value in values.items():
            value = (value.detach().float() if isinstance(value, torch.Tensor) else float(value)) * weight
            self.sums[key] = self.sums[key] + value if key in self.sums else value
        self.steps += step_end
        self.sentences += sentences
        self.tokens += tokens
        self.encoded += encoded

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
        return {"sums": self._reduced(), "steps": self.steps, "sentences": self.sentences, "tokens": self.tokens,
                "encoded": self.encoded}

    def snapshot(self) -> tuple:
        """What :meth:`add` changes (its sums are new tensors each time: a shallow copy keeps them)."""
        return dict(self.sums), self.steps, self.sentences, self.tokens, self.encoded

    def restore_snapshot(self, saved: tuple) -> None:
        self.sums = dict(saved[0])
        self.steps, self.sentences, self.tokens, self.encoded = saved[1:]

    @classmethod
    def restore(cls, state: dict | None) -> "Window":
        window = cls()
        if state:
            window.sums, window.steps, window.sentences = state["sums"], state["steps"], state["sentences"]
            window.tokens, window.encoded = state.get("tokens", 0), state.get("encoded", 0)
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
    tokens_per_s: float = float("nan")
    alarms: list[dict] = field(default_factory=list)  # collapse alarms: {"step", "reason"}
    phases: dict = field(default_factory=dict)  # seconds outside the training steps: set-up, dev scoring, saving...


@dataclass
class LoopState:
    """Where a run is: what a checkpoint saves besides the networks, the optimizer, the schedule,
    the scaler and the RNGs (and what a resumed run continues from)."""

    step: int = 0
    seen: int = 0                      # sentences trained on
    train_time: float = 0.0            # seconds of logged windows
    best_step: int = -1
    best_dev: float = -math.inf
    epoch: int = 0
    order: torch.Tensor | None = None  # the epoch's shuffled sentence order
    next_start: int = 0                # the next batch's offset in it
    curve: list[dict] = field(default_factory=list)
    window: dict | None = None         # the open logging window (Window.state())
    tokens: int = 0                    # real tokens trained on
    alarms: list[dict] = field(default_factory=list)  # collapse alarms (cselab.training.diagnostics)


@dataclass
class Schedule:
    """How long the run is: batches per epoch, the schedule's length, the last step trained."""

    per_epoch: int
    total: int
    last: int
    batch_size: int
    accumulate: int


class Trainer:
    """One training run in named steps: :meth:`set_up` (encoder, objective, corpus, schedule),
    :meth:`optimizer_and_schedule`, :meth:`process_group` (several processes), :meth:`resume`,
    :meth:`step`, :meth:`checkpoint` and :meth:`finish`; :func:`train` runs them in order."""

    def __init__(self, spec: ExperimentSpec, device: torch.device, out_dir: Path, dev_score: DevScore | None,
                 on_log: Callable[[dict], None] | None, plan: memory.StepPlan | None = None):
        # ``spec.training``: the job's settings typed, its operational ones included (every key: a
        # spec leaves some out, which read as their defaults; ``spec.holds`` tells which it states)
        self.t = spec.training
        self.spec, self.dev, self.dev_score, self.on_log = spec, device, dev_score, on_log
        self.out_dir, self.model_dir = Path(out_dir), Path(out_dir) / "model"
        self.main, self.world = D.is_main(), D.world_size()
        self.state = LoopState()
        self.phases: dict[str, float] = {}  # wall seconds by phase (:meth:`phase`), this attempt's
        self.stop = StopFlag()  # set by a stop signal while the epochs run (:func:`train`)
        # how a step holds its batch (training.chunk_size): train()'s plan, else planned here alike
        self.plan = plan or step_plan(spec, self.t, device, self.world)
        self.memory_confirmed = False  # the first step's peak memory logged (CUDA)
        self.sentences = 0  # this process's sentences in the last micro-batch
        self.step_compiled = False  # training.compile: the step (or its chunks) compiled
        self.stepped = False  # this attempt ran a step
        self.batch_width: int | None = None  # a compiled step's one batch width (compile_step)
        self.widths_given = False  # training.pad_to_multiple_of was set: a compiled step keeps its widths

    @contextlib.contextmanager
    def phase(self, name: str):
        """Add the block's wall time to ``phases[name]`` (where a job's time goes besides training)."""
        tic = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - tic

    def used(self, key: str) -> bool:
        """Whether the job's spec holds ``key``: a setting read only by the methods that declare it
        (``USED_BY_METHODS`` of :mod:`cselab.pipeline.experiments`) is left out of a spec whose
        methods do not read it, which then runs as it always did without it."""
        return self.spec.holds(key)

    # -- set-up ------------------------------------------------------------------------------

    def set_up(self, corpus_path: Path, artifacts: dict | None, token_cache: Path | None) -> None:
        """The encoder, the objective (with its methods' heads and networks), the tokenised
        corpus attached to it, and the run's length."""
        spec, t = self.spec, self.t
        plm_dir = resolve_model(spec.model)
        # a stage whose methods read no pooled embedding has no pooler / unpadded in its spec
        self.encoder = load_encoder(plm_dir, pooler=t.pooler if self.used("pooler") else None,
                                    dropout=t.dropout).to(self.dev)
        padded_because = self.encoder.use_unpadded(t.unpadded and self.used("unpadded"))
        if padded_because:
            log.info("training.unpadded: the padded forward for %s (%s)", spec.model, padded_because)
        self.objective = build_objective(spec, self.encoder, artifacts, plm_dir).to(self.dev)
        runner = self.objective.runner  # training.chunk_size (chunk_tokens) as planned for the device
        runner.chunk_size, runner.chunk_tokens = self.plan.chunk_size, self.plan.chunk_tokens
        sentences = read_sentences(corpus_path, min_lines=2)

        def tokenize(texts: list[str]):
            return tokenize_corpus(texts, self.encoder.tokenizer, t.max_len, token_cache)

        self.corpus = tokenize(sentences)
        self.objective.attach_corpus(sentences, self.corpus, tokenize)
        self.schedule = self._schedule(corpus_path)
        self.peak = diagnostics.peak_flops(self.dev, t.peak_tflops)
        self.encoder_parameters = sum(p.numel() for p in self.encoder.parameters())

    def _schedule(self, corpus_path: Path) -> Schedule:
        t, n = self.t, len(self.corpus)
        batch_size = t.batch_size
        per_epoch = n // batch_size + (1 if n % batch_size >= 2 else 0)
        if per_epoch == 0:
            raise DataError(f"training corpus {corpus_path} has {n} sentences, fewer than 2 per batch")
        total = per_epoch * t.epochs
        if t.max_steps:
            total = min(total, t.max_steps)
        last = min(total, t.stop_at or total)  # the last step actually trained
        accumulate = t.accumulation_steps
        remainder = n % batch_size
        smallest = remainder if remainder >= 2 and last >= per_epoch else batch_size  # the epoch's last batch
        if smallest < 2 * self.world * accumulate:  # a BatchNorm head or an in-batch loss needs 2 rows
            raise DataError(f"a batch of {smallest} sentences (training.batch_size {batch_size}, corpus of {n}) "
                            f"cannot be split into {self.world} process(es) x {accumulate} accumulation step(s) of "
                            "at least 2 sentences; lower training.devices or training.accumulation_steps")
        return Schedule(per_epoch, total, last, batch_size, accumulate)

    def optimizer_and_schedule(self) -> None:
        """AdamW with the linear schedule, the data-order generator and the precision."""
        self.optimizer = make_optimizer(self.encoder, self.objective, self.t, self.dev)
        self.params = [p for g in self.optimizer.param_groups for p in g["params"]]
        self.scheduler = linear_schedule(self.optimizer, self.schedule.total,
                                         warmup_steps(self.t, self.schedule.total))
        self.generator = torch.Generator().manual_seed(self.spec.seed)
        self.precision = Precision(self.t.precision, self.dev)

    def process_group(self) -> None:
        """The trained networks as one module; on several processes DistributedDataParallel, with
        BatchNorm over the global batch unless ``batchnorm_stats: per_process``."""
        trainable: nn.Module = Trainable(self.encoder, self.objective)
        if self.world > 1:
            # the single-process math, on every backend (absent: the methods have no BatchNorm head)
            if self.used("batchnorm_stats") and self.t.batchnorm_stats == "global":
                D.global_batchnorm(trainable)
            if self.objective.runner.chunked:  # a backward in several passes: gradients averaged after them
                self.trainable = self.forward = trainable
                return
            # parameters a method never uses (e.g. BERT's pooler under cls_before_pooler) are found once
            # (static_graph), or on every backward where micro-batches skip the gradient sync
            # (no_sync does not combine with static_graph)
            trainable = nn.parallel.DistributedDataParallel(
                trainable, device_ids=[self.dev] if self.dev.type == "cuda" else None,
                **({"find_unused_parameters": True} if self.schedule.accumulate > 1 or self.plan.micro_batch
                   else {"static_graph": True}))
        self.trainable = self.forward = trainable

    def compile_step(self, mode: str | None = None) -> None:
        """``training.compile``: the step's forward (every network run of the methods, heads and
        loss terms; autograd compiles its backward) through ``torch.compile`` as one graph per
        batch shape. Batches are padded to multiples of ``pad_to_multiple_of`` (a few widths) and
        the encoder runs its padded forward at that width while training (static shapes, no host
        read); keyed dropout is one opaque op per site (:mod:`cselab.models.keyed_ops`), so
        nothing breaks the graph. With gradient caching each chunk is compiled instead, in one
        fixed shape (:meth:`Runner.compile_chunks`), the rest of the step eager around them.
        Evaluation keeps the eager encoder; weights are shared."""
        import torch._dynamo

        compiled.drop_partial_files(compiled.cache_dir())
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        self.encoder.static_shapes = True
        self.compile_mode, self.compile_retried, self.step_compiled = mode, False, True
        if not self.widths_given:  # every batch at the longest row's width: one shape, cached for later jobs
            self.batch_width = memory.tokens_of(self.t.max_len)
        if self.objective.runner.chunked:
            self.compile_chunks()
        else:
            self.forward = torch.compile(self.trainable, mode=mode, dynamic=False)
        self.precision.compile_update(self.optimizer, self.params, self.t.max_grad_norm)

    def compile_chunks(self) -> None:
        """Gradient caching's chunks compiled in one fixed shape: the longest row a batch may have."""
        multiple = self.t.pad_to_multiple_of or 8
        self.objective.runner.compile_chunks(-(-self.t.max_len // multiple) * multiple, mode=self.compile_mode)
        self.forward = self.trainable

    def guarded_step(self, index: torch.Tensor, window: Window, multiple: int) -> None:
        """:meth:`step`, run again from the state it began with (the random state, the logging
        window, BatchNorm's running statistics; the gradients cleared) after an out-of-memory
        error, in chunks half as large (:meth:`halve_chunks`): the same keys and draws, so the same
        step. With a compiled step, a failed compile (:mod:`cselab.training.compiled`) is retried
        once in a fresh cache, then the run goes on eager, the same way."""
        before = (rng_state(self.generator), window.snapshot(), self._norm_buffers())
        try:
            self.step(index, window, multiple)
            failed = None
        except torch.OutOfMemoryError as e:
            failed = " ".join([type(e).__name__ + ":", *str(e).split()])[:300]
        except compiled.compile_failures() as e:
            if not self.step_compiled:
                raise
            self._undo_step(before, window)
            self._recompile(" ".join([type(e).__name__ + ":", *str(e).split()])[:300])
            self.guarded_step(index, window, multiple)
            return
        if failed:  # outside the handler: the failed step's tensors are freed with its traceback
            self._undo_step(before, window)
            self.halve_chunks(failed)
            self.guarded_step(index, window, multiple)
            return
        self._confirm_memory()

    def _norm_buffers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Copies of the running statistics a step updates in place (BatchNorm heads), to undo it."""
        return [(b, b.clone()) for m in self.trainable.modules() if isinstance(m, nn.modules.batchnorm._NormBase)
                for b in m.buffers(recurse=False)]

    def _undo_step(self, before: tuple, window: Window) -> None:
        """Back to the state a failed step began with."""
        rng, logged, buffers = before
        self.optimizer.zero_grad(set_to_none=True)
        self.objective.runner.cached = []
        set_rng_state(rng, self.generator)
        window.restore_snapshot(logged)
        with torch.no_grad():
            for buffer, saved in buffers:
                buffer.copy_(saved)
        if self.dev.type == "cuda":
            torch.cuda.empty_cache()

    def _recompile(self, reason: str) -> None:
        runner = self.objective.runner
        if not self.compile_retried:
            log.warning("compiling the step failed (%s); compiling again in a fresh cache %s", reason,
                        compiled.fresh_cache())
            self.compile_retried = True
            if runner.compiled is not None:
                runner.graphs = {}
            else:
                self.forward = torch.compile(self.trainable, mode=self.compile_mode, dynamic=False)
            self.precision.uncompile_update(self.optimizer)
            self.precision.compile_update(self.optimizer, self.params, self.t.max_grad_norm)
        else:
            log.warning("compiling the step failed again (%s); training goes on with the eager step "
                        "(the same numbers, slower)", reason)
            self.forward, self.step_compiled = self.trainable, False
            runner.compile_chunks(None)
            self.precision.uncompile_update(self.optimizer)

    def halve_chunks(self, reason: str) -> None:
        """After an out-of-memory error: the step's chunks (rows a network run; a per-sentence
        objective's micro-batch) halved, from the whole batch where it ran whole; one warning. A
        step that failed at one row a chunk, or one of several processes (which cannot rerun a step
        alone), ends in one message naming the setting."""
        runner, plan, t = self.objective.runner, self.plan, self.t
        tokens = memory.tokens_of(t.max_len)
        chunk = runner.chunk_size or (runner.chunk_tokens and max(1, runner.chunk_tokens // tokens)) or runner.largest
        chunk = min(chunk, runner.largest or chunk)  # a chunk as large as the runs is the whole run
        current = min(plan.micro_batch or self.sentences, self.sentences) if plan.per_sentence else chunk
        free = torch.cuda.mem_get_info(self.dev)[0] if self.dev.type == "cuda" else None
        if self.world > 1:
            raise CselabError(f"training {self.spec.id}: out of device memory on one of {self.world} processes "
                              f"({reason}); set training.chunk_size to rows a network run below {current}")
        if current <= 1 or not (plan.per_sentence or runner.keyed):
            raise memory.too_large(self.spec.model, self.sentences, tokens, free) from None
        half = current // 2
        if plan.per_sentence:
            self.plan = dataclasses.replace(plan, micro_batch=half, reason=f"micro-batches of {half} sentences")
            what = f"micro-batches of {half} sentences"
        else:
            runner.chunk_size, runner.chunk_tokens = half, None
            self.plan = dataclasses.replace(plan, chunk_size=half, chunk_tokens=None, reason=f"chunks of {half} rows")
            what = f"chunks of {half} rows"
            if self.forward is not self.trainable:  # the whole step was compiled: its chunks are, instead
                self.compile_chunks()
        log.warning("out of device memory in step %d (%s): running it again in %s (training.chunk_size %s)",
                    self.state.step + 1, reason, what, t.chunk_size)

    def _confirm_memory(self) -> None:
        """After the first step on CUDA: its peak memory beside the plan's estimate (one line; a
        warning where it came within a few percent of the device's free memory)."""
        if self.memory_confirmed or self.dev.type != "cuda":
            return
        self.memory_confirmed = True
        peak, plan = torch.cuda.max_memory_allocated(self.dev), self.plan
        estimate = "" if math.isnan(plan.estimate_bytes) else (
            f", estimated {plan.estimate_bytes / 1e9:.1f} GB of {plan.available_bytes / 1e9:.1f} GB free")
        near = not math.isnan(plan.available_bytes) and peak > 0.95 * plan.available_bytes
        (log.warning if near else log.info)("training.chunk_size %s: %s; the first step's peak %.1f GB%s",
                                            self.t.chunk_size, plan.reason, peak / 1e9, estimate)

    # -- resume and checkpoint ----------------------------------------------------------------

    def resume(self, checkpoints: Checkpoints | None) -> bool:
        """Continue from the latest matching checkpoint, if any (rank 0 picks it, every process
        reads it); returns whether the run resumed."""
        saved = self._read_checkpoint(checkpoints) if checkpoints else None
        if not saved:
            return False
        log.info("resuming %s from step %d", self.spec.id, saved["loop"]["step"])
        for name in ("encoder", "objective", "optimizer", "scheduler"):
            getattr(self, name).load_state_dict(saved[name])
        self.precision.scaler.load_state_dict(saved["scaler"])
        self._restore_rngs(saved.get("rng_ranks"), saved["rng"])
        loop = dict(saved["loop"])
        if loop["order"] is not None:
            loop["order"] = torch.as_tensor(loop["order"], dtype=torch.long)
        self.state = LoopState(**loop)
        if self.main and self.state.best_step >= 0:  # the job runner may have deleted model/ with the failed job's outputs
            write_with(self.model_dir, lambda tmp: shutil.copytree(saved["best_dir"], tmp, copy_function=link_or_copy))
        elif self.main:
            shutil.rmtree(self.model_dir, ignore_errors=True)
        return True

    def _read_checkpoint(self, checkpoints: Checkpoints) -> dict | None:
        """The newest good checkpoint's state: one that passes its checksums but does not load is
        moved aside too, and the previous one is tried."""
        while True:
            found = D.broadcast_object(checkpoints.latest() if self.main else None)
            if not found:
                return None
            try:
                return checkpoints.read(found)
            except Exception as e:  # noqa: BLE001 (a truncated zip, a bad pickle: any way a file fails to load)
                if self.world > 1:
                    raise DataError(f"checkpoint {found} does not load ({e}); move it aside and rerun") from e
                checkpoints.quarantine(Path(found), f"state.pt does not load: {type(e).__name__}")

    def _restore_rngs(self, ranks: list | None, first: dict) -> None:
        if ranks and len(ranks) == self.world:
            set_rng_state(ranks[D.rank()], self.generator)
            return
        set_rng_state(first, self.generator)
        if self.world > 1 or ranks and len(ranks) > 1:
            log.info("resuming a %d-process checkpoint on %d process(es): same data order, new dropout streams",
                     len(ranks or [0]), self.world)

    def checkpoint(self, checkpoints: Checkpoints, window: Window) -> None:
        """Save the resumable state (after the step's evaluation: the RNGs as they are now); every
        process joins the collectives, rank 0 writes (parameters are identical everywhere)."""
        rngs = D.all_objects(rng_state(self.generator))
        loop = dataclasses.replace(self.state, window=window.state())
        if self.main:
            checkpoints.save({
                "encoder": self.encoder.state_dict(), "objective": self.objective.state_dict(),
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "scaler": self.precision.scaler.state_dict(), "rng": rngs[0], "rng_ranks": rngs,
                "world_size": self.world, "step": loop.step, "loop": dataclasses.asdict(loop),
            }, self.model_dir if loop.best_step >= 0 else None)

    # -- steps ----------------------------------------------------------------------------------

    def record(self, row: dict) -> None:
        self.state.curve.append(row)
        if self.on_log and self.main:
            self.on_log(row)

    def save_model(self) -> None:
        """The model as it is now into ``model/``: a pretraining stage's export, or the encoder
        (Hugging Face + sentence-transformers) with the primary method's head and its kind."""
        primary = self.objective.primary

        def fill(tmp: Path) -> None:
            if self.dev_score is None:
                primary.export(tmp)
                return
            self.encoder.save(tmp)
            head, kind = getattr(primary, "head", None), getattr(primary.options, "head", None)
            if isinstance(head, nn.Module) and kind:
                save_head(tmp, head, kind)

        with self.phase("save"):
            write_with(self.model_dir, fill)

    def evaluate(self, keep: bool) -> None:
        """Rank 0 scores STS-B dev and keeps the best model; the others go on to the next step's
        collectives."""
        if not self.main:
            return
        with self.phase("dev_eval"):
            out = self.dev_score(self.encoder)
        metrics = dict(out) if isinstance(out, dict) else {"stsb_dev_spearman": out}
        score, s = metrics["stsb_dev_spearman"], self.state
        log.info("step %d: STS-B dev Spearman %.2f", s.step, score)
        limits = to_plain(self.t.collapse)  # operational: never in a job's spec, read as the job's setting
        alarm = diagnostics.collapse_alarm(metrics, limits) if s.step > 0 else None
        if alarm:  # one warning a run; each alarm is in its log, curve, MLflow metric and table notes
            (log.info if s.alarms else log.warning)("collapse alarm at step %d: %s (training.collapse)", s.step, alarm)
            s.alarms.append({"step": s.step, "reason": alarm})
            metrics["collapse_alarm"] = 1.0
        self.record({"step": s.step, "epoch": s.epoch, **metrics})
        if keep and not math.isnan(score) and score > s.best_dev:
            s.best_step, s.best_dev = s.step, score
            self.save_model()

    def step(self, index: torch.Tensor, window: Window, multiple: int) -> None:
        """One optimizer step on the global batch ``index``: each micro-batch prepared, forward
        in the run's precision, backward (with gradient caching: in passes, :mod:`chunks`; a
        per-sentence objective too large for the device: in accumulated parts, :meth:`parts`);
        gradients averaged over processes once."""
        accumulate, world, runner = self.schedule.accumulate, self.world, self.objective.runner
        micro = torch.tensor_split(index, accumulate)
        for m, micro_index in enumerate(micro):
            batch, local, duplicates = self.micro_batch(micro_index, multiple)
            runner.begin(len(local), D.shard_offset(), self.dev)
            parts = self.parts(batch, len(local))
            for p, (part, share, start) in enumerate(parts):
                if share is not None:
                    runner.part(part["input_ids"].size(0), D.shard_offset() + start)
                end = p == len(parts) - 1
                last = world == 1 or (m == len(micro) - 1 and end) or not hasattr(self.trainable, "no_sync")
                with contextlib.nullcontext() if last else self.trainable.no_sync():
                    with record_function("cselab.forward"), self.precision.autocast():
                        loss, terms, scalars = self.forward(part)
                        loss = loss if share is None else loss * share
                    with record_function("cselab.backward"), self.precision.autocast():  # replayed chunks: autocast
                        runner.backward(loss / accumulate if accumulate > 1 else loss, self.precision.backward)
                weight = 1 / len(micro) if share is None else share / len(micro)
                window.add({"loss": terms.pop("total"), **{f"loss.{k}": v for k, v in terms.items()}, **scalars,
                            "duplicate_rate": duplicates}, len(micro_index) if end else 0, weight,
                           step_end=m == len(micro) - 1 and end,
                           tokens=host_sum(self.corpus.lengths[micro_index]) if end else 0,
                           encoded=runner.tokens if end else 0)
        if not isinstance(self.trainable, nn.parallel.DistributedDataParallel):
            D.average_gradients(self.params)  # gradient caching on several processes (no DDP)
        with record_function("cselab.optimizer"):
            self.precision.step(self.optimizer, self.params, self.t.max_grad_norm)
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.state.step += 1
        self.state.seen += len(index)

    def micro_batch(self, micro_index: torch.Tensor, multiple: int) -> tuple[dict, torch.Tensor, torch.Tensor]:
        """This process's share of a micro-batch, built, on the device and prepared by the methods
        (no gradients), its sentences' corpus indices, and the duplicate rate over every process's rows."""
        with record_function("cselab.batch"):
            local = D.shard(micro_index)
            # index and lengths stay on the host (CompCSE's parts; the unpadded forward's packing)
            host = self.corpus.batch(local, self.encoder.tokenizer.pad_token_id, multiple)
            # duplicates over the whole micro-batch (every process's rows): one process has it already
            whole = host if self.world == 1 else self.corpus.batch(micro_index, self.encoder.tokenizer.pad_token_id)
            duplicates = diagnostics.duplicate_rate(whole["input_ids"])
            batch = {**to_device(host, self.dev), "index": local, "lengths": self.corpus.lengths[local]}
        with record_function("cselab.prepare"), torch.no_grad():
            batch = self.objective.prepare(batch)
        self.sentences = len(local)
        return batch, local, duplicates

    def parts(self, batch: dict, sentences: int) -> list[tuple[dict, torch.Tensor | None, int]]:
        """The prepared ``batch`` as the step runs it: whole (``[(batch, None, 0)]``), or for a
        per-sentence objective whose micro-batch is smaller (``StepPlan.micro_batch``) its rows in
        parts, each with its share of the loss's units (``loss_units``: the whole batch's loss is
        their weighted sum, so are its gradients) and its first row. The batch is prepared (its
        masks drawn) whole, and each part runs under the whole batch's keys (``Runner.part``)."""
        size = self.plan.micro_batch
        if not size or size >= sentences:
            return [(batch, None, 0)]
        starts = range(0, sentences, size)
        parts = [{k: v[s:s + size] if isinstance(v, torch.Tensor) and v.dim() and v.size(0) == sentences else v
                  for k, v in batch.items()} for s in starts]
        units = [torch.as_tensor(self.objective.loss_units(part), dtype=torch.float32, device=self.dev)
                 for part in parts]
        total = torch.stack(units).sum().clamp(min=1)
        return [(part, u / total, s) for part, u, s in zip(parts, units, starts)]

    def log_window(self, window: Window) -> Window:
        """The logging window's means as a curve row (a new window begins)."""
        means, s = window.means(), self.state
        if not math.isfinite(means["loss"]):
            behind = ", ".join(f"training.{k} {getattr(self.t, k)}"
                               for k in ("lr", "precision", "max_grad_norm", "temperature") if self.used(k))
            raise NumericError(f"loss became {means['loss']} by step {s.step} ({behind}): lower training.lr, or "
                               "train in bf16/fp32 where fp16 overflows")
        s.train_time += window.seconds
        s.tokens += window.tokens
        speed = {"sentences_per_s": window.sentences / window.seconds, "tokens_per_s": window.tokens / window.seconds}
        utilisation = diagnostics.mfu(self.encoder_parameters, window.encoded / window.seconds, self.peak)
        if utilisation is not None:
            speed["mfu"] = utilisation
        self.record({"step": s.step, "epoch": s.epoch, **means, "lr": float(self.scheduler.get_last_lr()[0]), **speed})
        return Window()

    def run_epochs(self, checkpoints: Checkpoints | None) -> None:
        """The epochs from where the state is: steps, logging windows, STS-B dev at multiples of
        ``eval_steps`` (and the last step with ``eval_at_end``), checkpoints every
        ``checkpoint_steps``."""
        t, s, sched = self.t, self.state, self.schedule
        multiple = self.batch_width or t.pad_to_multiple_of or 1  # with compile, one width unless set (train)
        # a pretraining stage is not scored (no dev_score; its spec has no eval_steps / eval_at_end)
        eval_steps, log_steps, every = t.eval_steps or 0, t.log_steps, t.checkpoint_steps
        window = Window.restore(s.window)
        # a line every 20 s: with a step and an STS-B dev check between two, at most ~30 s apart
        progress = Progress(log, "training", sched.last, "steps", s.step, every=20.0) if self.main else None
        while s.epoch < t.epochs and s.step < sched.last:
            if s.order is None:
                s.order = torch.randperm(len(self.corpus), generator=self.generator)
            while s.next_start < sched.per_epoch * sched.batch_size:
                tic = time.perf_counter()
                with record_function("cselab.step"), self.phase("train_steps"):  # the profiler's view of a step
                    self.guarded_step(s.order[s.next_start:s.next_start + sched.batch_size], window, multiple)
                if not self.stepped:
                    self.stepped = True
                    log.info("the first step took %.1f s%s", time.perf_counter() - tic,
                             " (its compile included)" if self.step_compiled else "")
                s.next_start += sched.batch_size
                if progress:
                    progress.update(s.step)
                if s.step % log_steps == 0 or s.step == sched.last:
                    window = self.log_window(window)
                if self.dev_score is not None and ((eval_steps and s.step % eval_steps == 0)
                                                   or (t.eval_at_end and s.step == sched.last)):
                    self.evaluate(keep=True)
                    self.encoder.train()
                    window.start = time.perf_counter() if window.steps == 0 else window.start
                if s.step >= sched.last:
                    if progress:
                        progress.close()
                    return
                self.stop_if_asked(checkpoints, window)
                if checkpoints and every and s.step % every == 0:
                    with self.phase("checkpoint"):
                        self.checkpoint(checkpoints, window)
            s.epoch, s.order, s.next_start = s.epoch + 1, None, 0
        if progress:
            progress.close()

    def stop_if_asked(self, checkpoints: Checkpoints | None, window: Window) -> None:
        """After a step: on a stop signal (:mod:`cselab.training.preemption`; every process
        agrees), write a checkpoint and raise :class:`Preempted` (a run without checkpoints
        stops too, and resumes from scratch)."""
        asked = bool(self.stop) if self.world == 1 else D.any_process(bool(self.stop), self.dev)
        if not asked:
            return
        if checkpoints:
            with self.phase("checkpoint"):
                self.checkpoint(checkpoints, window)
        raise Preempted(self.state.step, self.stop.signum or signal.SIGTERM)

    # -- finish ----------------------------------------------------------------------------------

    def finish(self, checkpoint_dir: Path | None) -> None:
        """Rank 0 writes the outputs (the other processes are done): the model (a stage's export,
        or the final weights when nothing was scored), its ``cselab.json``, the curve."""
        if not self.main:
            return
        s = self.state
        if self.dev_score is None or s.best_step < 0:
            if self.dev_score is not None and any("stsb_dev_spearman" in r and r["step"] > 0 for r in s.curve):
                raise NumericError("STS-B dev Spearman was NaN at every evaluation; the model collapsed")
            if self.dev_score is not None:
                log.warning("no STS-B dev evaluation in %d steps (eval_steps %s): keeping the final weights", s.step,
                            self.t.eval_steps)
            s.best_step, s.best_dev = s.step, math.nan
            self.save_model()
        write_json(self.model_dir / "cselab.json",
                   {"experiment": self.spec.to_dict(), "best_step": s.best_step, "stsb_dev_spearman": s.best_dev})
        record_model_files(self.model_dir)  # what evaluations check the folder against
        write_curve(s.curve, self.out_dir / "curve.csv")
        if checkpoint_dir:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)

    def describe(self) -> None:
        t, sched = self.t, self.schedule
        held = f", {self.plan.reason}" if self.plan.chunk_size or self.plan.micro_batch else ""
        log.info("training %s: %d sentences, %d of %d steps of %d, methods %s on %s (%s, %s%s%s%s)", self.spec.id,
                 len(self.corpus), sched.last, sched.total, sched.batch_size, " + ".join(self.objective.names),
                 self.dev, self.precision.name, "unpadded" if self.encoder.unpadded and not self.encoder.static_shapes
                 else "padded", f", compiled ({t.compile})" if t.compile else "",
                 f", {self.world} processes" if self.world > 1 else "", held)


def train(spec: ExperimentSpec | dict, corpus_path: Path, dev_score: DevScore | None, out_dir: Path,
          on_log: Callable[[dict], None] | None = None, device: str | None = None,
          checkpoint_dir: Path | None = None, artifacts: dict[str, Path] | None = None,
          token_cache: Path | None = None, operational: dict | None = None) -> TrainResult:
    """Train one experiment (or pretraining stage). ``spec`` is ``experiment_spec``'s output
    (typed, :class:`~cselab.settings.spec.ExperimentSpec`, or its dict).

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
    checkpoints, processes, compile; :data:`cselab.settings.training.OPERATIONAL`): read like
    training settings, but not part of the checkpoints' fingerprint, so a changed one resumes.
    """
    spec = ExperimentSpec.of(spec, operational)  # typed once: its settings and the operational ones
    settings = spec.training  # a key the spec leaves out reads as its default
    dev = _device(device)
    plan = step_plan(spec, settings, dev, D.world_size())
    settings = dataclasses.replace(settings, compile=compiled.compile_mode(settings.compile, dev, D.world_size()))
    given = bool(settings.pad_to_multiple_of)
    if settings.compile and not given:  # a compiled step: one batch width (compile_step), the methods' parts a few
        settings = dataclasses.replace(settings, pad_to_multiple_of=8)
    set_seed(spec.seed)  # the same on every process: the data order is shared
    run = Trainer(spec.with_training(settings), dev, out_dir, dev_score, on_log, plan)
    run.widths_given = given
    with run.phase("set_up"):
        run.set_up(corpus_path, artifacts, token_cache)
        run.optimizer_and_schedule()
        run.process_group()
        checkpoints = (Checkpoints(checkpoint_dir, fingerprint(spec.to_dict(), corpus_path, artifacts))
                       if checkpoint_dir else None)
        resumed = run.resume(checkpoints)
    resumed_from = run.state.step
    if settings.compile:
        run.compile_step(mode=None if settings.compile is True else settings.compile)
    run.describe()
    if not resumed and dev_score is not None:
        run.evaluate(keep=False)
    run.objective.train()
    run.encoder.train()
    with stop_on_signals() as run.stop:
        run.run_epochs(checkpoints)
    run.finish(checkpoint_dir)
    s = run.state
    return TrainResult(best_step=s.best_step, best_dev=s.best_dev, steps=s.step, train_seconds=s.train_time,
                       sentences_per_s=s.seen / s.train_time if s.train_time else float("nan"), curve=s.curve,
                       resumed_from=resumed_from, tokens_per_s=s.tokens / s.train_time if s.train_time else math.nan,
                       alarms=s.alarms, phases=dict(run.phases))


def step_plan(spec: ExperimentSpec, t, dev: torch.device, world: int) -> memory.StepPlan:
    """How this run's steps hold their batch (``training.chunk_size``, :mod:`cselab.training.memory`):
    ``auto`` from the model's shape, the batch's tokens and the CUDA device's free memory (on the
    CPU: whole); the objective is per sentence when every method of it is."""
    components = [(cls, cls.check_options(c.options)) for c in spec.components() for cls in [method_config(c.method)]]
    per_sentence = all(cls.per_sentence_problem(options) is None for cls, options in components)
    model, footprint, free = None, memory.Footprint(), None
    if t.chunk_size == "auto" and dev.type == "cuda":
        model = memory.model_of_config(json.loads((Path(resolve_model(spec.model)) / "config.json").read_text()))
        per_sentence, footprint = memory.objective_memory(components, model.layers)
        free = torch.cuda.mem_get_info(dev)[0]
    sentences = -(-t.batch_size // (world * t.accumulation_steps))
    plan = memory.plan_step(t.chunk_size, per_sentence, model, footprint, sentences, memory.tokens_of(t.max_len),
                            t.precision, free, what=spec.model, can_chunk=t.keyed_dropout, chunk_tokens=t.chunk_tokens)
    if free is not None:
        log.info("training.chunk_size auto: %s (%d sentences a process of up to %d tokens; %.1f GB free)",
                 plan.reason, sentences, memory.tokens_of(t.max_len), free / 1e9)
    return plan


def _device(device: str | None) -> torch.device:
    """The run's device: given, else this process's GPU, else the CPU."""
    if device is None:
        device = (f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() and D.is_distributed()
                  else "cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


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
