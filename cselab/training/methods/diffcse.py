"""DiffCSE (Chuang et al., 2022): conditional replaced-token detection (RTD) as an auxiliary
objective beside SimCSE's contrastive loss, so the sentence embedding is aware of (equivariant
to) MLM edits of its sentence, and the conditional objectives its Table 3 compares with it.

A frozen masked LM, the *generator*, fills the masked positions of each view (argmax over the
vocabulary, at every position as the authors' code does; position 0 stays [CLS]). A second
copy of the PLM, the *discriminator* (trained), reads the edited sentence with its position-0
input embedding (after the embedding LayerNorm and dropout) replaced by the view's sentence
embedding from the training head, and a ``Linear(H, 2)`` tags every token replaced or
original (a token the generator restored is original). The cross-entropy averages over every
position of the batch's natural padding, as the code does (padding a caller adds beyond it,
``training.pad_to_multiple_of``, is never seen). The gradient reaches the encoder through the
sentence embedding only. On an unmodified transformers model the position-0 replacement is a
forward hook on the discriminator's embedding module (ELECTRA's generator / discriminator
split, Clark et al., 2020, conditioned on the sentence vector).

``augment`` picks the edit (DiffCSE Table 4): ``replace`` (MLM replacement, the method),
``insert`` ([MASK] tokens inserted at random positions, 15% of the length, filled by the
generator; label: inserted), ``delete`` (15% of the tokens deleted; label: the token before
it was deleted), ``all`` (each sentence gets one of the three at random).

The Table 3 variants replace RTD's binary head, conditioned the same way: ``cmlm`` (the
conditional MLM of Yang et al., 2020, on the same sentence: predict its masked tokens) and
``corrective_lm`` (COCO-LM's corrective language modelling, Meng et al., 2021: recover the
original token at every position of the edited sentence with a copy mechanism).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from cselab.errors import ConfigError
from cselab.training.methods import POSITIVE, RATIO, MethodConfig, Output, option, primary_views

if TYPE_CHECKING:
    import torch
    from torch import nn

    from cselab.training import mlm

AUGMENTS = ("replace", "insert", "delete", "all")


@dataclasses.dataclass
class EditOptions:
    """Options of the objectives that edit with a generator."""

    mask_ratio: float = option(0.30, **RATIO)
    generator: str | None = None
    generator_stage: str = "infocse-pretrain"
    augment: str = option("replace", enum=list(AUGMENTS))
    edit_ratio: float = option(0.15, **RATIO)
    views: int = option(2, **POSITIVE)


def load_generator(ctx, generator: str | None) -> mlm.MaskedLM:
    """The frozen generator: a masked LM's hub id or path, else the declared stage export; it must
    share the PLM's vocabulary."""
    from cselab.models.checkpoints import resolve_model
    from cselab.training import mlm

    source = resolve_model(generator) if generator else ctx.artifacts["generator"]
    model = mlm.load_masked_lm(source)
    if generator_vocab(model) != len(ctx.tokenizer):
        raise ConfigError(f"config key 'options.generator': {generator or source} has a vocabulary of "
                          f"{generator_vocab(model)}, the PLM's tokenizer {len(ctx.tokenizer)}: they must share it")
    return model


def generator_vocab(generator: mlm.MaskedLM) -> int:
    config = generator.backbone.config
    return getattr(config, "vocab_size", None) or config.get_text_config().vocab_size


class Editor:
    """DiffCSE's edits of a batch (Tables 4 and 15): MLM replacement by the generator, random
    insertion, random deletion, or one of the three per sentence; returns the edited ids, their
    attention mask and the per-token labels (1: replaced / inserted / preceded by a deletion)."""

    def __init__(self, generator: nn.Module, tokenizer, mask_ratio: float, augment: str, edit_ratio: float):
        self.generator, self.tokenizer = generator, tokenizer
        self.mask_ratio, self.augment, self.edit_ratio = mask_ratio, augment, edit_ratio

    def __call__(self, ids: torch.Tensor, attn: torch.Tensor):
        import torch

        from cselab.training import mlm

        masked, _ = mlm.mask_tokens(ids, attn, self.mask_ratio, self.tokenizer)
        with torch.no_grad():
            filled = self.generator(masked, attn).argmax(-1)
        filled[:, 0] = ids[:, 0]
        edited = filled * attn + ids * (1 - attn)  # padding stays padding
        labels = ((edited != ids) & attn.bool()).long()
        if self.augment != "replace":  # the default path stays free of host syncs
            kinds = self._kinds(ids.size(0), ids.device)
            edited, attn, labels = self._insert_delete(ids, attn, edited, labels, kinds)
        return edited, attn, labels

    def _kinds(self, n: int, device) -> torch.Tensor:
        """0 replace, 1 insert, 2 delete per row."""
        import torch

        if self.augment == "all":
            return torch.randint(3, (n,)).to(device)
        return torch.full((n,), AUGMENTS.index(self.augment), device=device)

    def _edit_row(self, seq: list[int], kind: int) -> tuple[list[int], list[int]] | None:
        """One sentence inserted into or deleted from (None: keep its replacement)."""
        import torch

        length = len(seq)
        body = list(range(1, length - 1))  # between [CLS] and [SEP]
        k = max(1, round(self.edit_ratio * len(body))) if body else 0
        if kind == 1 and body:
            seq, lab = list(seq), [0] * length
            for s in sorted(torch.randint(1, length, (k,)).tolist(), reverse=True):
                seq.insert(s, self.tokenizer.mask_token_id)
                lab.insert(s, 1)
            return seq, lab
        if kind == 2 and len(body) > 1:
            drop = set(torch.randperm(len(body))[:min(k, len(body) - 1)].add(1).tolist())
            kept, lab, dropped_before = [], [], False
            for i, t in enumerate(seq):
                if i in drop:
                    dropped_before = True
                    continue
                kept.append(t)
                lab.append(int(dropped_before))
                dropped_before = False
            return kept, lab
        return None

    def _insert_delete(self, ids, attn, replaced, replaced_labels, kinds):
        """Rows of kind insert / delete are rebuilt token by token (a small Python loop over the
        rows that need it; the replace rows keep the vectorised result)."""
        import torch

        rows, labels = [], []
        for r in range(ids.size(0)):
            length = int(attn[r].sum())
            edit = self._edit_row(ids[r, :length].tolist(), int(kinds[r]))
            rows.append(edit[0] if edit else replaced[r, :length].tolist())
            labels.append(edit[1] if edit else replaced_labels[r, :length].tolist())
        width = max(len(x) for x in rows)
        edited = torch.full((len(rows), width), self.tokenizer.pad_token_id, dtype=ids.dtype)
        new_attn = torch.zeros((len(rows), width), dtype=attn.dtype)
        new_labels = torch.zeros((len(rows), width), dtype=torch.long)
        for r, (x, lab) in enumerate(zip(rows, labels)):
            edited[r, :len(x)] = torch.tensor(x)
            new_attn[r, :len(x)] = 1
            new_labels[r, :len(lab)] = torch.tensor(lab)
        edited, new_attn, new_labels = edited.to(ids.device), new_attn.to(ids.device), new_labels.to(ids.device)
        inserted = (kinds == 1)[:, None] & (edited == self.tokenizer.mask_token_id)
        if inserted.any():  # the generator turns the inserted [MASK]s into real tokens
            with torch.no_grad():
                filled = self.generator(edited, new_attn).argmax(-1)
            edited = torch.where(inserted, filled, edited)
        return edited, new_attn, new_labels


class Conditioned(MethodConfig):
    """Base of the objectives that read a sentence through a second copy of the PLM whose
    position-0 input is the view's sentence embedding (``projected`` from the primary): the copy
    is :attr:`discriminator`; :meth:`encode` runs it conditioned on ``h``."""

    roles = ("auxiliary",)
    encodes = False  # reads the primary's views
    #: vocabulary-wide logits a view's token (an MLM head's: the conditional MLM, the corrective LM)
    vocab_heads = 0

    @classmethod
    def footprint(cls, options, layers):
        from cselab.training.memory import Footprint

        views = options.views  # the discriminator (a trained copy of the PLM) over each view
        return Footprint(layers=views * layers, vocab=views * cls.vocab_heads, parameters=1.0)

    def __init__(self, ctx):
        super().__init__(ctx)
        from transformers import AutoModel

        self.discriminator = AutoModel.from_pretrained(ctx.model_dir, config=ctx.encoder.backbone.config)
        self.discriminator.embeddings.register_forward_hook(self._condition)
        self._cls_input: torch.Tensor | None = None

    def _condition(self, module, inputs, output):
        """Position 0 of the discriminator's embedding output becomes the sentence embedding."""
        import torch

        if self._cls_input is None:
            return output
        return torch.cat([self._cls_input[:, None, :].to(output.dtype), output[:, 1:]], dim=1)

    def encode(self, ids: torch.Tensor, attention_mask: torch.Tensor, shared: dict) -> torch.Tensor:
        """The last hidden states of ``ids`` conditioned on the primary's projected views (a run:
        :meth:`Context.run`)."""
        h = primary_views(shared, "projected", ids.size(0), self.name, "projected sentence embeddings",
                          self.options.views)
        return self.ctx.run(self.discriminate, ids, attention_mask, h)

    def discriminate(self, ids: torch.Tensor, attention_mask: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """The discriminator's last hidden states with ``h`` as its position-0 input."""
        from cselab.models.masks import model_mask

        self._cls_input = h
        try:
            return self.discriminator(input_ids=ids, attention_mask=model_mask(attention_mask)).last_hidden_state
        finally:
            self._cls_input = None

    def views_at_natural_width(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's ids and mask once per view, at the batch's natural width (the draws, the
        generator and the losses never see padding added by pad_to_multiple_of / compile)."""
        from cselab.training import mlm

        views = self.options.views
        return tuple(x.repeat(views, 1) for x in mlm.natural(batch, "input_ids", "attention_mask"))


class Editing(Conditioned):
    """Base of the objectives that read generator edits (:class:`Editor`) of each view."""

    Options = EditOptions

    @classmethod
    def requires(cls, options):
        return {} if options.generator else {"generator": options.generator_stage}

    def __init__(self, ctx):
        super().__init__(ctx)
        o = self.options
        self.generator = self.freeze("generator", load_generator(ctx, o.generator), train_mode=True)  # dropout on
        self.editor = Editor(self.generator, ctx.tokenizer, o.mask_ratio, o.augment, o.edit_ratio)


class RTD(Editing):
    """Conditional replaced-token detection (DiffCSE's auxiliary objective, weight lambda).

    Options: ``mask_ratio`` (0.30 BERT, 0.20 RoBERTa); ``generator`` (a masked LM's hub id or
    path, the paper's ``distilbert-base-uncased`` / ``distilroberta-base``) or, when null,
    ``generator_stage`` (a ``pretraining:`` entry whose export is a masked LM: for MiniLM, which
    has no MLM head); ``augment`` (:data:`AUGMENTS`); ``edit_ratio`` (insert/delete, 0.15);
    ``views`` (how many views of the batch the primary encodes). The generator keeps dropout on,
    as the authors' code.
    """

    name = "rtd"

    def __init__(self, ctx):
        from torch import nn

        super().__init__(ctx)
        self.rtd_head = nn.Linear(ctx.hidden_size, 2)

    def prepare(self, batch):
        edited, attn, labels = self.editor(*self.views_at_natural_width(batch))
        return {**batch, "rtd_input_ids": edited, "rtd_attention_mask": attn, "rtd_labels": labels}

    def forward(self, batch, shared):
        import torch
        import torch.nn.functional as F

        from cselab.training.losses import fp32

        hidden = self.encode(batch["rtd_input_ids"], batch["rtd_attention_mask"], shared)
        logits = self.rtd_head(hidden)
        labels = batch["rtd_labels"]
        with fp32(hidden.device):
            loss = F.cross_entropy(logits.float().reshape(-1, 2), labels.reshape(-1))  # every position, as the code
        real = batch["rtd_attention_mask"].bool()
        with torch.no_grad():
            correct = (logits.argmax(-1) == labels) & real
            scalars = {"rtd_acc": correct.sum() / real.sum(),
                       "replaced_share": (labels.bool() & real).sum() / real.sum()}
        return Output({"rtd": loss}, scalars)


class ConditionalMLM(Conditioned):
    """DiffCSE Table 3's conditional MLM on the same sentence (Yang et al., 2020's CMLM with the
    sentence itself as context): the discriminator reads the view's masked sentence (BERT's
    80/10/10 at ``mask_ratio``) with the sentence embedding at position 0, and an MLM head (the
    PLM's own when its checkpoint has one) predicts the masked tokens. Loss: the cross-entropy over
    the masked positions. Options: ``mask_ratio`` (0.30, DiffCSE's; the paper does not state the
    variant's), ``views``."""

    name = "cmlm"
    vocab_heads = 1

    @dataclasses.dataclass
    class Options:
        mask_ratio: float = option(0.30, **RATIO)
        views: int = option(2, **POSITIVE)

    def __init__(self, ctx):
        from cselab.training import mlm

        super().__init__(ctx)
        self.mlm_head = mlm.make_mlm_head(self.discriminator.config, ctx.model_dir)

    def prepare(self, batch):
        from cselab.training import mlm

        ids, attn = self.views_at_natural_width(batch)
        masked, labels = mlm.mask_tokens(ids, attn, self.options.mask_ratio, self.ctx.tokenizer)
        return {**batch, "cmlm_input_ids": masked, "cmlm_attention_mask": attn, "cmlm_labels": labels}

    def forward(self, batch, shared):
        from cselab.training import mlm

        hidden = self.encode(batch["cmlm_input_ids"], batch["cmlm_attention_mask"], shared)
        return Output({"cmlm": mlm.mlm_loss(self.mlm_head, hidden, batch["cmlm_labels"])})


class CorrectiveLM(Editing):
    """DiffCSE Table 3's conditional corrective LM (COCO-LM, Meng et al., 2021): the discriminator
    reads the generator-edited sentence conditioned on the sentence embedding and recovers the
    original token at every real position with a copy mechanism: ``p(x) = p_copy 1[x = input] +
    (1 - p_copy) softmax(W h)[x]``. Loss (COCO-LM's): the copy head's binary cross-entropy
    (original or replaced) plus ``-log p(original)`` with the copy probability detached, averaged
    over the real positions after [CLS]. Options as :class:`RTD`'s (MLM replacement only; the
    paper states no mask ratio or lambda for the variant)."""

    name = "corrective_lm"
    vocab_heads = 1

    @classmethod
    def validate_options(cls, o):
        if o.augment != "replace":
            return "augment", "the corrective LM recovers replaced tokens: only 'replace'"
        return None

    def __init__(self, ctx):
        from torch import nn

        from cselab.training import mlm

        super().__init__(ctx)
        self.lm_head = mlm.make_mlm_head(self.discriminator.config, ctx.model_dir)
        self.copy_head = nn.Linear(ctx.hidden_size, 1)

    def prepare(self, batch):
        ids, attn = self.views_at_natural_width(batch)
        edited, attn, _ = self.editor(ids, attn)
        return {**batch, "clm_input_ids": edited, "clm_attention_mask": attn, "clm_targets": ids}

    def forward(self, batch, shared):
        from cselab.models.masks import sync_free

        edited, targets = batch["clm_input_ids"], batch["clm_targets"]
        hidden = self.encode(edited, batch["clm_attention_mask"], shared)
        where = batch["clm_attention_mask"].bool()
        where[:, 0] = False  # position 0 is the sentence embedding itself
        if sync_free(hidden.device):  # every position, padding weighted out: no boolean index, no host wait
            return self.losses(hidden, edited == targets, targets, where.float())
        return self.losses(hidden[where], (edited == targets)[where], targets[where], None)

    def losses(self, h, kept, targets, weight):
        """The copy and LM losses over the rows of ``h`` (each position weighted by ``weight`` if given)."""
        import torch
        import torch.nn.functional as F

        from cselab.training.losses import fp32

        def mean(x):
            return x.mean() if weight is None else (x * weight).sum() / weight.sum()

        kept = kept.float()
        with fp32(h.device):
            copy_logit = self.copy_head(h).float().squeeze(-1)
            copy_loss = mean(F.binary_cross_entropy_with_logits(copy_logit, kept, reduction="none"))
            p_copy = torch.sigmoid(copy_logit).detach()
            p_vocab = F.softmax(self.lm_head(h).float(), -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
            lm_loss = mean(-torch.log(p_copy * kept + (1 - p_copy) * p_vocab + 1e-12))
        return Output({"clm": lm_loss + copy_loss}, {"clm_copy_loss": copy_loss.detach()})
