"""InfoCSE (Wu et al., 2022): an auxiliary MLM network that must reconstruct masked tokens from
the sentence's [CLS] vector, so [CLS] aggregates the sentence's information.

The auxiliary network is the backbone's lower layers (BERT-base and BERT-large: 6, the authors'
``--skip_from 6``), then 2 extra transformer layers and an MLM head. Its input is
``[h ; M^{>0}]``: a top-layer [CLS] vector ``h`` at position 0, then the lower layers' hidden
states of the masked sentence at every other position (Condenser's head over a lower layer's
states, Gao and Callan, 2021).

Two methods, two stages:

- ``infocse_pretrain`` (stage 1, a ``pretraining:`` entry built by ``rule pretrain``): the
  lower layers are shared with the backbone, and "two MLM objectives [are optimised]
  simultaneously using the same input" (section 3.1): one masked input, one backbone forward;
  ``h`` is that forward's top-layer [CLS] and ``M^{>0}`` its lower layers' states (Condenser
  does the same). ``L_aux + mlm_weight * L_mlm`` (both masked-token cross-entropies; ``L_mlm``
  is BERT's own MLM on the top layer, its decoder tied to the input embeddings). Condenser's
  whole-word masking. Exports the backbone, the extra layers and the MLM head.
- ``infocse_mlm`` (stage 2, an auxiliary objective beside SimCSE's contrastive loss, weight
  lambda = 1e-5): the encoder starts from stage 1's backbone; the auxiliary network "no longer
  shares the lower six layers with BERT" (section 3.2): it has its own copy of them (from stage
  1), frozen, whose output carries no gradient (``detach``), so the MLM gradient reaches the
  encoder only through ``h``, the contrastive view's [CLS]; the extra layers and the head (an
  untied copy of stage 1's) train with it. Both dropout views are masked independently and each
  reconstructs from its own ``h``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
from typing import TYPE_CHECKING

from cselab.errors import ConfigError, ModelError
from cselab.training.methods import POSITIVE, RATIO, MethodConfig, Output, TorchModule, option, primary_views

if TYPE_CHECKING:
    import torch

ARTIFACT = "aux_network"      # the role under which InfoCSE's stage 2 receives stage 1's export
AUX_FILE, AUX_CONFIG = "infocse_aux.pt", "infocse_aux.json"


def _lower(ctx, lower_layers: int | None) -> int:
    from cselab.training import mlm

    n = len(mlm.layers(ctx.encoder.backbone))
    k = lower_layers or n // 2
    if k >= n:
        raise ConfigError(f"config key 'options.lower_layers': {k} is not below the backbone's {n} layers")
    return k


class AuxNetwork(TorchModule):
    """The extra layers and the MLM head over ``[h ; lower states]``."""

    def __init__(self, backbone, extra_layers: int, model_dir=None, from_top: bool = False):
        from cselab.training import mlm

        super().__init__()
        if from_top:  # copies of the backbone's upper layers (InfoCSE Table 4 "w/o pre-training")
            self.extra = copy.deepcopy(mlm.layers(backbone)[-extra_layers:])
        else:         # new layers with BERT's init (Condenser's head, pretrained in stage 1)
            self.extra = mlm.new_layers(backbone, extra_layers)
        self.head = mlm.make_mlm_head(backbone.config, model_dir)

    def hidden(self, h: torch.Tensor, lower: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The extra layers' output over ``[h ; lower states after position 0]``."""
        import torch

        from cselab.training import mlm

        hidden = torch.cat([h[:, None, :].to(lower.dtype), lower[:, 1:]], dim=1)
        return mlm.run_layers(self.extra, hidden, attention_mask)


class InfoCSEPretrain(MethodConfig):
    """Stage 1: pretrain the auxiliary network together with the backbone (a pretraining stage).

    One masked input and one backbone forward per step: BERT's MLM reads the top layer; the
    auxiliary network reads ``[h ; M^{>0}]`` of the same forward (``h`` its top-layer [CLS],
    ``M`` its ``lower_layers``-th layer's states).

    Options: ``mask_ratio`` (0.15, Condenser's), ``whole_word`` (true: whole-word masking, as
    Condenser's collator; false: BERT's per-token masking), ``lower_layers`` (null: half the
    backbone's layers; the paper configs set 6, the authors' ``--skip_from 6`` for base and
    large), ``extra_layers`` (2), ``mlm_weight`` (1.0: the paper's ``L_aux + L_mlm``).
    """

    name = "infocse_pretrain"
    aliases = {"mask_rate": "mask_ratio"}  # the name before DiffCSE's and InfoCSE's were one
    encodes = False  # the backbone's own forward only
    per_sentence = True  # two MLM losses, each a mean over the batch's masked tokens: no in-batch term

    @classmethod
    def footprint(cls, options, layers):
        from cselab.training.memory import Footprint

        extra = options.extra_layers
        return Footprint(layers=layers + extra, vocab=2, parameters=extra / layers)  # one masked view, two MLM heads

    def loss_units(self, batch):
        from cselab.training import mlm

        return (batch["mlm_labels"] != mlm.IGNORE).sum()  # both terms average over the masked tokens

    @dataclasses.dataclass
    class Options:
        mask_ratio: float = option(0.15, **RATIO)
        whole_word: bool = True
        lower_layers: int | None = option(None, **POSITIVE)  # null: half the backbone
        extra_layers: int = option(2, **POSITIVE)
        mlm_weight: float = option(1.0, minimum=0)

    def __init__(self, ctx):
        from cselab.training import mlm

        super().__init__(ctx)
        backbone = ctx.encoder.backbone
        self.k = _lower(ctx, self.options.lower_layers)
        self.aux = AuxNetwork(backbone, self.options.extra_layers, ctx.model_dir)
        self.mlm_head = self.aux.head  # BERT's MLM on the top layer shares the head ...
        self.aux.head.decoder.weight = backbone.embeddings.word_embeddings.weight  # ... tied to the embeddings
        self.word_starts = mlm.word_start_table(ctx.tokenizer) if self.options.whole_word else None

    def param_groups(self, lr):
        shared = {id(p) for p in self.ctx.encoder.parameters()}
        own = [p for p in self.parameters() if p.requires_grad and id(p) not in shared]
        return [{"params": own, "lr": lr}]

    def prepare(self, batch):
        from cselab.training import mlm

        ids, mask = mlm.natural(batch, "input_ids", "attention_mask")  # extra padding changes nothing
        ids, labels = mlm.mask_tokens(ids, mask, self.options.mask_ratio, self.ctx.tokenizer,
                                      word_starts=self.word_starts)
        return {**batch, "mlm_input_ids": ids, "mlm_attention_mask": mask, "mlm_labels": labels}

    def forward(self, batch, shared):
        from cselab.training import mlm

        mask, labels = batch["mlm_attention_mask"], batch["mlm_labels"]
        top, aux = self.ctx.run(self.masked_forward, batch["mlm_input_ids"], mask)
        terms = {"aux": mlm.mlm_loss(self.aux.head, aux, labels),
                 "mlm": self.options.mlm_weight * mlm.mlm_loss(self.mlm_head, top, labels)}
        return Output(terms, {"masked_share": (labels != mlm.IGNORE).float().sum() / mask.sum()})

    def masked_forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The backbone's top layer and the auxiliary network's output over ``[h ; M^{>0}]``, ``h``
        the masked forward's top-layer [CLS] (the paper's 12-cls) and ``M`` its lower layer."""
        from cselab.models.masks import model_mask

        out = self.ctx.encoder.backbone(input_ids=ids, attention_mask=model_mask(mask), output_hidden_states=True)
        return out.last_hidden_state, self.aux.hidden(out.last_hidden_state[:, 0], out.hidden_states[self.k], mask)

    def export(self, out_dir):
        import torch

        from cselab.training import mlm

        self.ctx.encoder.save(out_dir)
        state = {k: v for k, v in self.aux.state_dict().items() if k != "head.decoder.weight"}
        state["head.decoder.weight"] = self.aux.head.decoder.weight.detach().clone()  # stored untied
        torch.save(state, out_dir / AUX_FILE)
        # the backbone + this head are a masked LM of their own (DiffCSE's generator for a PLM without one)
        torch.save({k[len("head."):]: v for k, v in state.items() if k.startswith("head.")}, out_dir / mlm.HEAD_FILE)
        (out_dir / AUX_CONFIG).write_text(json.dumps({"lower_layers": self.k, "extra_layers": self.options.extra_layers,
                                                      "mask_ratio": self.options.mask_ratio}))


class InfoCSEMLM(MethodConfig):
    """Stage 2: InfoCSE's auxiliary objective ``L_aux``, to be weighted by lambda beside a primary
    contrastive method (``methods.infocse`` in the config: SimCSE with the BatchNorm projector
    plus this at weight 1e-5).

    Options: ``mask_ratio`` (0.4, the paper's best for BERT-base; the authors' BERT-large script:
    0.3), ``detach`` (true: the auxiliary network's own lower layers are frozen and their output
    detached; false: that copy trains with the MLM gradient, InfoCSE Table 6 "w/o gradient
    detach"; the encoder's lower layers are not involved either way), ``lower_dropout`` (the
    frozen copy keeps dropout on: the authors' BERT-large script; the base script puts it in eval
    mode), ``pretrained`` (true: start the encoder and the auxiliary network from ``stage``, the
    stage-1 export; false: no stage 1, new extra layers and head: Table 4), ``stage`` (the
    ``pretraining:`` entry), ``lower_layers`` / ``extra_layers`` (without stage 1; with it they
    come from the export), ``extra_init`` (without stage 1: ``top``, copies of the backbone's
    upper layers as the paper's Table 4 does, or ``random``), ``views`` (how many views of the
    batch the primary encodes; each is masked and reconstructed).
    """

    name = "infocse_mlm"
    aliases = {"mask_rate": "mask_ratio"}  # the name before DiffCSE's and InfoCSE's were one
    roles = ("auxiliary",)
    encodes = False  # reads the primary's views

    @classmethod
    def footprint(cls, options, layers):
        from cselab.training.memory import Footprint

        lower = options.lower_layers or layers // 2
        trained = options.extra_layers + (0 if options.detach else lower)  # the frozen copy keeps no graph
        return Footprint(layers=options.views * trained, vocab=options.views, parameters=trained / layers)

    @dataclasses.dataclass
    class Options:
        mask_ratio: float = option(0.4, **RATIO)
        detach: bool = True
        lower_dropout: bool = False
        pretrained: bool = True
        stage: str = "infocse-pretrain"
        lower_layers: int | None = option(None, **POSITIVE)  # null: half the backbone
        extra_layers: int = option(2, **POSITIVE)
        extra_init: str = option("top", enum=["top", "random"])
        views: int = option(2, **POSITIVE)

    @classmethod
    def validate_options(cls, o):
        if o.lower_dropout and not o.detach:
            return "lower_dropout", "applies to the frozen copy (detach: true); without detach the copy trains"
        return None

    @classmethod
    def requires(cls, options):
        return {ARTIFACT: options.stage} if options.pretrained else {}

    def __init__(self, ctx):
        import torch

        from cselab.training import mlm

        super().__init__(ctx)
        o = self.options
        backbone = ctx.encoder.backbone
        if o.pretrained:
            stage_dir = ctx.artifacts[ARTIFACT]
            saved = json.loads((stage_dir / AUX_CONFIG).read_text())
            self.k = saved["lower_layers"]
            self._load_backbone(stage_dir)
            self.aux = AuxNetwork(backbone, saved["extra_layers"])
            self.aux.load_state_dict(torch.load(stage_dir / AUX_FILE, map_location="cpu", weights_only=True))
        else:
            self.k = _lower(ctx, o.lower_layers)
            self.aux = AuxNetwork(backbone, o.extra_layers, ctx.model_dir, from_top=o.extra_init == "top")
        lower = mlm.LowerLayers(backbone, self.k)  # the auxiliary network's own copy (stage 1's lower layers)
        if o.detach:
            self.lower = self.freeze("lower", lower, train_mode=o.lower_dropout)
        else:
            self.lower = lower  # a submodule: optimised and checkpointed with the method

    def _load_backbone(self, stage_dir):
        from transformers import AutoModel

        trained = AutoModel.from_pretrained(stage_dir)
        missing, unexpected = self.ctx.encoder.backbone.load_state_dict(trained.state_dict(), strict=False)
        if [k for k in missing if "pooler" not in k] or unexpected:
            raise ModelError(f"stage-1 export {stage_dir} does not match the PLM: missing {missing[:3]}, "
                             f"unexpected {unexpected[:3]}")

    def prepare(self, batch):
        from cselab.training import mlm

        views = self.options.views
        ids, mask = (x.repeat(views, 1) for x in mlm.natural(batch, "input_ids", "attention_mask"))
        ids, labels = mlm.mask_tokens(ids, mask, self.options.mask_ratio, self.ctx.tokenizer)
        return {**batch, "aux_input_ids": ids, "aux_attention_mask": mask, "aux_labels": labels}

    def forward(self, batch, shared):
        from cselab.training import mlm

        h = primary_views(shared, "pooled", batch["aux_input_ids"].size(0), self.name, "pooled [CLS]",
                          self.options.views)
        hidden = self.ctx.run(self.aux_forward, batch["aux_input_ids"], batch["aux_attention_mask"], h)
        return Output({"mlm": mlm.mlm_loss(self.aux.head, hidden, batch["aux_labels"])})

    def aux_forward(self, ids: torch.Tensor, mask: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """The auxiliary network over ``[h ; its own lower layers' states of the masked view]``."""
        import torch

        with torch.no_grad() if self.options.detach else contextlib.nullcontext():
            lower = self.lower(ids, mask)
        return self.aux.hidden(h, lower, mask)
