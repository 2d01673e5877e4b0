"""The keyed-dropout kernel (:mod:`cselab.models.keyed_ops`): the Triton kernel CUDA runs, run
here on the CPU in Triton's interpreter, draws the CPU path's masks bit for bit in every layout
(rows, attention probabilities, packed tokens); its backward is the same mask; the masks keep
``1 - p`` of the elements, independently across elements, rows, sites and views; the row keys
op is the definition the training runs were keyed by; a compiled function keeps the op whole."""

import math

import numpy as np
import pytest
import torch

import triton  # noqa: F401  (the test extra installs it: the kernel runs in its interpreter here)

from cselab.models import keyed, keyed_ops

SITE = keyed.mix_int(12345)

#: (shape, group, inner, stride) per layout: rows [R, L, H], attention [R, heads, Lq, Lk], [R, H]
LAYOUTS = {
    "rows": ((6, 9, 40), 9, 9, 40),
    "attention": ((6, 3, 9, 9), 27, 9, keyed_ops.MAX_POSITIONS),
    "cls-attention": ((6, 3, 1, 9), 3, 1, keyed_ops.MAX_POSITIONS),
    "pooled": ((6, 40), 1, 1, 40),
}


def _keys(n: int) -> torch.Tensor:
    return keyed.mix(torch.arange(n) * 7 + 3)


def _args(layout: str):
    shape, group, inner, stride = LAYOUTS[layout]
    return shape, _keys(shape[0]), None, group, inner, stride


def _packed():
    lengths = torch.tensor([5, 1, 9, 3])
    rows = torch.repeat_interleave(torch.arange(4), lengths)
    positions = torch.cat([torch.arange(n) for n in lengths.tolist()])
    return (1, len(rows), 48), _keys(4)[rows], positions, 1, 1, 48


def _layout(name: str):
    return _packed() if name == "packed" else _args(name)


@pytest.mark.parametrize("layout", [*LAYOUTS, "packed"])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.37])
def test_kernel_masks_equal_the_cpu_path_bit_for_bit(layout, p):
    shape, keys, positions, group, inner, stride = _layout(layout)
    x = torch.randn(shape)
    cpu = keyed_ops.dropout_eager(x, keys, positions, SITE, p, group, inner, stride)
    kernel = keyed_ops._dropout_triton(x, keys, positions, SITE, p, group, inner, stride)
    assert torch.equal(kernel, cpu)  # fp32: the same mask and the same x / (1 - p), bit for bit
    for dtype in (torch.bfloat16, torch.float16):
        half = x.to(dtype)
        a = keyed_ops.dropout_eager(half, keys, positions, SITE, p, group, inner, stride)
        b = keyed_ops._dropout_triton(half, keys, positions, SITE, p, group, inner, stride)
        assert torch.equal(a == 0, b == 0)  # the masks, bit for bit
        # values within one unit in the last place: the interpreter (numpy) truncates fp32 to
        # bf16 where the GPU and torch round to nearest
        torch.testing.assert_close(b.float(), a.float(), rtol=2 ** -7, atol=0)


def test_kernel_masks_equal_the_definition_the_runs_were_keyed_by():
    """The layouts reproduce the per-layout counters of the first keyed implementation:
    ``(l * H + h)`` for rows, ``((head * 4096 + q) * 4096 + k)`` for attention, the packed
    token's position for the unpadded forward."""
    keys = _keys(6)
    x = torch.randn(6, 3, 9, 9)
    r, heads, lq, lk = x.shape
    counters = ((torch.arange(heads)[:, None, None] * 4096 + torch.arange(lq)[None, :, None]) * 4096
                + torch.arange(lk)[None, None, :])
    row = keyed.mix(keys ^ SITE)[:, None, None, None]
    bits = (keyed.mix(row + counters[None] * keyed._GOLDEN) >> 40) & ((1 << 24) - 1)
    expected = bits.float() / (1 << 24) >= 0.1
    state = keyed.RowKeys(keys)
    assert torch.equal(keyed.keep_mask(x, 0.1, SITE, state), expected)
    assert torch.equal(keyed.keyed_dropout(x, 0.1, SITE, state) != 0, expected)


def test_backward_is_the_same_mask_and_scale(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert keyed_ops.use_kernel(torch.zeros(1))
    shape, keys, positions, group, inner, stride = _args("rows")
    x = torch.randn(shape, requires_grad=True)
    out = keyed_ops.keyed_dropout(x, keys, positions, SITE, 0.2, group, inner, stride)
    g = torch.randn(shape)
    out.backward(g)
    keep = keyed_ops.keep_mask_eager(x, keys, positions, SITE, 0.2, group, inner, stride)
    assert torch.equal(x.grad, torch.where(keep, g / 0.8, 0.0))
    assert torch.equal(out, torch.where(keep, x.detach() / 0.8, 0.0))


def test_masks_keep_one_minus_p_independently():
    """Keep rate within 4 standard errors of ``1 - p``; elements of a row, the same element of
    two sites, two views of a sentence and neighbouring rows are uncorrelated (|r| < 4/sqrt(n))."""
    p, rows, width = 0.1, 512, 768
    keys = _keys(rows)
    x = torch.ones(rows, 1, width)

    def mask(site, row_keys=keys):
        return keyed_ops.keep_mask_eager(x, row_keys, None, site, p, 1, 1, width).reshape(rows, width).float()

    a = mask(SITE)
    n = a.numel()
    assert abs(a.mean().item() - (1 - p)) < 4 * math.sqrt(p * (1 - p) / n)

    def corr(u, v):
        return float(np.corrcoef(u.reshape(-1).numpy(), v.reshape(-1).numpy())[0, 1])

    bound = 4 / math.sqrt(n / 2)
    assert abs(corr(a[:, :-1], a[:, 1:])) < bound          # neighbouring elements
    assert abs(corr(a[:-1], a[1:])) < bound                # neighbouring rows (keys 7 apart)
    assert abs(corr(a, mask(SITE + 1))) < bound            # two sites
    views = keyed_ops.row_keys(torch.tensor([42]), 0, 2 * rows, rows, 0)
    assert abs(corr(mask(SITE, views[:rows]), mask(SITE, views[rows:]))) < bound  # two views
    # the joint frequencies of neighbouring pairs are the product of the marginals (chi-square, 3 dof)
    pairs = (a[:, 0::2] * 2 + a[:, 1::2]).reshape(-1).long()
    observed = torch.bincount(pairs, minlength=4).double()
    q = torch.tensor([p * p, p * (1 - p), (1 - p) * p, (1 - p) ** 2], dtype=torch.float64)
    expected = q * len(pairs)
    assert float(((observed - expected) ** 2 / expected).sum()) < 16.27  # chi2(3) at 0.001


def test_row_keys_op_is_the_runs_definition():
    seed = 1234567891011
    for call, rows, sentences, offset in ((0, 32, 16, 0), (3, 16, 16, 8), (1, 7, 16, 0), (2, 12, 0, 0)):
        j = torch.arange(rows)
        view, sentence = ((j // sentences, offset + j % sentences) if sentences and rows % sentences == 0
                          else (torch.zeros_like(j), j))
        expected = keyed.mix(keyed.mix(keyed.mix_int(seed, call) + view * keyed.mix_int(1)) + sentence)
        assert torch.equal(keyed_ops.row_keys(torch.tensor([seed]), call, rows, sentences, offset), expected)


def test_compiled_function_keeps_the_op_whole():
    shape, keys, positions, group, inner, stride = _args("rows")
    x = torch.randn(shape)

    def f(x, keys):
        return torch.tanh(keyed_ops.keyed_dropout(x * 2, keys, None, SITE, 0.1, group, inner, stride)).sum(-1)

    explanation = torch._dynamo.explain(f)(x, keys)
    assert (explanation.graph_count, explanation.graph_break_count) == (1, 0)
    assert torch.equal(torch.compile(f, backend="aot_eager")(x, keys), f(x, keys))


def test_more_rows_than_keys_is_refused():
    state = keyed.RowKeys(_keys(2))
    with pytest.raises(ValueError, match="3 rows but 2 row keys"):
        keyed.keyed_dropout(torch.randn(3, 4, 8), 0.1, SITE, state)
