"""Training diagnostics: what a run's curve, MLflow run and summary record besides its losses.

None of them is part of the experiment: each reads what a step or a dev evaluation has already
computed (no forward, no random draw), so switching them on or changing a threshold retrains
nothing.

- per logging window: the cosine between the two views the contrastive loss pairs
  (``view_cosine``, published by the methods), the in-batch duplicate rate (rows whose sentence
  is another row of the same global batch: false negatives of in-batch InfoNCE), sentences/s,
  real (unpadded) tokens/s and, on CUDA, the model FLOPs utilisation (:func:`mfu`);
- per STS-B dev evaluation (the fixed probe set): anisotropy and effective rank
  (:mod:`cselab.evaluation.geometry`), alignment and uniformity;
- the collapse alarm (:func:`collapse_alarm`): effective rank below, or uniformity above, the
  thresholds of ``training.collapse``; the loop logs a warning and the curve row, the job tags
  its MLflow run and writes the alarms into its summary, and tables name them in their notes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

#: dense 16-bit tensor-core peak TFLOP/s per device name fragment (vendor data sheets); the
#: first fragment found in ``torch.cuda.get_device_name()`` wins, so PCIe parts come first
PEAK_TFLOPS = (("H100 PCIe", 756.0), ("H100", 989.4), ("H200", 989.4), ("GH200", 989.4), ("A100", 312.0),
               ("A800", 312.0), ("L40S", 362.1), ("L40", 181.0), ("L4", 121.0), ("A10", 125.0), ("V100", 125.0),
               ("RTX 4090", 165.2), ("RTX 3090", 71.0), ("T4", 65.0))


def duplicate_rate(input_ids: torch.Tensor) -> torch.Tensor | float:
    """Share of a batch's rows whose token sequence is also another row's (each such row is a
    false negative of in-batch InfoNCE for its twin), as a 0-d tensor (read with the logging
    window, not every step).

    Sorted by a row hash, twins are neighbours and are compared exactly; no op here has a
    data-dependent size (``torch.unique`` has), so on CUDA the step does not wait for the device."""
    if input_ids.size(0) < 2:
        return 0.0
    ids = input_ids.long()
    rows = ids[(ids * _hash_weights(ids.size(1), ids.device)).sum(-1).argsort()]
    same = (rows[1:] == rows[:-1]).all(-1)
    return (F.pad(same, (1, 0)) | F.pad(same, (0, 1))).float().mean()


_WEIGHTS: dict[tuple[int, str], torch.Tensor] = {}


def _hash_weights(width: int, device: torch.device) -> torch.Tensor:
    """Fixed odd int64 multipliers, one per position (the row hash wraps around on overflow)."""
    key = (width, str(device))
    if key not in _WEIGHTS:
        draw = torch.randint(-2**62, 2**62, (width,), generator=torch.Generator().manual_seed(0)) | 1
        _WEIGHTS[key] = draw.to(device)
    return _WEIGHTS[key]


@torch.no_grad()
def view_cosine(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Mean cosine between row i of ``u`` and row i of ``v`` (a positive pair), detached."""
    return F.cosine_similarity(u.detach().float(), v.detach().float(), dim=-1).mean()


def peak_flops(device: torch.device, tflops: float | None = None) -> float | None:
    """The device's peak FLOP/s: ``tflops`` (``training.peak_tflops``) if given, else the table's
    entry for a CUDA device; None on the CPU or an unknown device (no MFU is logged)."""
    if tflops:
        return tflops * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak * 1e12 for fragment, peak in PEAK_TFLOPS if fragment in name), None)


def mfu(parameters: int, tokens_per_s: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation of the encoder's training runs: 6 FLOPs per parameter per token
    (forward 2, backward 4; Kaplan et al., 2020) over the tokens the encoder ran per second (every
    view, real tokens only), as a share of ``peak``. Attention's sequence-quadratic FLOPs and
    auxiliary networks (DiffCSE's discriminator, InfoCSE's auxiliary layers) are not counted, so
    this is a lower bound."""
    if not peak or not math.isfinite(tokens_per_s):
        return None
    return 6.0 * parameters * tokens_per_s / peak


def collapse_alarm(metrics: dict, thresholds: dict) -> str | None:
    """Why the dev metrics look like a collapse (effective rank under ``min_effective_rank`` or
    uniformity over ``max_uniformity``; a threshold of None is off), or None."""
    reasons = []
    rank, limit = metrics.get("effective_rank"), thresholds.get("min_effective_rank")
    if limit is not None and rank is not None and not rank >= limit:
        reasons.append(f"effective rank {rank:.3g} < {limit:g}")
    uniform, limit = metrics.get("uniformity"), thresholds.get("max_uniformity")
    if limit is not None and uniform is not None and not uniform <= limit:
        reasons.append(f"uniformity {uniform:.3g} > {limit:g}")
    return "; ".join(reasons) or None
