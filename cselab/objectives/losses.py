"""Loss functions shared by the objectives."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def info_nce(anchor: torch.Tensor, positive: torch.Tensor, temperature: float,
             d0: int | None = None) -> torch.Tensor:
    """InfoNCE over in-batch negatives: ``-log exp(s_ii/tau) / sum_j exp(s_ij/tau)``, averaged.

    ``s_ij`` is the cosine similarity of anchor i and positive j. With ``d0`` (DirectCLR) only
    the first ``d0`` coordinates enter the similarity; gradients still reach the encoder through
    them. ``d0 = None`` or ``d0 = d`` is plain InfoNCE.
    """
    if d0 is not None:
        anchor, positive = anchor[:, :d0], positive[:, :d0]
    sim = F.normalize(anchor.float(), dim=-1) @ F.normalize(positive.float(), dim=-1).T
    labels = torch.arange(sim.size(0), device=sim.device)
    return F.cross_entropy(sim / temperature, labels)
