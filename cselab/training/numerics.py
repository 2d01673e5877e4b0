"""The numerics of a training step: the precision (autocast and the fp16 gradient scaler) and
AdamW with the HF Trainer's linear schedule, as the references trained."""

from __future__ import annotations

import contextlib
import functools
import math
import warnings

import torch
from torch import nn

from cselab.errors import ConfigError
from cselab.settings.training import Training

#: training.precision -> autocast dtype (None: no autocast)
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


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

    def backward(self, loss: torch.Tensor, retain_graph: bool = False) -> None:
        self.scaler.scale(loss).backward(retain_graph=retain_graph)

    def step(self, optimizer: torch.optim.Optimizer, params: list, max_grad_norm: float | None) -> None:
        """Unscale, clip, step (skipped by the scaler when fp16 gradients overflowed), update; the
        clipping and the step in one compiled function after :meth:`compile_update` (without a scaler)."""
        if self.update is not None:
            self.update()
            return
        if max_grad_norm:
            self.scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        self.scaler.step(optimizer)
        self.scaler.update()

    update = None  # the compiled clipping and optimizer step (compile_update)
    eager_step = None  # the optimizer's step before compile_update compiled it (with fp16's scaler)

    def compile_update(self, optimizer: torch.optim.Optimizer, params: list, max_grad_norm: float | None) -> None:
        """``training.compile``: the optimizer's step through ``torch.compile`` (inductor's default
        mode; its learning rates tensors, which the schedule fills in place, so a new rate compiles
        nothing), with the gradient clipping in the same function; with fp16's scaler, whose skip
        of an overflowed step stays outside, the step alone. The numbers are the eager step's, to
        float rounding."""
        tensor_rates(optimizer)
        # the schedule wraps the step to note that it ran, in a file dynamo does not trace: the
        # step itself is compiled, and noted as run outside (optimizer._opt_called, the wrapper's)
        step = torch.compile(functools.partial(getattr(optimizer.step, "__wrapped__", type(optimizer).step), optimizer))

        def noted(*args, **kwargs):
            optimizer._opt_called = True
            return step(*args, **kwargs)

        if self.scaler.is_enabled():
            self.eager_step, optimizer.step = optimizer.step, noted
            return

        def update() -> None:
            if max_grad_norm:
                torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
            type(optimizer).step(optimizer)

        compiled_update = torch.compile(update)

        def noted_update() -> None:
            optimizer._opt_called = True
            compiled_update()

        self.update = noted_update

    def uncompile_update(self, optimizer: torch.optim.Optimizer) -> None:
        """Back to the eager clipping and step (after compiling failed twice)."""
        self.update = None
        if self.eager_step is not None:
            optimizer.step, self.eager_step = self.eager_step, None


def make_optimizer(encoder: nn.Module, objective: nn.Module, t: Training, dev: torch.device) -> torch.optim.AdamW:
    """AdamW over the encoder and the methods' parameter groups. With ``weight_decay``, biases
    and LayerNorm weights are not decayed (the HF Trainer's rule, which the references used);
    fused on CUDA (one kernel for all parameters, no host sync), foreach elsewhere."""
    groups = [{"params": [p for p in encoder.parameters() if p.requires_grad], "lr": t.lr},
              *objective.param_groups(t.lr)]
    decay = t.weight_decay
    if decay:
        exempt = {id(p) for module in (encoder, objective) for m in module.modules()
                  for name, p in m.named_parameters(recurse=False)
                  if name == "bias" or isinstance(m, nn.LayerNorm) or "layernorm" in type(m).__name__.lower()}
        groups = [{**g, "params": ps, "weight_decay": wd} for g in groups
                  for ps, wd in (([p for p in g["params"] if id(p) not in exempt], decay),
                                 ([p for p in g["params"] if id(p) in exempt], 0.0)) if ps]
    return torch.optim.AdamW(groups, lr=t.lr, weight_decay=decay, fused=True if dev.type == "cuda" else None)


def tensor_rates(optimizer: torch.optim.Optimizer) -> None:
    """Each parameter group's learning rate as a one-element tensor on its parameters' device (what
    a compiled optimizer step reads without recompiling when the schedule changes it); on CUDA the
    fused step captures its own step counts (``capturable``)."""
    for group in optimizer.param_groups:
        device = group["params"][0].device
        if not isinstance(group["lr"], torch.Tensor):
            group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
        if device.type == "cuda" and group.get("fused"):
            group["capturable"] = True


def warmup_steps(t: Training, total: int) -> int:
    """``warmup_steps``, or ``ceil(warmup_ratio * total)`` (the HF Trainer's rounding)."""
    return t.warmup_steps or math.ceil(t.warmup_ratio * total)


def linear_schedule(optimizer: torch.optim.Optimizer, total: int, warmup: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The HF Trainer's linear schedule: from 0 up to ``lr`` over ``warmup`` steps, then down to 0
    at step ``total`` (the first step of a warm-up trains at lr 0, as there)."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: s / max(1, warmup) if s < warmup else max(0.0, (total - s) / max(1, total - warmup)))
