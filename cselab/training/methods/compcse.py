"""Composition-contrastive learning, CompCSE (Chanchani & Huang, 2023, section 3).

The positive is built in latent space: the sentence is split into ``k`` contiguous parts
("naive partition"; k = 2 is left half / right half), each part is encoded in its own forward
pass with dropout, the parts' raw [CLS] vectors are aggregated, and the training head runs on
the aggregate and on the full-sentence anchor ("Resultant [CLS] tokens are then aggregated and
passed through a linear projector", Figure 1; the authors' ``cl_forward`` does the same).
InfoNCE, optionally on the first ``d0`` coordinates, then pulls ``z`` towards ``z+``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from cselab.errors import ConfigError
from cselab.models.heads import HEADS, init_linear, make_head
from cselab.training.methods import MethodConfig, Output, TorchModule, option, repeat_lengths

if TYPE_CHECKING:
    import torch

    from cselab.data.tokens import TokenizedCorpus

AGGREGATIONS = ("sum", "avg", "concat_halves", "concat_project", "concat_absdiff_project")
COMPOSE = ("z+", "z", "both")
#: where the training head runs: on the aggregate (the paper and the authors' code) or on each
#: part before aggregating (this project's first implementation, kept for comparison)
HEAD_PLACEMENT = ("after_aggregation", "per_part")
#: the unit the partition cuts: subword tokens of the tokenised sentence ("split the tokens of
#: x_i in half", section 3), or whitespace words of the text, each part tokenised on its own
PARTITION_UNITS = ("subword", "word")


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
    return [cls + p + sep for p in _cut(content, k)]


def split_words(sentence: str, k: int) -> list[str]:
    """The word-level partition: ``k`` contiguous runs of whitespace words, cut as :func:`split_ids`."""
    return [" ".join(p) for p in _cut(sentence.split(), k)]


def _cut(items: list, k: int) -> list[list]:
    n = len(items)
    cuts = [j * n // k for j in range(k + 1)]
    return [items[cuts[j]:cuts[j + 1]] or items for j in range(k)]


def split_rows(corpus: TokenizedCorpus, k: int) -> TokenizedCorpus:
    """:func:`split_ids` over every row of a :class:`TokenizedCorpus` at once, vectorised:
    the ``k * N`` parts come part-major (part j of row i is row ``j * N + i``)."""
    import torch

    from cselab.data.tokens import TokenizedCorpus

    n_rows = len(corpus)
    starts, lengths = corpus.offsets[:-1], corpus.lengths
    content = (lengths - 2).clamp(min=0)
    cuts = torch.arange(k + 1) * content[:, None] // k                       # [N, k+1]
    lo, hi = 1 + cuts[:, :-1], 1 + cuts[:, 1:]                                # content slice per part
    empty = hi == lo                                                          # an empty part takes it all
    lo, hi = torch.where(empty, 1, lo), torch.where(empty, (1 + content)[:, None], hi)
    lo, hi = lo.T.reshape(-1), hi.T.reshape(-1)                               # part-major
    row = torch.arange(n_rows).repeat(k)
    size = hi - lo + 2
    offsets = torch.zeros(k * n_rows + 1, dtype=torch.long)
    torch.cumsum(size, 0, out=offsets[1:])
    q = torch.arange(int(offsets[-1])) - torch.repeat_interleave(offsets[:-1], size)  # position in its part
    part_row, part_lo, part_size = (torch.repeat_interleave(x, size) for x in (row, lo, size))
    first, last = starts[part_row], starts[part_row] + lengths[part_row] - 1       # [CLS] and [SEP]
    source = torch.where(q == 0, first, torch.where(q == part_size - 1, last, first + part_lo + q - 1))
    return TokenizedCorpus(corpus.ids[source], offsets)


def split_batch(input_ids: torch.Tensor, attention_mask: torch.Tensor, k: int, pad_id: int) -> dict[str, torch.Tensor]:
    """Partition a padded batch; rows come part-major: part j of sentence i is row ``j * B + i``."""
    import torch

    from cselab.data.tokens import TokenizedCorpus

    lengths = attention_mask.sum(1).cpu()
    offsets = torch.zeros(len(lengths) + 1, dtype=torch.long)
    torch.cumsum(lengths, 0, out=offsets[1:])
    rows = TokenizedCorpus(input_ids.cpu()[attention_mask.cpu().bool()], offsets)
    parts = split_rows(rows, k)
    out = parts.batch(torch.arange(len(parts)), pad_id)
    return {key: value.to(input_ids.device) for key, value in out.items()}


class Aggregator(TorchModule):
    """Compose ``k`` part embeddings ``[k, B, d]`` into one ``[B, d]`` (CompCSE Table 3)."""

    def __init__(self, mode: str, k: int, dim: int, init_std: float = 0.02):
        from torch import nn

        super().__init__()
        self.mode, self.k = mode, k
        if mode == "concat_project":
            self.proj = nn.Linear(k * dim, dim)
        elif mode == "concat_absdiff_project":
            self.proj = nn.Linear(3 * dim, dim)
        init_linear(self, init_std)

    def forward(self, parts: torch.Tensor) -> torch.Tensor:
        import torch

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


class CompCSE(MethodConfig):
    """Anchor ``z`` = full sentence; positive ``z+`` = the training head over the aggregate of the
    parts' raw [CLS] vectors.

    Options: ``partitions`` (k, 2-4), ``aggregation`` (sum, avg, concat_halves,
    concat_project, concat_absdiff_project), ``compose`` which side is composed (``z+``: the
    positive, the paper's default; ``z``: the anchor; ``both``: two independently-dropped-out
    compositions), ``d0`` (InfoNCE on the first d0 coordinates only, DirectCLR), ``head``,
    ``head_placement`` and ``partition_unit`` (see :data:`HEAD_PLACEMENT`, :data:`PARTITION_UNITS`).
    """

    name = "compcse"
    training_keys = ("temperature", "pad_to_multiple_of")

    @classmethod
    def footprint(cls, options, layers):
        from cselab.training.memory import Footprint

        return Footprint(layers=3 * layers)  # the sentence and its parts (once or twice), each a network run

    @dataclasses.dataclass
    class Options:
        partitions: int = option(2, minimum=2, maximum=4)
        aggregation: str = option("avg", enum=list(AGGREGATIONS))
        compose: str = option("z+", enum=list(COMPOSE))
        d0: int | None = option(None, minimum=1)
        head: str = option("mlp", enum=list(HEADS))
        head_placement: str = option("after_aggregation", enum=list(HEAD_PLACEMENT))
        partition_unit: str = option("subword", enum=list(PARTITION_UNITS))

    @classmethod
    def validate_options(cls, o):
        if o.aggregation == "concat_absdiff_project" and o.partitions != 2:
            return "aggregation", "concat_absdiff_project is defined for partitions = 2 only"
        return None

    def __init__(self, ctx):
        super().__init__(ctx)
        o, hidden = self.options, ctx.hidden_size
        if o.d0 is not None and o.d0 > hidden:
            raise ConfigError(f"config key 'options.d0': {o.d0} exceeds the model's hidden size {hidden}")
        std = ctx.encoder.initializer_range
        self.head = make_head(o.head, hidden, std)
        self.aggregate = Aggregator(o.aggregation, o.partitions, hidden, std)
        self.temperature = ctx.training.temperature
        self.parts: TokenizedCorpus | None = None

    def attach_corpus(self, sentences, corpus, tokenize):
        """The parts of every corpus sentence, built once (part-major, as :func:`split_rows`)."""
        k = self.options.partitions
        if self.options.partition_unit == "word":
            words = [split_words(s, k) for s in sentences]
            texts = [p[j] for j in range(k) for p in words]
            self.parts = tokenize(texts)
        else:
            self.parts = split_rows(corpus, k)

    def prepare(self, batch):
        import torch

        from cselab.data.tokens import to_device

        k, lengths = self.options.partitions, None
        if self.parts is None:  # no corpus attached: split the padded batch itself
            parts = split_batch(batch["input_ids"], batch["attention_mask"], k, self.ctx.tokenizer.pad_token_id)
        else:
            index = batch["index"].cpu()
            rows = (index + len(self.parts) // k * torch.arange(k)[:, None]).reshape(-1)
            parts = to_device(self.parts.batch(rows, self.ctx.tokenizer.pad_token_id,
                                               self.ctx.training.pad_to_multiple_of or 1),
                              batch["input_ids"].device)
            lengths = self.parts.lengths[rows]
        return {**batch, "parts_input_ids": parts["input_ids"], "parts_attention_mask": parts["attention_mask"],
                "parts_lengths": lengths}

    def compose(self, batch, copies: int = 1) -> list[torch.Tensor]:
        """``copies`` independent compositions of the batch, from one forward pass."""
        k, n = self.options.partitions, batch["input_ids"].size(0)
        ids, mask = batch["parts_input_ids"], batch["parts_attention_mask"]
        if copies > 1:
            ids, mask = ids.repeat(copies, 1), mask.repeat(copies, 1)
        parts = self.ctx.encode(ids, mask, repeat_lengths(batch.get("parts_lengths"), copies))
        parts = parts.view(copies, k, n, -1)
        if self.options.head_placement == "per_part":
            return [self.aggregate(self.head(parts[c].reshape(k * n, -1)).view(k, n, -1)) for c in range(copies)]
        return [self.head(self.aggregate(parts[c])) for c in range(copies)]

    def forward(self, batch, shared):
        from cselab.training.diagnostics import view_cosine
        from cselab.training.losses import info_nce

        mode = self.options.compose
        if mode == "both":
            anchor, positive = self.compose(batch, copies=2)
        else:
            pooled = self.ctx.encode(batch["input_ids"], batch["attention_mask"], batch.get("lengths"))
            full = self.head(pooled)
            shared.update(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          pooled=pooled, projected=full)
            composed = self.compose(batch)[0]
            anchor, positive = (full, composed) if mode == "z+" else (composed, full)
        shared["view_cosine"] = view_cosine(anchor, positive)
        return Output({"contrastive": info_nce(anchor, positive, self.temperature, self.options.d0)})
