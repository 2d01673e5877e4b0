"""Unsupervised SimCSE (Gao et al., 2021)."""

from __future__ import annotations

from cselab.objectives import Objective, register
from cselab.objectives.losses import info_nce


@register("simcse")
class SimCSE(Objective):
    """Positive = the same sentence encoded a second time with independent dropout.

    The batch is duplicated and encoded in one forward pass (dropout differs per row); the two
    halves are the anchor and positive views for InfoNCE with in-batch negatives.
    """

    def forward(self, encoder, batch):
        n = batch["input_ids"].size(0)
        z = encoder(batch["input_ids"].repeat(2, 1), batch["attention_mask"].repeat(2, 1))
        loss = info_nce(z[:n], z[n:], self.temperature)
        return loss, {}
