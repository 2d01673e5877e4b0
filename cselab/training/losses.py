"""Contrastive losses shared by the methods, computed in fp32 whatever the autocast around them.

Under bf16/fp16 autocast a matmul runs in half precision even on fp32 inputs; the references
compute the cosine-similarity matrix, softmax and cross-entropy in fp32 (SimCSE's
``cosine_similarity`` and ``cross_entropy`` are on autocast's fp32 list), so these functions
switch autocast off and cast their inputs up.

Every loss over in-batch negatives is decorated with :func:`cselab.training.distributed.in_batch`:
in a multi-process job it sees the whole global batch (both views gathered from every process),
so its value and gradient are the single-process ones at the same global batch size.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from cselab.training.distributed import in_batch


def fp32(device: torch.device) -> contextlib.AbstractContextManager:
    """A region where autocast is off (ops run in the dtype of their inputs)."""
    return torch.autocast(device_type=device.type, enabled=False)


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``s_ij = cos(a_i, b_j)`` in fp32."""
    with fp32(a.device):
        return F.normalize(a.float(), dim=-1) @ F.normalize(b.float(), dim=-1).T


@in_batch
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


@in_batch
def info_nce_hard_negatives(anchor: torch.Tensor, candidates: torch.Tensor, temperature: float) -> torch.Tensor:
    """InfoNCE with one extra negative per sentence (supervised SimCSE's hard negatives, Gao et
    al., 2021, section 4; DiffCSE Table 15's edits as negatives): ``candidates`` ``[N, 2, d]``
    holds each sentence's positive and its extra negative; every anchor is scored against all
    ``2N`` of them (``[s(a_i, p_j) ; s(a_i, n_j)]``), label ``i``."""
    sim = torch.cat([cosine_matrix(anchor, candidates[:, 0]), cosine_matrix(anchor, candidates[:, 1])], dim=1)
    with fp32(sim.device):
        return F.cross_entropy(sim / temperature, torch.arange(sim.size(0), device=sim.device))


# ---------------------------------------------------------------------------------------------
# The losses of the unified gradient paradigm (Li, Zhang, Nie, 2024). ``u``, ``v``: the two
# views' embeddings [N, d] (normalised here); s_ij = u_i . v_j. Effective losses first (its
# Table 1), then the paradigm's own loss, then the non-contrastive losses with the three
# components it adds: gradient dissipation (gd), weight (w) and ratio (r).
# ---------------------------------------------------------------------------------------------

_OFF = 1e8  # masks the diagonal out of a max / min / softmax


def _unit(u: torch.Tensor) -> torch.Tensor:
    return F.normalize(u.float(), dim=-1)


def _eye(n: int, device) -> torch.Tensor:
    return torch.eye(n, device=device, dtype=torch.bool)


@in_batch
def arccon(u: torch.Tensor, v: torch.Tensor, temperature: float, margin_deg: float = 10.0) -> torch.Tensor:
    """ArcCon (Zhang et al., 2022): InfoNCE with an additive angular margin on the positive,
    ``cos(theta_ii + margin)`` in place of ``s_ii``. The cosine is clamped to (-1, 1) before
    ``arccos`` (the authors' code is not, and gives NaN at a cosine that rounds to 1)."""
    with fp32(u.device):
        s = cosine_matrix(u, v)
        eye = _eye(s.size(0), s.device)
        theta = torch.acos(s.diagonal().clamp(-1 + 1e-7, 1 - 1e-7))
        s = torch.where(eye, torch.cos(theta + math.radians(margin_deg)).diag_embed(), s)
        return F.cross_entropy(s / temperature, torch.arange(s.size(0), device=s.device))


@in_batch
def mpt(u: torch.Tensor, v: torch.Tensor, margin: float = 0.23) -> torch.Tensor:
    """Margin-based triplet loss on cosines: ``mean relu(max_{j!=i} s_ij - s_ii + m)``."""
    with fp32(u.device):
        s = cosine_matrix(u, v)
        neg = (s - _OFF * _eye(s.size(0), s.device)).max(dim=1).values
        return F.relu(neg - s.diagonal() + margin).mean()


@in_batch
def met(u: torch.Tensor, v: torch.Tensor, margin: float = 0.45) -> torch.Tensor:
    """Euclidean triplet loss: ``d = sqrt(max(2 - 2 s, 1e-4))``, ``mean relu(d_ii - min_{j!=i} d_ij + m)``."""
    with fp32(u.device):
        d = torch.sqrt(torch.clamp(2 - 2 * cosine_matrix(u, v), min=1e-4))
        neg = (d + _OFF * _eye(d.size(0), d.device)).min(dim=1).values
        return F.relu(d.diagonal() - neg + margin).mean()


@in_batch
def mat(u: torch.Tensor, v: torch.Tensor, margin: float = 0.15) -> torch.Tensor:
    """Angular triplet loss: ``mean relu(theta_ii - min_{j!=i} theta_ij + m * pi)``."""
    with fp32(u.device):
        theta = torch.acos(cosine_matrix(u, v).clamp(-1 + 1e-7, 1 - 1e-7))
        neg = (theta + _OFF * _eye(theta.size(0), theta.device)).min(dim=1).values
        return F.relu(theta.diagonal() - neg + margin * math.pi).mean()


@in_batch
def paradigm_loss(u: torch.Tensor, v: torch.Tensor, m: float = 0.30, tau: float | None = 0.05,
                  ratio: float = 1.0, power: int | None = None, gd: bool = True,
                  positive: str = "both") -> torch.Tensor:
    """The paradigm's simulated-gradient loss (its Eq. 5): the gradient on anchor ``u_i`` is
    ``GD_i * sum_{j!=i} W_ij (v_j - R v_i)``.

    Per direction (u against stop-gradient v, then v against stop-gradient u, summed):
    ``GD_i = 1[s_ii - max_{j!=i} s_ij < m]`` on detached similarities; ``W`` the row softmax of
    ``s / tau`` over the negatives (or, with ``power``, ``max(s, 1e-4)^power`` normalised), detached;
    the term ``W_ij (s_ij - R s_ii)`` averaged over the kept rows and all N columns. As in the
    authors' code the aligned similarity ``s_ii`` is live in both directions (``positive="both"``),
    so each embedding is pulled by both and the effective ratio is ``2R``; ``positive="anchor"``
    detaches the positive within each direction (ratio ``R``, the paper's formula). A batch with
    no kept row contributes 0 (the code's mean of nothing is NaN).
    """
    with fp32(u.device):
        un, vn = _unit(u), _unit(v)
        n = un.size(0)
        eye = _eye(n, un.device)
        s = un.detach() @ vn.detach().T
        diag = s.diagonal()
        masks = (diag - (s - _OFF * eye).max(dim=1).values < m, diag - (s - _OFF * eye).max(dim=0).values < m)
        total = 0.0 * (un.sum() + vn.sum())  # zero, but attached to the graph when no anchor is kept
        for x, y, mask in ((un, vn, masks[0]), (vn, un, masks[1])):
            aligned = (x * (y if positive == "both" else y.detach())).sum(-1)
            sim = torch.where(eye, aligned.diag_embed(), x @ y.detach().T)
            target = sim - ratio * aligned[:, None]
            if power is None:
                weight = torch.softmax((sim.detach() - _OFF * eye) / tau, dim=1)
            else:
                weight = sim.detach().clamp(min=1e-4).pow(power).masked_fill(eye, 0.0)
                weight = weight / weight.sum(dim=1, keepdim=True)
            terms = weight * target
            if gd:  # the kept anchors' rows (none kept: adds 0); no boolean index, so no host sync on CUDA
                kept = torch.where(mask[:, None], terms, torch.zeros_like(terms)).sum()
                total = total + kept / (mask.sum() * n).clamp(min=1)
            else:
                total = total + terms.mean()
        return total


def gd_masks(un: torch.Tensor, vn: torch.Tensor, m: float, reference: str = "same_view"):
    """Gradient dissipation for the non-contrastive losses: which rows keep their gradient.

    ``same_view`` (the authors' code): ``G_ii - max_{j!=i} G_ij < m`` on the same view's Gram
    matrix, whose diagonal is the self-similarity 1, i.e. a row keeps its gradient while another
    sentence of its view lies within cosine ``1 - m``. ``positive`` (the paper's prose):
    ``s_ii - max_{j!=i} s_ij < m`` with the positive across views.
    """
    eye = _eye(un.size(0), un.device)
    if reference == "positive":
        s = un.detach() @ vn.detach().T
        return (s.diagonal() - (s - _OFF * eye).max(dim=1).values < m,
                s.diagonal() - (s - _OFF * eye).max(dim=0).values < m)
    out = []
    for x in (un, vn):
        g = x.detach() @ x.detach().T
        out.append(g.diagonal() - (g - _OFF * eye).max(dim=1).values < m)
    return tuple(out)


def _views(u, v, gd: bool, m: float, reference: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalised views; with ``gd`` the rows that fail the GD test lose their gradient (as
    anchor, positive and negative)."""
    un, vn = _unit(u), _unit(v)
    if not gd:
        return un, vn
    keep_u, keep_v = gd_masks(un, vn, m, reference)
    return torch.where(keep_u[:, None], un, un.detach()), torch.where(keep_v[:, None], vn, vn.detach())


@in_batch
def mhe(u, v, lam: float = 10.0, gd: bool = False, w: bool = False, r: bool = False, m: float = 0.30,
        tau: float = 0.05, ratio: float = 1.0, gd_reference: str = "same_view") -> torch.Tensor:
    """Alignment + minimum hyperspherical energy uniformity (same-view logsumexp over the pairs
    ``i > j``): ``lam * (U_u + U_v) + sum_i a_i (w_u,i + w_v,i) / 2`` with ``a_i = 2 - 2 u_i.v_i``.
    Original: ``w = 1/N``. ``w``: similarities over ``tau``, each alignment weighted by its row's
    share of the pair-sum over ``tau``; ``r``: alignments times ``ratio``."""
    with fp32(u.device):
        un, vn = _views(u, v, gd, m, gd_reference)
        n = un.size(0)
        align = 2 - 2 * (un * vn).sum(-1)
        lower = torch.tril_indices(n, n, offset=-1, device=un.device)  # the pairs i > j, row-major
        eye = _eye(n, un.device)
        loss = un.new_zeros(())
        for x in (un, vn):
            g = x @ x.T / (tau if w else 1.0)
            energy = torch.logsumexp(g[lower[0], lower[1]], dim=0)
            if w:
                share = torch.logsumexp(g.detach().masked_fill(eye, -_OFF), dim=1) - energy.detach()
                weight = share.exp() / tau
            else:
                weight = torch.full((n,), 1.0 / n, device=un.device)
            loss = loss + lam * energy + (align * weight / 2 * (ratio if r else 1.0)).sum()
        return loss


@in_batch
def mhs(u, v, lam: float = 1.0, gd: bool = False, w: bool = False, r: bool = False, m: float = 0.30,
        tau: float = 0.05, ratio: float = 1.0, gd_reference: str = "same_view") -> torch.Tensor:
    """Alignment + minimum hyperspherical separation uniformity: ``-min_{j!=i} ||u_i - sg v_j||``
    (and the same from v). Its weight is already the hardest negative, so ``w`` changes nothing;
    ``r`` weights each alignment by ``ratio / (2 * its nearest distance)``."""
    with fp32(u.device):
        un, vn = _views(u, v, gd, m, gd_reference)
        align = 2 - 2 * (un * vn).sum(-1)
        eye = _eye(un.size(0), un.device)
        loss = un.new_zeros(())
        for x, y in ((un, vn), (vn, un)):
            d = torch.sqrt(torch.cdist(x, y.detach()).pow(2) + 1e-4)
            nearest = (d + _OFF * eye).min(dim=1).values
            weight = ratio / (2 * nearest.detach()) if r else 0.5
            loss = loss - lam * nearest.mean() + (align * weight).mean()
        return loss


def _surrogate(u1, u2, gram_of, lam, w, r, tau, ratio, positive_original):
    """The stop-gradient surrogate shared by VICReg and Barlow Twins (the paradigm's App. D.2):
    ``sum_i [pos_i + lam * sum_j W_ij u1_i . sg(u1_j)]``; ``W`` from ``gram_of`` (own view for
    VICReg, other view for Barlow Twins): ``2 G / N^2``, or with ``w`` ``exp(G / tau)`` over its
    off-diagonal sum; with ``r`` ``pos_i = -lam * R * (sum_{j!=i} W_ij) u1_i . u2_i``."""
    n = u1.size(0)
    eye = _eye(n, u1.device)
    g = gram_of.detach() @ gram_of.detach().T
    if w:
        e = torch.exp(g / tau)
        weight = e / e.masked_fill(eye, 0.0).sum()
    else:
        weight = 2 * g / n ** 2
    neg = (weight * (u1 @ u1.detach().T)).sum(dim=1)
    if r:
        pos = -lam * ratio * weight.masked_fill(eye, 0.0).sum(dim=1) * (u1 * u2).sum(-1)
    else:
        pos = positive_original(u1, u2)
    return (pos + lam * neg).sum()


@in_batch
def vicreg(u, v, lam: float = 30.0, gd: bool = False, w: bool = False, r: bool = False, m: float = 0.30,
           tau: float = 0.05, ratio: float = 1.0, gd_reference: str = "same_view") -> torch.Tensor:
    """VICReg (Bardes et al., 2022) through its gradient-equivalent surrogate: weights from the
    anchor's own view, original positive ``-(2/N) u1_i . sg(u2_i)``."""
    with fp32(u.device):
        un, vn = _views(u, v, gd, m, gd_reference)
        n = un.size(0)

        def positive(a, b):
            return -(2 / n) * (a * b.detach()).sum(-1)

        return (_surrogate(un, vn, un, lam, w, r, tau, ratio, positive)
                + _surrogate(vn, un, vn, lam, w, r, tau, ratio, positive))


@in_batch
def barlow_twins(u, v, lam: float = 30.0, gd: bool = False, w: bool = False, r: bool = False, m: float = 0.30,
                 tau: float = 0.05, ratio: float = 1.0, gd_reference: str = "same_view") -> torch.Tensor:
    """Barlow Twins (Zbontar et al., 2021) through its gradient-equivalent surrogate: weights from
    the other view, original positive ``-sum_d c_d u1_id sg(u2_id)`` with
    ``c_d = (2/N)(1 - (1 - lam) C_dd)``, ``C`` the detached cross-correlation of the views."""
    with fp32(u.device):
        un, vn = _views(u, v, gd, m, gd_reference)
        n = un.size(0)

        def positive(a, b):
            c = (a.detach() * b.detach()).sum(0) / n   # the diagonal of sg(a)^T sg(b) / N
            coef = (2 / n) * (1 - (1 - lam) * c)
            return -(a * b.detach() * coef).sum(-1)

        return (_surrogate(un, vn, vn, lam, w, r, tau, ratio, positive)
                + _surrogate(vn, un, un, lam, w, r, tau, ratio, positive))
