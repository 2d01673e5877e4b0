"""Composition-contrastive learning, CompCSE (Chanchani & Huang, 2023).

The positive is built in latent space: the sentence's tokens are split into ``k`` contiguous
parts ("naive partition"; k = 2 is left half / right half), each part is encoded in its own
forward pass with dropout and sent through the same MLP head, and the part embeddings are
aggregated into ``z+``. InfoNCE then pulls the full-sentence anchor ``z`` towards ``z+``.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from cselab.encoder import pad_batch
from cselab.objectives import Objective, register
from cselab.objectives.losses import info_nce

AGGREGATIONS = ("sum", "avg", "concat_halves", "concat_project", "concat_absdiff_project")
COMPOSE = ("z+", "z", "both")


def split_ids(ids: list[int], k: int) -> list[list[int]]:
    """Split one tokenised sentence ``[CLS] t_1 .. t_n [SEP]`` into ``k`` contiguous parts.

    The content tokens (between the special tokens) are cut on token boundaries at
    ``floor(j * n / k)``, so part sizes differ by at most one and the left part is the shorter
    one; each part is re-wrapped as ``[CLS] part [SEP]`` with the model's own special tokens.
    When ``n < k`` some cut would be empty: an empty part takes the whole content instead, so a
    1-token sentence composes its positive from copies of itself (SimCSE-like) rather than from
    an empty string. A sentence with no content token yields ``k`` copies of ``[CLS] [SEP]``.
    """
    cls, content, sep = ids[:1], ids[1:-1], ids[-1:]
    n = len(content)
    cuts = [j * n // k for j in range(k + 1)]
    parts = [content[cuts[j]:cuts[j + 1]] or content for j in range(k)]
    return [cls + p + sep for p in parts]


def split_batch(input_ids: torch.Tensor, attention_mask: torch.Tensor, k: int, pad_id: int) -> dict[str, torch.Tensor]:
    """Partition a padded batch; rows come part-major: part j of sentence i is row ``j * B + i``."""
    lengths = attention_mask.sum(1).tolist()
    rows = [split_ids(input_ids[i, :n].tolist(), k) for i, n in enumerate(lengths)]
    ordered = [rows[i][j] for j in range(k) for i in range(len(rows))]
    return pad_batch(ordered, pad_id, input_ids.device)


class Aggregator(nn.Module):
    """Compose ``k`` part embeddings ``[k, B, d]`` into one ``[B, d]`` (CompCSE Table 3)."""

    def __init__(self, mode: str, k: int, dim: int):
        super().__init__()
        self.mode, self.k = mode, k
        if mode == "concat_project":
            self.proj = nn.Linear(k * dim, dim)
        elif mode == "concat_absdiff_project":
            self.proj = nn.Linear(3 * dim, dim)

    def forward(self, parts: torch.Tensor) -> torch.Tensor:
        if self.mode == "sum":
            return parts.sum(0)
        if self.mode == "avg":
            return parts.mean(0)
        if self.mode == "concat_halves":
            # [z'_{:d/2}; z''_{d/2:}], generalised to k parts: coordinate chunk j from part j.
            chunks = [c[j] for j, c in enumerate(torch.tensor_split(parts, self.k, dim=-1))]
            return torch.cat(chunks, dim=-1)
        if self.mode == "concat_project":
            return self.proj(torch.cat(list(parts), dim=-1))
        a, b = parts[0], parts[1]
        return self.proj(torch.cat([a, b, (a - b).abs()], dim=-1))


@register("compcse")
class CompCSE(Objective):
    """Anchor ``z`` = full sentence; positive ``z+`` = aggregate of the parts' embeddings.

    Options: ``partitions`` (k, 2-4), ``aggregation`` (sum, avg, concat_halves,
    concat_project, concat_absdiff_project), ``compose`` which side is composed (``z+``: the
    positive, the paper's default; ``z``: the anchor; ``both``: two independently-dropped-out
    compositions), and ``d0`` (InfoNCE on the first d0 coordinates only, DirectCLR).
    """

    @dataclasses.dataclass
    class Options:
        partitions: int = 2
        aggregation: str = "avg"
        compose: str = "z+"
        d0: int | None = None

    @classmethod
    def validate_options(cls, o):
        if not isinstance(o.partitions, int) or not 2 <= o.partitions <= 4:
            return "partitions", f"must be an integer in 2..4, got {o.partitions!r}"
        if o.aggregation not in AGGREGATIONS:
            return "aggregation", f"{o.aggregation!r} is not one of {list(AGGREGATIONS)}"
        if o.aggregation == "concat_absdiff_project" and o.partitions != 2:
            return "aggregation", "concat_absdiff_project is defined for partitions = 2 only"
        if o.compose not in COMPOSE:
            return "compose", f"{o.compose!r} is not one of {list(COMPOSE)}"
        if o.d0 is not None and (not isinstance(o.d0, int) or o.d0 < 1):
            return "d0", f"must be a positive integer or null, got {o.d0!r}"
        return None

    def __init__(self, options, hidden_size, temperature):
        super().__init__(options, hidden_size, temperature)
        if self.options.d0 is not None and self.options.d0 > hidden_size:
            from cselab.errors import ConfigError
            raise ConfigError(f"config key 'options.d0': {self.options.d0} exceeds the model's hidden size {hidden_size}")
        self.aggregate = Aggregator(self.options.aggregation, self.options.partitions, hidden_size)

    def compose(self, encoder, batch, copies: int = 1) -> list[torch.Tensor]:
        """``copies`` independent compositions of the batch, from one forward pass."""
        k, n = self.options.partitions, batch["input_ids"].size(0)
        parts = split_batch(batch["input_ids"], batch["attention_mask"], k, encoder.tokenizer.pad_token_id)
        if copies > 1:
            parts = {key: t.repeat(copies, 1) for key, t in parts.items()}
        z = encoder(**parts).view(copies, k, n, -1)
        return [self.aggregate(z[c]) for c in range(copies)]

    def forward(self, encoder, batch):
        mode = self.options.compose
        if mode == "both":
            anchor, positive = self.compose(encoder, batch, copies=2)
        else:
            full = encoder(batch["input_ids"], batch["attention_mask"])
            composed = self.compose(encoder, batch)[0]
            anchor, positive = (full, composed) if mode == "z+" else (composed, full)
        return info_nce(anchor, positive, self.temperature, self.options.d0), {}
