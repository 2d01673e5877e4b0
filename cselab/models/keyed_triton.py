"""The fused keyed-dropout kernel in Triton (imported only where Triton is installed).

One program covers ``BLOCK_N`` vectors by ``BLOCK_W`` elements: it hashes each vector's key with
the site once, then each element's counter, keeps the elements whose 24-bit draw reaches the
threshold, and writes ``x / (1 - p)`` or zero. The arithmetic is unsigned 64-bit (wrapping
multiplies, logical shifts), the same bits as :func:`cselab.models.keyed_ops.keep_mask_eager`;
the splitmix64 finaliser is written out twice (a nested Triton function, Triton's own library ones
included, would tie the kernel to one of the two modes, compiled or interpreted).
"""

from __future__ import annotations

import functools

import triton
import triton.language as tl


def keyed_dropout_kernel(x_ptr, out_ptr, keys_ptr, pos_ptr, n_vectors, width, site, threshold, scale, group,
                         inner, stride, HAS_POSITIONS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr):
    n = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    w = tl.program_id(1).to(tl.int64) * BLOCK_W + tl.arange(0, BLOCK_W)
    n_ok = n < n_vectors
    w_ok = w < width
    if HAS_POSITIONS:
        key = tl.load(keys_ptr + n, mask=n_ok, other=0)
        base = tl.load(pos_ptr + n, mask=n_ok, other=0)
    else:
        key = tl.load(keys_ptr + n // group, mask=n_ok, other=0)
        j = n % group
        base = (j // inner) * 4096 + j % inner  # MAX_POSITIONS
    # the row's key mixed with the site: splitmix64's finaliser
    r = key.to(tl.uint64) ^ site.to(tl.int64).to(tl.uint64)
    r = r ^ (r >> 30)
    r = r * 0xBF58476D1CE4E5B9
    r = r ^ (r >> 27)
    r = r * 0x94D049BB133111EB
    r = r ^ (r >> 31)
    # each element: its counter times the golden ratio added to the row's key, finalised
    c = base.to(tl.uint64)[:, None] * stride.to(tl.int64).to(tl.uint64) + w.to(tl.uint64)[None, :]
    h = r[:, None] + c * 0x9E3779B97F4A7C15
    h = h ^ (h >> 30)
    h = h * 0xBF58476D1CE4E5B9
    h = h ^ (h >> 27)
    h = h * 0x94D049BB133111EB
    h = h ^ (h >> 31)
    bits = ((h >> 40) & 0xFFFFFF).to(tl.int32)
    ok = n_ok[:, None] & w_ok[None, :]
    offsets = n[:, None] * width + w[None, :]
    x = tl.load(x_ptr + offsets, mask=ok, other=0)
    # division rounded to nearest (torch's CPU x / (1 - p)); 0 is exact in any dtype
    y = tl.where(bits >= threshold, tl.math.div_rn(x.to(tl.float32), scale), 0.0)
    tl.store(out_ptr + offsets, y.to(x.dtype), mask=ok)


@functools.lru_cache(maxsize=None)
def compiled():
    # integers that may be 1 stay runtime values (Triton turns a 1 into a constant without .to)
    return triton.jit(keyed_dropout_kernel, do_not_specialize=["site", "stride", "group", "inner", "threshold"])


@functools.lru_cache(maxsize=None)
def interpreted():
    from triton.runtime.interpreter import InterpretedFunction

    return InterpretedFunction(keyed_dropout_kernel)
