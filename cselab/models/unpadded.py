"""The encoder's forward over real tokens only: the same BERT/RoBERTa math as Hugging Face's,
without computing padding.

A batch of right-padded sentences ``[B, L]`` is packed into its ``T`` real tokens ``[T, H]``
(on wiki1m at max_len 32 about two thirds of the padded positions). Every per-token operation
(embeddings, the Q/K/V, output and feed-forward projections, LayerNorm, dropout) runs on
``[T, H]``; only the attention scores go back to the padded ``[B, heads, L, L]`` layout, where
padded keys are masked exactly as in Hugging Face's forward. With ``[CLS]`` pooling the last
layer computes its query, attention output and feed-forward for the first token of each
sentence only: the pooled vector does not depend on the other positions' last-layer states.

The weights are the Hugging Face modules' own (``backbone.encoder.layer[i]...``): nothing is
copied, the state dict and the saved model are unchanged, and the padded forward stays
available (``training.unpadded: false``). The outputs agree with Hugging Face's to float
rounding. With dropout keyed by row (:mod:`cselab.models.keyed`, the training loop's) the masks
are those of the padded forward, element for element; with torch's own stream they are drawn
over ``[T, H]`` instead of ``[B, L, H]`` (the same distribution, another stream), which is why
the choice is part of an experiment's spec.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from cselab.data.tokens import to_device
from cselab.models import keyed


def unsupported(backbone: nn.Module) -> str | None:
    """Why ``backbone`` cannot run unpadded (None when it can): BERT-style encoders (BERT,
    RoBERTa, MiniLM) with absolute positions and no decoder parts."""
    config = getattr(backbone, "config", None)
    if config is None or not hasattr(backbone, "embeddings") or not hasattr(backbone, "encoder"):
        return f"{type(backbone).__name__} is not a BERT-style encoder"
    layers = getattr(backbone.encoder, "layer", None)
    if layers is None or not all(hasattr(layer, "attention") and hasattr(layer.attention, "self")
                                 and hasattr(layer, "intermediate") for layer in layers):
        return f"{type(backbone).__name__} layers are not BERT layers"
    if getattr(config, "position_embedding_type", "absolute") != "absolute":
        return f"position_embedding_type {config.position_embedding_type!r} (only absolute positions)"
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        return "a decoder configuration"
    return None


class Packing:
    """Where the real tokens of a right-padded batch are: ``index`` into the flattened ``[B*L]``
    positions, each sentence's first row in the packed ``[T]`` order, the key mask.

    The number of real tokens is a shape, so it must reach the host: from ``lengths`` (each
    row's real length, a CPU tensor the batch builder already has) it is computed there and
    the index is copied to the device without waiting for it; without them it is read from
    the mask (``nonzero``: a device-to-host sync on CUDA, free on the CPU)."""

    def __init__(self, attention_mask: torch.Tensor, lengths: torch.Tensor | None = None):
        self.batch, self.length = attention_mask.shape
        device = attention_mask.device
        if lengths is None or lengths.device.type != "cpu":
            mask = attention_mask.bool()
            self.index = mask.reshape(-1).nonzero().squeeze(1)
            self.lengths = mask.sum(1)
            self.first = torch.cumsum(self.lengths, 0) - self.lengths
        else:
            lengths = lengths.long()
            first = torch.cumsum(lengths, 0) - lengths
            rows = torch.repeat_interleave(torch.arange(self.batch), lengths)
            index = rows * self.length + torch.arange(len(rows)) - torch.repeat_interleave(first, lengths)
            packed = to_device({"packed": torch.cat([index, first, lengths])}, device)["packed"]
            self.index, self.first, self.lengths = packed.split([len(index), self.batch, self.batch])
        self.keys = attention_mask.bool()[:, None, None, :]  # [B, 1, 1, L]: True where a key may be attended

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """``[T, D]`` -> ``[B, L, D]`` with zeros at padded positions."""
        out = x.new_zeros(self.batch * self.length, x.shape[-1]).index_copy(0, self.index, x)
        return out.view(self.batch, self.length, -1)

    def rows(self) -> torch.Tensor:
        """The sentence of every packed token ``[T]``."""
        return torch.div(self.index, self.length, rounding_mode="floor")

    def positions(self) -> torch.Tensor:
        """The position of every packed token in its sentence ``[T]``."""
        return self.index % self.length


def _embed(backbone: nn.Module, input_ids: torch.Tensor, packing: Packing) -> torch.Tensor:
    emb = backbone.embeddings
    if hasattr(emb, "create_position_ids_from_input_ids"):  # RoBERTa: positions count from padding_idx + 1
        positions = emb.create_position_ids_from_input_ids(input_ids, emb.padding_idx)
    else:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
    ids = input_ids.reshape(-1).index_select(0, packing.index)[None]
    positions = positions.reshape(-1).index_select(0, packing.index)[None]
    return emb(input_ids=ids, position_ids=positions, token_type_ids=torch.zeros_like(ids))[0]


def _layer(layer: nn.Module, x: torch.Tensor, packing: Packing, first_only: bool) -> torch.Tensor:
    """One BERT layer on packed states ``[T, H]``; with ``first_only`` it returns the first
    token of each sentence ``[B, H]``."""
    sa = layer.attention.self
    heads, size = sa.num_attention_heads, sa.attention_head_size
    b, n = packing.batch, packing.length
    if first_only:  # keys and values of every token, the query of the first token only
        kv = F.linear(x, torch.cat([sa.key.weight, sa.value.weight]), torch.cat([sa.key.bias, sa.value.bias]))
        k, v = packing.pad(kv).view(b, n, 2, heads, size).transpose(1, 3).unbind(2)
        residual = x.index_select(0, packing.first)
        q = sa.query(residual).view(b, 1, heads, size).transpose(1, 2)
    else:  # one fused projection for Q, K, V
        qkv = F.linear(x, torch.cat([sa.query.weight, sa.key.weight, sa.value.weight]),
                       torch.cat([sa.query.bias, sa.key.bias, sa.value.bias]))
        q, k, v = packing.pad(qkv).view(b, n, 3, heads, size).transpose(1, 3).unbind(2)
        residual = x
    context = _attention(sa, q, k, v, packing.keys).transpose(1, 2).reshape(-1, heads * size)
    if first_only:  # the rows are the first token of each sentence
        first = torch.arange(b, device=x.device)
        tokens = keyed.tokens(first, torch.zeros_like(first))
    else:
        context, tokens = context.index_select(0, packing.index), contextlib.nullcontext()
    with tokens:
        hidden = layer.attention.output(context, residual)
        return layer.output(layer.intermediate(hidden), hidden)


def _attention(sa: nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product attention over the real keys; the probabilities' dropout is PyTorch's
    fused one, or, under keyed dropout, the module's own on the explicit probabilities."""
    p = sa.dropout.p if sa.training else 0.0
    scale = getattr(sa, "scaling", None)
    if not p or keyed.active() is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keys, dropout_p=p, scale=scale)
    scores = (q @ k.transpose(-2, -1)) * (scale if scale is not None else q.size(-1) ** -0.5)
    scores = scores.masked_fill(~keys, torch.finfo(scores.dtype).min)
    return sa.dropout(F.softmax(scores, dim=-1)) @ v


def pooled(backbone: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
           pooler: str = "cls", lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Sentence embeddings ``[B, H]`` of right-padded ``input_ids``: the final-layer first
    token (``cls``) or the mean of the final layer over real tokens (``avg``), as
    :meth:`SentenceEncoder.pool` computes them from Hugging Face's padded forward.
    ``lengths``: the rows' real lengths on the CPU, if known (see :class:`Packing`)."""
    packing = Packing(attention_mask, lengths)
    layers = backbone.encoder.layer
    with keyed.tokens(packing.rows(), packing.positions()):
        x = _embed(backbone, input_ids, packing)
        for i, layer in enumerate(layers):
            x = _layer(layer, x, packing, first_only=pooler == "cls" and i == len(layers) - 1)
    if pooler == "cls":
        return x
    sums = x.new_zeros(packing.batch, x.shape[-1]).index_add(0, packing.rows(), x)
    return sums / packing.lengths.clamp(min=1).unsqueeze(1).to(x.dtype)
