"""Keyed dropout as two custom ops: one fused kernel per dropout site, one op per network run.

:mod:`cselab.models.keyed` defines the masks: element ``e`` of a row with key ``k`` at dropout
site ``s`` is kept when the top 24 bits of ``mix(mix(k ^ s) + counter(e) * GOLDEN)`` (splitmix64's
finaliser, a counter-based generator like torch's own Philox dropout, keyed instead of
streamed) read as a number in [0, 1) are at least ``p``. Written as torch ops that is about 36
elementwise int64 ops over the whole activation tensor per site, and a graph break under
``torch.compile``. Here the same bits come from

- ``cselab::keyed_dropout(x, keys, positions, site, p, group, inner, stride)``: one op. On CUDA a
  Triton kernel hashes and masks in registers (reads ``x`` once, writes the output once, no
  mask tensor); on the CPU the torch expression of :mod:`cselab.models.keyed`; under
  ``TRITON_INTERPRET=1`` the Triton kernel runs on the CPU too, in Triton's interpreter, which
  is how the tests prove the kernel's masks equal the CPU path's, bit for bit. Its backward is
  the same op on the gradient (dropout's backward is the same mask and scale), so nothing is
  saved for it but the keys. The op is opaque to ``torch.compile`` (a fake implementation gives
  its shape), so a compiled step has no graph break at a dropout site.
- ``cselab::row_keys(seed, call, rows, sentences, offset)``: the keys of one network run's rows
  from the step's seed as a tensor on the device (no host read, no recompile per step).

The layout of ``x``: its last dimension ``W`` is a row of ``W`` elements; the ``N = numel / W``
rows are vectors ``n``. Without ``positions`` vector ``n`` belongs to key ``n // group`` and its
counters are ``base * stride + w`` with ``j = n % group``, ``base = (j // inner) * MAX_POSITIONS +
j % inner``: ``[R, L, H]`` is ``group = inner = L, stride = H``; attention probabilities
``[R, heads, Lq, Lk]`` are ``group = heads * Lq, inner = Lq, stride = MAX_POSITIONS``. With
``positions`` (packed tokens) vector ``n`` has key ``keys[n]`` and ``base = positions[n]``.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Optional

import numpy as np
import torch

MAX_POSITIONS = 4096
_GOLDEN = -7046029254386353131            # 0x9E3779B97F4A7C15, as a signed int64
_M1, _M2 = -4658895280553007687, -7723592293110705685  # splitmix64's multipliers, signed
_MASK64 = (1 << 64) - 1
UNIFORM_BITS = 24


def mix(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 (wrapping arithmetic; masks turn arithmetic shifts logical)."""
    x = x ^ ((x >> 30) & ((1 << 34) - 1))
    x = x * _M1
    x = x ^ ((x >> 27) & ((1 << 37) - 1))
    x = x * _M2
    return x ^ ((x >> 31) & ((1 << 33) - 1))


def signed(value: int) -> int:
    """A Python int as the signed int64 of its low 64 bits."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def keep_threshold(p: float) -> int:
    """The least 24-bit draw that is kept: ``bits * 2**-24 >= float32(p)`` (torch compares a
    float32 tensor with ``p`` rounded to float32) is ``bits >= ceil(float32(p) * 2**24)``, exact."""
    return math.ceil(float(np.float32(p)) * (1 << UNIFORM_BITS))


# -- the CPU path: torch ops ------------------------------------------------------------------

def _vector_keys_and_bases(n_vectors: int, keys: torch.Tensor, positions: torch.Tensor | None, group: int,
                           inner: int) -> tuple[torch.Tensor, torch.Tensor]:
    if positions is not None:
        return keys, positions
    n = torch.arange(n_vectors, device=keys.device)
    j = n % group
    return keys[n // group], (j // inner) * MAX_POSITIONS + j % inner


def keep_mask_eager(x: torch.Tensor, keys: torch.Tensor, positions: torch.Tensor | None, site: int, p: float,
                    group: int, inner: int, stride: int) -> torch.Tensor:
    """Which elements of ``x`` are kept, as torch ops (the definition the kernel reproduces)."""
    width = x.shape[-1]
    vector_keys, bases = _vector_keys_and_bases(x.numel() // width, keys, positions, group, inner)
    row = mix(vector_keys ^ site)[:, None]
    counters = bases[:, None] * stride + torch.arange(width, device=x.device)[None]
    bits = (mix(row + counters * _GOLDEN) >> (64 - UNIFORM_BITS)) & ((1 << UNIFORM_BITS) - 1)
    return (bits >= keep_threshold(p)).reshape(x.shape)


def dropout_eager(x, keys, positions, site, p, group, inner, stride):
    keep = keep_mask_eager(x, keys, positions, site, p, group, inner, stride)
    return torch.where(keep, x / (1 - p), torch.zeros((), dtype=x.dtype, device=x.device)).contiguous()


# -- the fused kernel (Triton) ----------------------------------------------------------------

def interpreting() -> bool:
    """Whether CPU tensors go through the Triton kernel in Triton's interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET") == "1" and triton_available()


@functools.lru_cache(maxsize=None)
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _kernel(interpret: bool):
    """The Triton kernel, compiled for the GPU or run by Triton's interpreter (CPU tensors)."""
    from cselab.models import keyed_triton

    return keyed_triton.interpreted() if interpret else keyed_triton.compiled()


def _dropout_triton(x, keys, positions, site, p, group, inner, stride):
    x = x.contiguous()
    out = torch.empty_like(x)
    width = x.shape[-1]
    n_vectors = x.numel() // width if width else 0
    if n_vectors == 0:
        return out
    block_w = min(triton_next_pow2(width), 256)
    budget = 4096 if x.is_cuda else 1 << 16  # elements a program: the interpreter's programs are numpy calls
    block_n = max(1, min(budget // block_w, triton_next_pow2(n_vectors)))
    grid = (-(-n_vectors // block_n), -(-width // block_w))
    kernel = _kernel(x.device.type == "cpu")
    has_positions = positions is not None
    keys = keys.contiguous()
    positions = positions.contiguous() if has_positions else keys  # an unread stand-in
    kernel[grid](x, out, keys, positions, n_vectors, width, site,
                 keep_threshold(p), float(np.float32(1 - p)), group, inner, stride,
                 HAS_POSITIONS=has_positions, BLOCK_N=block_n, BLOCK_W=block_w)
    return out


def triton_next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def use_kernel(x: torch.Tensor) -> bool:
    """The fused kernel for ``x``: on CUDA with Triton installed, on the CPU under its interpreter."""
    return (x.is_cuda and triton_available()) or (x.device.type == "cpu" and interpreting())


# -- the ops ------------------------------------------------------------------------------------

@torch.library.custom_op("cselab::keyed_dropout", mutates_args=())
def keyed_dropout(x: torch.Tensor, keys: torch.Tensor, positions: Optional[torch.Tensor], site: int, p: float,
                  group: int, inner: int, stride: int) -> torch.Tensor:
    """``x`` with dropout ``p`` keyed by row (see the module docstring for the layout arguments)."""
    if use_kernel(x):
        return _dropout_triton(x, keys, positions, site, p, group, inner, stride)
    return dropout_eager(x, keys, positions, site, p, group, inner, stride)


@keyed_dropout.register_fake
def _(x, keys, positions, site, p, group, inner, stride):
    return x.new_empty(x.shape)  # contiguous, as both implementations return


def _setup(ctx, inputs, output):
    _, keys, positions, site, p, group, inner, stride = inputs
    ctx.save_for_backward(keys, positions)
    ctx.args = (site, p, group, inner, stride)


def _backward(ctx, grad):
    keys, positions = ctx.saved_tensors
    return keyed_dropout(grad, keys, positions, *ctx.args), None, None, None, None, None, None, None


keyed_dropout.register_autograd(_backward, setup_context=_setup)


@torch.library.custom_op("cselab::row_keys", mutates_args=())
def row_keys(seed: torch.Tensor, call: int, rows: int, sentences: int, offset: int) -> torch.Tensor:
    """The keys ``[rows]`` (int64, on ``seed``'s device) of the ``call``-th network run of a step
    with seed ``seed`` (a 1-element int64 tensor): rows that are whole views of the step's
    ``sentences`` (view-major) key by (view, ``offset`` + sentence), other rows by their index."""
    call_key = mix(mix(seed.reshape(()) * _GOLDEN) ^ signed(call * _GOLDEN))
    j = torch.arange(rows, device=seed.device)
    if sentences and rows % sentences == 0:
        view, sentence = j // sentences, offset + j % sentences
    else:
        view, sentence = torch.zeros_like(j), j
    return mix(mix(call_key + view * _VIEW) + sentence)


@row_keys.register_fake
def _(seed, call, rows, sentences, offset):
    return seed.new_empty((rows,))


def _view_key() -> int:
    x = signed(1 * _GOLDEN)  # mix_int(1)
    return int(mix(torch.tensor(x)))


_VIEW = _view_key()
