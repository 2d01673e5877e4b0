"""DiffCSE's Table 15 (Chuang et al., 2022, appendix B): the edits DiffCSE learns to be
equivariant to (MLM replacement, random insertion, random deletion at 15%) used instead as
additional positives or additional negatives of unsupervised SimCSE, without RTD.

The paper does not give the loss. As additional negatives: supervised SimCSE's hard-negative
InfoNCE (Gao et al., 2021, section 4; the authors' code supports it as a third sentence with
weight 0), each anchor against every sentence's dropout view and every sentence's edit. As
additional positives: the mean of two InfoNCE terms, the dropout view and the edit each the
anchor's positive against the in-batch sentences of the same kind.
"""

from __future__ import annotations

import dataclasses

from cselab.models.heads import HEADS, make_head
from cselab.training.methods import RATIO, MethodConfig, Output, dropout_views, option
from cselab.training.methods.diffcse import AUGMENTS, Editor, load_generator

USES = ("positive", "negative")


class SimCSEEdits(MethodConfig):
    """SimCSE with each sentence's edit as an extra positive or negative (DiffCSE Table 15).

    Options: ``use`` (``positive`` | ``negative``), ``augment`` (``replace``, ``insert`` or
    ``delete``), ``mask_ratio`` (MLM replacement, 0.15) and ``edit_ratio`` (insertion / deletion,
    0.15), ``generator`` / ``generator_stage`` (the frozen masked LM that fills masks, as RTD's),
    ``head`` (SimCSE's ``mlp``).
    """

    name = "simcse_edits"
    training_keys = ("temperature",)

    @classmethod
    def footprint(cls, options, layers):
        from cselab.training.memory import Footprint

        return Footprint(layers=3 * layers)  # two dropout views and the edit

    @dataclasses.dataclass
    class Options:
        use: str = option("negative", enum=list(USES))
        augment: str = option("replace", enum=list(AUGMENTS[:3]))
        mask_ratio: float = option(0.15, **RATIO)
        edit_ratio: float = option(0.15, **RATIO)
        generator: str | None = None
        generator_stage: str = "infocse-pretrain"
        head: str = option("mlp", enum=list(HEADS))

    @classmethod
    def requires(cls, options):
        return {} if options.generator else {"generator": options.generator_stage}

    def __init__(self, ctx):
        super().__init__(ctx)
        o = self.options
        self.head = make_head(o.head, ctx.hidden_size, ctx.encoder.initializer_range)
        self.generator = self.freeze("generator", load_generator(ctx, o.generator), train_mode=True)
        self.editor = Editor(self.generator, ctx.tokenizer, o.mask_ratio, o.augment, o.edit_ratio)
        self.temperature = ctx.training.temperature

    def prepare(self, batch):
        from cselab.training import mlm

        edited, attn, _ = self.editor(*mlm.natural(batch, "input_ids", "attention_mask"))
        # a replacement keeps every length; an insertion or deletion changes it (its rows were
        # rebuilt on the host anyway)
        lengths = batch.get("lengths") if self.options.augment == "replace" else attn.sum(1).cpu()
        return {**batch, "edit_input_ids": edited, "edit_attention_mask": attn, "edit_lengths": lengths}

    def forward(self, batch, shared):
        import torch

        from cselab.training.losses import info_nce, info_nce_hard_negatives

        u, v = dropout_views(self.ctx, self.head, batch, shared)
        e = self.head(self.ctx.encode(batch["edit_input_ids"], batch["edit_attention_mask"], batch.get("edit_lengths")))
        if self.options.use == "negative":
            loss = info_nce_hard_negatives(u, torch.stack([v, e], dim=1), self.temperature)
        else:
            loss = (info_nce(u, v, self.temperature) + info_nce(u, e, self.temperature)) / 2
        return Output({"contrastive": loss})

