"""Contrastive losses shared by the methods, computed in fp32 whatever the autocast around them.

Under bf16/fp16 autocast a matmul runs in half precision even on fp32 inputs; the references
compute the cosine-similarity matrix, softmax and cross-entropy in fp32 (SimCSE's
``cosine_similarity`` and ``cross_entropy`` are on autocast's fp32 list), so these functions
switch autocast off and cast their inputs up.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F


def fp32(device: torch.device) -> contextlib.AbstractContextManager:
    """A region where autocast is off (ops run in the dtype of their inputs)."""
    return torch.autocast(device_type=device.type, enabled=False)


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``s_ij = cos(a_i, b_j)`` in fp32."""
    with fp32(a.device):
        return F.normalize(a.float(), dim=-1) @ F.normalize(b.float(), dim=-1).T


def info_nce(anchor: torch.Tensor, positive: torch.Tensor, temperature: float,
             d0: int | None = None) -> torch.Tensor:
    """InfoNCE over in-batch negatives: ``-log exp(s_ii/tau) / sum_j exp(s_ij/tau)``, averaged.

    ``s_ij`` is the cosine similarity of anchor i and positive j. With ``d0`` (DirectCLR, Jing
    et al., 2022; CompCSE Table 6) only the first ``d0`` coordinates enter the similarity;
    gradients still reach the encoder through them. ``d0 = None`` or ``d0 = d`` is plain InfoNCE.
    """
    if d0 is not None:
        anchor, positive = anchor[:, :d0], positive[:, :d0]
    sim = cosine_matrix(anchor, positive)
    with fp32(sim.device):
        labels = torch.arange(sim.size(0), device=sim.device)
        return F.cross_entropy(sim / temperature, labels)
