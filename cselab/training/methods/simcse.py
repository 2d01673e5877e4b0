"""Unsupervised SimCSE (Gao et al., 2021, section 3): the positive is the same sentence encoded
a second time with independent dropout."""

from __future__ import annotations

import dataclasses

from cselab.models.heads import HEADS, make_head
from cselab.training.methods import MethodConfig, Output, dropout_views, option


class SimCSE(MethodConfig):
    """The batch is duplicated and encoded in one forward pass (dropout differs per row); the two
    halves, through the training head, are the anchor and positive views for InfoNCE with
    in-batch negatives.

    Options: ``head``, the training head (``mlp``, SimCSE's; ``batchnorm``, DiffCSE's and
    InfoCSE's projector; ``linear``; ``none``).
    """

    name = "simcse"
    training_keys = ("temperature",)

    @dataclasses.dataclass
    class Options:
        head: str = option("mlp", enum=list(HEADS))

    def __init__(self, ctx):
        super().__init__(ctx)
        self.head = make_head(self.options.head, ctx.hidden_size, ctx.encoder.initializer_range)
        self.temperature = ctx.training.temperature

    def forward(self, batch, shared):
        from cselab.training.losses import info_nce

        u, v = dropout_views(self.ctx, self.head, batch, shared)
        return Output({"contrastive": info_nce(u, v, self.temperature)})
