"""Dropout keyed by row: each sentence's masks depend on its own key, never on the other rows.

A torch random stream fills a tensor in one draw, so a sentence's dropout masks depend on
which rows share its batch, on the batch's width and on the order of the calls. Gradient
caching (:mod:`cselab.training.chunks`) encodes a batch in chunks, twice; its step is the
full-batch step only if every row draws the same masks whichever chunk it is in. Here each
mask element is a hash (splitmix64's finaliser, Steele et al., 2014) of

    (the row's key, the dropout site, the element's position in its row)

so a row's masks are the same in a batch of 1 or 4096, padded or packed, on one process or
eight. A row's key is a hash of the step's seed (drawn from torch's generator, so a run stays
seeded and a checkpoint resumes it), the call (the n-th network run of the step), the view
(the sentence's copy within the call) and the sentence's place in the global batch.

:class:`KeyedDropout` replaces a network's ``nn.Dropout`` modules (:func:`install`); while
:func:`keys` is active it draws keyed masks, otherwise it is ``nn.Dropout``. Positions come from
the tensor's layout: ``[R, L, H]`` (padded), ``[R, heads, Lq, Lk]`` (attention probabilities),
or the packed tokens of the unpadded forward, which names them with :func:`tokens`. The masks
are drawn by one op per dropout site (:mod:`cselab.models.keyed_ops`: a fused Triton kernel on
CUDA, torch ops on the CPU, the same bits).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from cselab.models import keyed_ops
from cselab.models.keyed_ops import MAX_POSITIONS, mix  # noqa: F401 (the masks' definition lives there)

_GOLDEN = -7046029254386353131            # 0x9E3779B97F4A7C15, as a signed int64
_M1, _M2 = -4658895280553007687, -7723592293110705685  # splitmix64's multipliers, signed
_MASK = (1 << 64) - 1


def mix_int(*values: int) -> int:
    """:func:`mix` folded over Python ints (the keys of sites, calls and views), as a signed int64."""
    x = 0
    for v in values:
        x = (x ^ (v * _GOLDEN)) & _MASK
        x ^= x >> 30
        x = (x * (_M1 & _MASK)) & _MASK
        x ^= x >> 27
        x = (x * (_M2 & _MASK)) & _MASK
        x ^= x >> 31
    return x - (1 << 64) if x >= 1 << 63 else x


@dataclass
class Tokens:
    """Packed tokens ``[N, ...]``: the row and position of each, and its row's key."""

    rows: torch.Tensor
    positions: torch.Tensor
    keys: torch.Tensor


class RowKeys:
    """The keys of one network run's rows (``[R]`` int64 on the device) and, while the unpadded
    forward runs, where its packed tokens are."""

    def __init__(self, keys: torch.Tensor):
        self.keys = keys
        self.tokens: Tokens | None = None

    def layout(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, int, int, int]:
        """``(keys, positions, group, inner, stride)`` of :func:`cselab.models.keyed_ops.keyed_dropout`
        for ``x``: attention probabilities ``[R, heads, Lq, Lk]``, packed tokens ``[N, H]`` (or
        ``[1, N, H]``) while :func:`tokens` names them, or rows ``[R, L, H]`` / ``[R, H]``."""
        width = x.shape[-1]
        vectors = x.numel() // width if width else 0
        if x.dim() == 4:  # the [CLS]-only last layer: lq = 1, position 0
            r, heads, lq, _ = x.shape
            keys, group, inner, stride = self.keys, heads * lq, lq, MAX_POSITIONS
        elif self.tokens is not None and len(self.tokens.rows) == vectors:
            return self.tokens.keys, self.tokens.positions, 1, 1, width
        else:
            r = x.shape[0]
            group = x.shape[1] if x.dim() == 3 else 1
            keys, inner, stride = self.keys, group, width
        if r > len(keys):
            raise ValueError(f"keyed dropout: {r} rows but {len(keys)} row keys")
        return keys, None, group, inner, stride


_ACTIVE: list[RowKeys] = []


class keys:  # noqa: N801 (used as a function: ``with keys(row_keys):``)
    """Key the dropout of the networks run inside by ``row_keys`` (one per input row). A class,
    not a generator, so ``torch.compile`` traces through it without a graph break."""

    def __init__(self, row_keys: torch.Tensor):
        self.state = RowKeys(row_keys)

    def __enter__(self) -> RowKeys:
        _ACTIVE.append(self.state)
        return self.state

    def __exit__(self, *exc) -> bool:
        _ACTIVE.pop()
        return False


def active() -> RowKeys | None:
    return _ACTIVE[-1] if _ACTIVE else None


@contextlib.contextmanager
def tokens(rows: torch.Tensor, positions: torch.Tensor) -> Iterator[None]:
    """Name the row and position of each packed token for the keyed dropout inside."""
    state = active()
    if state is None:
        yield
        return
    before, state.tokens = state.tokens, Tokens(rows, positions, state.keys[rows])
    try:
        yield
    finally:
        state.tokens = before


def keep_mask(x: torch.Tensor, p: float, site: int, state: RowKeys) -> torch.Tensor:
    """Which elements of ``x`` dropout keeps (probability ``1 - p``), keyed by row (the torch ops'
    definition; training draws the same bits in one op, :func:`keyed_dropout`)."""
    keys, positions, group, inner, stride = state.layout(x)
    return keyed_ops.keep_mask_eager(x, keys, positions, site, p, group, inner, stride)


def keyed_dropout(x: torch.Tensor, p: float, site: int, state: RowKeys) -> torch.Tensor:
    """Dropout of ``x`` keyed by row: one op (a fused kernel on CUDA), its backward one more.

    On the CPU outside ``torch.compile`` (no kernel there) the torch expression runs directly:
    autograd keeps its mask for the backward instead of hashing again (hashing is ~36 int64
    ops over the tensor: on 2 CPU cores the backward's rehash cost about 6% of a MiniLM CompCSE
    step). The same bits and values either way."""
    keys, positions, group, inner, stride = state.layout(x)
    if not keyed_ops.use_kernel(x) and not torch.compiler.is_compiling():
        return keyed_ops.dropout_eager(x, keys, positions, site, float(p), group, inner, stride)
    return keyed_ops.keyed_dropout(x, keys, positions, site, float(p), group, inner, stride)


class KeyedDropout(nn.Dropout):
    """``nn.Dropout`` whose masks are keyed by row while :func:`keys` is active."""

    def __init__(self, p: float, site: int):
        super().__init__(p)
        self.site = site

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        state = active()
        if not self.training or self.p == 0 or state is None:
            return F.dropout(x, self.p, self.training)
        return keyed_dropout(x, self.p, self.site, state)


def install(network: nn.Module, name: str) -> nn.Module:
    """Replace every ``nn.Dropout`` of ``network`` with a :class:`KeyedDropout` (its site: a hash
    of ``name`` and the module's path, so two networks never share masks) and route its
    Hugging Face attention through :func:`attention` (the probabilities' dropout keyed too).
    Parameters, state dict and saved files are unchanged."""
    for path, module in list(network.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Dropout):  # a copied network's keyed modules get sites of their own
                full = f"{path}.{child_name}" if path else child_name
                setattr(module, child_name, KeyedDropout(child.p, _site(f"{name}/{full}")).train(child.training))
    configs = {id(m.config): m.config for m in network.modules() if hasattr(getattr(m, "config", None), "_attn_implementation")}
    for config in configs.values():
        if config._attn_implementation in ("eager", "sdpa"):
            _register_attention()
            config._attn_implementation = ATTENTION
    return network


def _site(path: str) -> int:
    import zlib

    return mix_int(zlib.crc32(path.encode()))


ATTENTION = "cselab_keyed"


def attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """Hugging Face attention with the probabilities' dropout keyed: PyTorch's fused attention
    without dropout; with it, the eager math and the module's own (keyed) dropout module."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if dropout == 0.0 or not module.training:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=0.0,
                                      scaling=scaling, **kwargs)
    scaling = scaling if scaling is not None else query.size(-1) ** -0.5
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            weights = weights.masked_fill(~attention_mask, torch.finfo(weights.dtype).min)
        else:
            weights = weights + attention_mask
    weights = module.dropout(F.softmax(weights, dim=-1))
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def _register_attention() -> None:
    """The attention function, and its masks built as for PyTorch's fused attention (boolean,
    True where a key may be attended)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
