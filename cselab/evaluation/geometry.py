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


def anisotropy(x: np.ndarray) -> float:
    """Mean cosine over distinct pairs of rows (Ethayarajh, 2019): 0 for directions spread
    evenly, 1 when every embedding points the same way. From the sum of the unit rows, so no
    n x n matrix is formed."""
    u = np.asarray(x, dtype=np.float64)
    u = u / np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12)
    n = len(u)
    total = u.sum(axis=0)
    return float((total @ total - n) / (n * (n - 1)))


def effective_rank(x: np.ndarray) -> float:
    """Effective rank of the embeddings' covariance (Roy & Vetterli, 2007): exp of the entropy of
    its eigenvalues normalised to sum 1; the embedding size for isotropic embeddings, 1 when
    they vary along one direction only (a dimensional collapse), NaN for constant ones."""
    centered = np.asarray(x, dtype=np.float64) - np.mean(x, axis=0)
    eig = np.clip(np.linalg.svd(centered, compute_uv=False) ** 2, 0, None)
    if not np.isfinite(eig).all() or eig.sum() == 0:
        return float("nan")
    p = eig[eig > 0] / eig.sum()
    return float(np.exp(-(p * np.log(p)).sum()))


def align_uniform(encode: Callable[[list[str]], np.ndarray], subset, threshold: float = 4.0) -> dict:
    """Alignment on the positive pairs (gold > threshold) and uniformity over the unique sentences."""
    embedded = encode_unique(encode, [*subset.sent1, *subset.sent2], allow_nan=True)
    pos = np.asarray(subset.gold) > threshold
    a = torch.from_numpy(embedded([s for s, p in zip(subset.sent1, pos) if p]))
    b = torch.from_numpy(embedded([s for s, p in zip(subset.sent2, pos) if p]))
    return {"alignment": alignment(a, b), "uniformity": uniformity(torch.from_numpy(embedded.vectors)),
            "n_positive_pairs": int(pos.sum()), "n_sentences": len(embedded)}
