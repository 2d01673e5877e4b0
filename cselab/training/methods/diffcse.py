"""DiffCSE (Chuang et al., 2022): conditional replaced-token detection (RTD) as an auxiliary
objective beside SimCSE's contrastive loss, so the sentence embedding is aware of (equivariant
to) MLM edits of its sentence.

A frozen masked LM, the *generator*, fills the masked positions of each view (argmax over the
vocabulary, at every position as the authors' code does; position 0 stays [CLS]). A second
copy of the PLM, the *discriminator* (trained), reads the edited sentence with its position-0
input embedding (after the embedding LayerNorm and dropout) replaced by the view's sentence
embedding from the training head, and a ``Linear(H, 2)`` tags every token replaced or
original (a token the generator restored is original). The cross-entropy averages over every
position of the batch, padding included, as the code does. The gradient reaches the encoder
through the sentence embedding only. On an unmodified transformers model the position-0
replacement is a forward hook on the discriminator's embedding module (ELECTRA's generator /
discriminator split, Clark et al., 2020, conditioned on the sentence vector).

``augment`` picks the edit (DiffCSE Table 4): ``replace`` (MLM replacement, the method),
``insert`` ([MASK] tokens inserted at random positions, 15% of the length, filled by the
generator; label: inserted), ``delete`` (15% of the tokens deleted; label: the token before
it was deleted), ``all`` (each sentence gets one of the three at random).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from cselab.training import mlm
from cselab.training.losses import fp32
from cselab.training.methods import Method, Output, primary_views

AUGMENTS = ("replace", "insert", "delete", "all")


class RTD(Method):
    """Conditional replaced-token detection (DiffCSE's auxiliary objective, weight lambda).

    Options: ``mask_ratio`` (0.30 BERT, 0.20 RoBERTa); ``generator`` (a masked LM's hub id or
    path, the paper's ``distilbert-base-uncased`` / ``distilroberta-base``) or, when null,
    ``generator_stage`` (a ``pretraining:`` entry whose export is a masked LM: for MiniLM, which
    has no MLM head); ``augment`` (:data:`AUGMENTS`); ``edit_ratio`` (insert/delete, 0.15);
    ``views`` (how many views of the batch the primary encodes).
    """

    name = "rtd"
    roles = ("auxiliary",)
    training_keys = ()  # reads the primary's views

    @dataclasses.dataclass
    class Options:
        mask_ratio: float = 0.30
        generator: str | None = None
        generator_stage: str = "infocse-pretrain"
        augment: str = "replace"
        edit_ratio: float = 0.15
        views: int = 2

    @classmethod
    def validate_options(cls, o):
        for key in ("mask_ratio", "edit_ratio"):
            value = getattr(o, key)
            if not isinstance(value, (int, float)) or not 0 < value < 1:
                return key, f"must be in (0, 1), got {value!r}"
        if o.augment not in AUGMENTS:
            return "augment", f"{o.augment!r} is not one of {list(AUGMENTS)}"
        if not isinstance(o.views, int) or o.views < 1:
            return "views", f"must be a positive integer, got {o.views!r}"
        return None

    @classmethod
    def requires(cls, options):
        return {} if options.generator else {"generator": options.generator_stage}

    def __init__(self, ctx):
        super().__init__(ctx)
        from transformers import AutoModel

        from cselab.training.models import resolve_model

        o = self.options
        source = resolve_model(o.generator) if o.generator else ctx.artifacts["generator"]
        generator = mlm.load_masked_lm(source)
        if generator_vocab(generator) != len(ctx.tokenizer):
            from cselab.errors import ConfigError

            raise ConfigError(f"config key 'options.generator': {o.generator or source} has a vocabulary of "
                              f"{generator_vocab(generator)}, the PLM's tokenizer {len(ctx.tokenizer)}: "
                              f"they must share it")
        self.generator = self.freeze("generator", generator, train_mode=True)  # dropout on, as the code
        self.discriminator = AutoModel.from_pretrained(ctx.model_dir, config=ctx.encoder.backbone.config)
        self.discriminator.embeddings.register_forward_hook(self._condition)
        self.rtd_head = nn.Linear(ctx.hidden_size, 2)
        self._cls_input: torch.Tensor | None = None

    def _condition(self, module, inputs, output):
        """Position 0 of the discriminator's embedding output becomes the sentence embedding."""
        if self._cls_input is None:
            return output
        return torch.cat([self._cls_input[:, None, :].to(output.dtype), output[:, 1:]], dim=1)

    # -- edits -----------------------------------------------------------------------------

    def prepare(self, batch):
        views = self.options.views
        # the batch's natural width: the draws, the generator and the RTD mean (over every position
        # of the natural padding, as the code) do not see padding added by pad_to_multiple_of / compile
        ids, attn = (x.repeat(views, 1) for x in mlm.natural(batch, "input_ids", "attention_mask"))
        masked, _ = mlm.mask_tokens(ids, attn, self.options.mask_ratio, self.ctx.tokenizer)
        with torch.no_grad():
            filled = self.generator(masked, attn).argmax(-1)
        filled[:, 0] = ids[:, 0]
        edited = filled * attn + ids * (1 - attn)  # padding stays padding
        labels = ((edited != ids) & attn.bool()).long()
        if self.options.augment != "replace":  # the default path stays free of host syncs
            kinds = self._kinds(ids.size(0), ids.device)
            edited, attn, labels = self._insert_delete(ids, attn, edited, labels, kinds)
        return {**batch, "rtd_input_ids": edited, "rtd_attention_mask": attn, "rtd_labels": labels}

    def _kinds(self, n: int, device) -> torch.Tensor:
        """0 replace, 1 insert, 2 delete per row."""
        aug = self.options.augment
        if aug == "all":
            return torch.randint(3, (n,)).to(device)
        return torch.full((n,), AUGMENTS.index(aug), device=device)

    def _insert_delete(self, ids, attn, replaced, replaced_labels, kinds):
        """Rows of kind insert / delete are rebuilt token by token (a small Python loop over the
        rows that need it; the replace rows keep the vectorised result)."""
        tok = self.ctx.tokenizer
        rows, labels = [], []
        for r in range(ids.size(0)):
            length = int(attn[r].sum())
            seq = ids[r, :length].tolist()
            body = list(range(1, length - 1))  # between [CLS] and [SEP]
            k = max(1, round(self.options.edit_ratio * len(body))) if body else 0
            if kinds[r] == 1 and body:
                slots = sorted(torch.randint(1, length, (k,)).tolist(), reverse=True)
                lab = [0] * length
                for s in slots:
                    seq.insert(s, tok.mask_token_id)
                    lab.insert(s, 1)
                rows.append(seq)
                labels.append(lab)
            elif kinds[r] == 2 and len(body) > 1:
                drop = set(torch.randperm(len(body))[:min(k, len(body) - 1)].add(1).tolist())
                kept, lab, dropped_before = [], [], False
                for i, t in enumerate(seq):
                    if i in drop:
                        dropped_before = True
                        continue
                    kept.append(t)
                    lab.append(int(dropped_before))
                    dropped_before = False
                rows.append(kept)
                labels.append(lab)
            else:
                rows.append(replaced[r, :length].tolist())
                labels.append(replaced_labels[r, :length].tolist())
        width = max(len(x) for x in rows)
        pad = tok.pad_token_id
        edited = torch.full((len(rows), width), pad, dtype=ids.dtype)
        new_attn = torch.zeros((len(rows), width), dtype=attn.dtype)
        new_labels = torch.zeros((len(rows), width), dtype=torch.long)
        for r, (x, lab) in enumerate(zip(rows, labels)):
            edited[r, :len(x)] = torch.tensor(x)
            new_attn[r, :len(x)] = 1
            new_labels[r, :len(lab)] = torch.tensor(lab)
        edited, new_attn, new_labels = edited.to(ids.device), new_attn.to(ids.device), new_labels.to(ids.device)
        inserted = (kinds == 1)[:, None] & (edited == tok.mask_token_id)
        if inserted.any():  # the generator turns the inserted [MASK]s into real tokens
            with torch.no_grad():
                filled = self.generator(edited, new_attn).argmax(-1)
            edited = torch.where(inserted, filled, edited)
        return edited, new_attn, new_labels

    # -- loss ------------------------------------------------------------------------------

    def forward(self, batch, shared):
        ids = batch["rtd_input_ids"]
        h = primary_views(shared, "projected", ids.size(0), self.name, "projected sentence embeddings",
                          self.options.views)
        self._cls_input = h
        try:
            hidden = self.discriminator(input_ids=ids, attention_mask=batch["rtd_attention_mask"]).last_hidden_state
        finally:
            self._cls_input = None
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


def generator_vocab(generator: mlm.MaskedLM) -> int:
    config = generator.backbone.config
    return getattr(config, "vocab_size", None) or config.get_text_config().vocab_size
