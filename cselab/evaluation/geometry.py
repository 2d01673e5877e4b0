"""Alignment and uniformity (Wang & Isola, 2020) on STS-B, as SimCSE, DiffCSE and CompCSE use them.

``align = E_{(x, x+) ~ p_pos} ||f(x) - f(x+)||^2`` over pairs with gold score > 4, and
``uniform = log E_{x, y ~ p_data} exp(-2 ||f(x) - f(y)||^2)`` over all distinct pairs of the
split's unique sentences, on L2-normalised embeddings. Lower is better for both. The same
function serves the evaluation rule and the training loop's trajectories.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from cselab.evaluation.encoding import encode_unique


def alignment(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = F.normalize(x.float(), dim=-1), F.normalize(y.float(), dim=-1)
    return (x - y).pow(2).sum(-1).mean().item()


def uniformity(x: torch.Tensor) -> float:
    x = F.normalize(x.float(), dim=-1)
    return torch.pdist(x, p=2).pow(2).mul(-2).exp().mean().log().item()


def align_uniform(encode: Callable[[list[str]], np.ndarray], subset, threshold: float = 4.0) -> dict:
    """Alignment on the positive pairs (gold > threshold) and uniformity over the unique sentences."""
    embedded = encode_unique(encode, [*subset.sent1, *subset.sent2], allow_nan=True)
    pos = np.asarray(subset.gold) > threshold
    a = torch.from_numpy(embedded([s for s, p in zip(subset.sent1, pos) if p]))
    b = torch.from_numpy(embedded([s for s, p in zip(subset.sent2, pos) if p]))
    return {"alignment": alignment(a, b), "uniformity": uniformity(torch.from_numpy(embedded.vectors)),
            "n_positive_pairs": int(pos.sum()), "n_sentences": len(embedded)}
