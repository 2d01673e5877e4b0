"""The unified gradient paradigm (Li, Zhang, Nie, 2024): one family of losses on two dropout
views, contrastive (InfoNCE, ArcCon, MPT, MET, MAT), the paradigm's own simulated-gradient
loss, and non-contrastive ones (Barlow Twins, VICReg, MHE, MHS) in their original form or with
the paradigm's gradient dissipation (``gd``), weight (``w``) and ratio (``r``) terms (its §4,
Table 5: +GD, +W, +R). The losses are in :mod:`cselab.training.losses`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

from cselab.models.heads import HEADS, make_head
from cselab.training.methods import MethodConfig, Output, dropout_views, option

if TYPE_CHECKING:
    import torch

CONTRASTIVE = ("infonce", "arccon", "mpt", "met", "mat")
NON_CONTRASTIVE = ("barlowtwins", "vicreg", "mhe", "mhs")
LOSSES = (*CONTRASTIVE, "paradigm", *NON_CONTRASTIVE)
GD_REFERENCES = ("same_view", "positive")
POSITIVES = ("both", "anchor")
#: the effective losses' margins (ArcCon in degrees, MAT in units of pi), the authors' defaults
MARGINS = {"arccon": 10.0, "mpt": 0.23, "met": 0.45, "mat": 0.15}
#: the non-contrastive losses' lambda in their original form (the authors' scripts); modified: 1
LAMBDAS = {"barlowtwins": 30.0, "vicreg": 30.0, "mhe": 10.0, "mhs": 1.0}


class Paradigm(MethodConfig):
    """Two dropout views of each sentence through a training head, then the chosen ``loss``.

    Options: ``loss`` (:data:`LOSSES`); ``margin`` of an effective loss (default
    :data:`MARGINS`); the paradigm's terms ``gd`` / ``w`` / ``r`` with ``m`` (gradient-
    dissipation margin, 0.30; ``gd`` defaults to on for the paradigm's loss, off for the
    non-contrastive ones, their original form), ``tau`` (weight temperature, 0.05; ``power`` for the paradigm
    loss's power-form weight instead) and ``ratio`` (R, 1.0); ``lam`` (a non-contrastive loss's
    weight, default :data:`LAMBDAS`); ``gd_reference`` and ``positive`` (the authors' code,
    default, or the paper's prose: see :func:`~cselab.training.losses.gd_masks` and
    :func:`~cselab.training.losses.paradigm_loss`); ``head`` (``linear`` for BERT, ``tanh_linear``
    for RoBERTa, the authors' heads) initialised ``N(0, head_std)`` weights and biases;
    ``freeze_embeddings`` (the authors' code trains with the embedding layer frozen).

    Scalars logged per window: see :meth:`statistics` (the paradigm's Figures 8 and 9).
    """

    name = "paradigm"
    training_keys = ("temperature",)

    @dataclasses.dataclass
    class Options:
        loss: str = option("paradigm", enum=list(LOSSES))
        margin: float | None = option(None, minimum=0)
        gd: bool | None = None
        w: bool = False
        r: bool = False
        m: float = option(0.30, minimum=0)
        tau: float = option(0.05, exclusiveMinimum=0)  # the weight temperature
        power: int | None = option(None, minimum=0)
        ratio: float = option(1.0, exclusiveMinimum=0)  # R scales the pull towards the positive
        lam: float | None = option(None, minimum=0)
        gd_reference: str = option("same_view", enum=list(GD_REFERENCES))
        positive: str = option("both", enum=list(POSITIVES))
        head: str = option("linear", enum=list(HEADS))
        head_std: float = option(6e-3, exclusiveMinimum=0)
        freeze_embeddings: bool = False

        def __post_init__(self):
            if self.gd is None:  # the paradigm's own loss is defined with gradient dissipation
                self.gd = self.loss == "paradigm"

    @classmethod
    def validate_options(cls, o):
        if o.loss in CONTRASTIVE and (o.gd or o.w or o.r):
            return "loss", (f"{o.loss} is an effective loss: gd / w / r modify the paradigm loss and the "
                            f"non-contrastive losses ({', '.join(NON_CONTRASTIVE)}) only")
        return None

    def __init__(self, ctx):
        super().__init__(ctx)
        o = self.options
        self.head = make_head(o.head, ctx.hidden_size, o.head_std, bias_std=o.head_std)
        if o.freeze_embeddings:
            ctx.encoder.backbone.embeddings.requires_grad_(False)
        self.temperature = ctx.training.temperature
        self.lam = o.lam if o.lam is not None else LAMBDAS.get(o.loss)
        self.margin = o.margin if o.margin is not None else MARGINS.get(o.loss)

    def loss(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        from cselab.training import losses as L

        o = self.options
        if o.loss == "infonce":
            return L.info_nce(u, v, self.temperature)
        if o.loss == "arccon":
            return L.arccon(u, v, self.temperature, self.margin)
        if o.loss in ("mpt", "met", "mat"):
            return getattr(L, o.loss)(u, v, self.margin)
        if o.loss == "paradigm":
            return L.paradigm_loss(u, v, o.m, o.tau, o.ratio, o.power, gd=o.gd, positive=o.positive)
        fn = {"barlowtwins": L.barlow_twins, "vicreg": L.vicreg, "mhe": L.mhe, "mhs": L.mhs}[o.loss]
        return fn(u, v, self.lam, o.gd, o.w, o.r, o.m, o.tau, o.ratio, o.gd_reference)

    def forward(self, batch, shared):
        u, v = dropout_views(self.ctx, self.head, batch, shared)
        return Output({self.options.loss: self.loss(u, v)}, self.statistics(u.detach(), v.detach()))

    def statistics(self, u: torch.Tensor, v: torch.Tensor) -> dict[str, torch.Tensor]:
        """Geometry of the batch that the paradigm's Figures 8 and 9 follow during training (no
        gradient, no host sync: every value stays a tensor).

        With ``s = u v^T`` of the L2-normalised views: ``pos_cos`` (mean ``s_ii``),
        ``hardest_neg_cos`` (mean ``max_{j!=i} s_ij``), ``gd_kept`` (share of anchors with
        ``s_ii - max_{j!=i} s_ij < m``); over the kept anchors and their hardest negative ``n``
        (positive ``p``, ``alpha``/``beta`` the anchor's angles to them) the dynamic ratios of the
        effective losses, as in the authors' statistics code (BDBC-KG-NLP/UnderstandingCSE,
        ``statistics.py``): ArcCon ``ratio_arccon = sin(alpha + 10 deg) / sin alpha``, MET
        ``ratio_met = |u - n| / |u - p|`` and MAT ``ratio_mat = sin beta / sin alpha``
        (Figure 8(b)); and the angles of Figure 9 (radians), the quantities the paper's §3.1
        simulation draws from ``N(mu_p, 0.05^2)`` and ``N(mu_n, 0.10^2)``: ``pos_angle_mean`` /
        ``pos_angle_std`` of ``theta_ii = arccos s_ii`` over the anchors and ``neg_angle_mean`` /
        ``neg_angle_std`` of ``theta_ij`` over all ``B (B - 1)`` off-diagonal pairs (the sample
        standard deviation within the batch).
        """
        import torch
        import torch.nn.functional as F

        from cselab.training.losses import fp32

        with torch.no_grad(), fp32(u.device):
            un, vn = F.normalize(u.float(), dim=-1), F.normalize(v.float(), dim=-1)
            s = un @ vn.T
            n = s.size(0)
            eye = torch.eye(n, dtype=torch.bool, device=s.device)
            pos = s.diagonal()
            hardest = (s - 1e8 * eye).max(dim=1)
            keep = (pos - hardest.values < self.options.m).float()
            n_kept = keep.sum().clamp(min=1.0)
            angles = torch.acos(s.clamp(-1 + 1e-7, 1 - 1e-7))
            alpha = angles.diagonal()
            sin_alpha = torch.sin(alpha).clamp(min=1e-6)
            sin_beta = torch.sqrt((1 - hardest.values.square()).clamp(min=0.0))
            ratios = {
                "ratio_arccon": torch.sin(alpha + math.radians(MARGINS["arccon"])) / sin_alpha,
                "ratio_met": (un - vn[hardest.indices]).norm(dim=-1) / (un - vn).norm(dim=-1).clamp(min=1e-6),
                "ratio_mat": sin_beta / sin_alpha,
            }
            off = (~eye).float()
            pos_mean, pos_std = _mean_std(alpha, torch.ones_like(alpha), n)
            neg_mean, neg_std = _mean_std(angles, off, n * (n - 1))
            return {"pos_cos": pos.mean(), "hardest_neg_cos": hardest.values.mean(), "gd_kept": keep.mean(),
                    **{name: (r * keep).sum() / n_kept for name, r in ratios.items()},
                    "pos_angle_mean": pos_mean, "pos_angle_std": pos_std,
                    "neg_angle_mean": neg_mean, "neg_angle_std": neg_std}


def _mean_std(x: torch.Tensor, weight: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and sample standard deviation of the ``count`` entries of ``x`` where ``weight`` is 1
    (a mask as weights: no boolean indexing, so no host sync on CUDA); 0 for fewer than two."""
    mean = (x * weight).sum() / max(count, 1)
    var = ((x - mean).square() * weight).sum() / max(count - 1, 1)
    return mean, var.sqrt()
