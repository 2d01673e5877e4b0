"""How a training step runs its networks: dropout keyed by row, and gradient caching.

Every network run of a step (the encoder on a batch's views, DiffCSE's discriminator, InfoCSE's
auxiliary network) goes through :meth:`Runner.run`, which keys the dropout of its rows
(:mod:`cselab.models.keyed`): a sentence's masks depend on the step's seed, the run, its view
and its place in the global batch, not on the rows beside it.

With ``training.chunk_size`` (or ``chunk_tokens``) the runner caches gradients (Gao et al., 2021, "Scaling Deep
Contrastive Learning Batch Size under Memory Limited Setup", the authors' GradCache): a run
with more rows than the chunk size encodes them chunk by chunk without a graph and returns the
concatenated outputs as leaves; the loss (heads, BatchNorm statistics, in-batch negatives) is
computed on the whole batch and back-propagated to those leaves; then each run, latest first,
encodes each chunk again with a graph, under the same keys (so the same dropout) and the same
torch random state, and back-propagates the cached gradient of its outputs. A run whose inputs
depend on an earlier run's outputs (the discriminator conditioned on the sentence embedding)
sends its gradient through the loss's retained graph to those outputs before the earlier run is
replayed. The gradients are the full-batch step's, to float rounding, with the activation
memory of one chunk.

A compiled step (``training.compile``) runs every chunk in one fixed shape (:meth:`Runner.compile_chunks`):
the chunk's rows by the step's longest row (``max_len``, padded to the compile's multiple), the last
chunk's rows padded with copies of its last row and every row's tokens padded (masked), through one
compiled function a network and grad mode, with the row keys as its input, replayed at every chunk;
the padding is cut from the outputs, so it is out of the loss and carries no gradient. The rest of
the step (the loss on the whole batch, the optimizer) runs eager around them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from cselab.data.tokens import host_sum, to_device
from cselab.models import keyed, keyed_ops
from cselab.training import memory


@dataclass
class _Run:
    """A cached run: what to replay and the gradients of its outputs."""

    fn: Callable
    inputs: tuple
    kwargs: dict
    rows: int
    keys: torch.Tensor
    rng: list
    outputs: tuple


def _slice(x: Any, rows: int, part: slice) -> Any:
    return x[part] if isinstance(x, torch.Tensor) and x.dim() and x.size(0) == rows else x


def _as_tuple(out: Any) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def _rng_state() -> tuple:
    return torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None


def _set_rng_state(state: tuple) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


class Runner:
    """Runs a step's networks for the methods (see the module docstring). ``chunk_size`` None:
    every run at once, with a graph; else runs over more rows are cached (``chunk_tokens``: as many
    rows a chunk as fit that many tokens at the run's width, instead). ``keyed`` False: torch's own
    dropout stream (no chunks). :meth:`compile_chunks` runs every chunk in one fixed shape through
    ``torch.compile``."""

    def __init__(self, chunk_size: int | None = None, keyed: bool = True, chunk_tokens: int | None = None):
        if (chunk_size or chunk_tokens) and not keyed:
            raise ValueError("gradient caching replays keyed dropout only")
        self.chunk_size, self.keyed, self.chunk_tokens = chunk_size, keyed, chunk_tokens
        self.seed: torch.Tensor | None = None  # the step's seed, [1] int64 (on the step's device)
        self.calls = 0
        self.sentences, self.offset, self._tokens = 0, 0, []
        self.cached: list[_Run] = []
        self.largest = 0  # the most rows a run of this (micro-)batch had (what a halving after an OOM halves)
        self.compiled: dict | None = None  # torch.compile's arguments for the chunks (None: eager chunks)
        self.width: int | None = None  # the tokens a compiled chunk's rows are padded to
        self.graphs: dict = {}  # each run's function, compiled once

    def compile_chunks(self, width: int | None, **compile_kwargs) -> None:
        """Run every chunk through ``torch.compile(**compile_kwargs)`` (one function a network, its
        keys an input) in one fixed shape: ``chunk rows x width`` tokens, the last chunk's rows
        padded with copies of its last row and every row's tokens with padding (masked), both cut
        from the outputs, so they are out of the loss and carry no gradient. One graph a network and
        grad mode (the first pass runs without one), replayed at every chunk. None: eager chunks."""
        self.compiled, self.width, self.graphs = (None if compile_kwargs.get("disable") else compile_kwargs), width, {}

    @property
    def chunked(self) -> bool:
        return bool(self.chunk_size or self.chunk_tokens)

    def rows_a_chunk(self, width: int) -> int:
        """Rows of a chunk of a run whose rows have ``width`` tokens (a compiled chunk's: its fixed width)."""
        return memory.rows_a_chunk(self.chunk_size, self.chunk_tokens, self.width or width)

    def begin(self, sentences: int, offset: int = 0, device: torch.device | str = "cpu") -> None:
        """A micro-batch starts: ``sentences`` of this process, starting at ``offset`` in the
        global batch; the step's seed is drawn from torch's generator (on the CPU) and copied to
        ``device`` (no read back: the keys are computed there)."""
        self.seed = None
        if self.keyed:
            self.seed = to_device({"seed": torch.randint(-(2 ** 62), 2 ** 62, (1,))}, device)["seed"]
        self.calls, self.sentences, self.offset, self.cached = 0, sentences, offset, []
        self._tokens = []  # what the encoder ran in this (micro-)batch: lengths tensors (host) or counts
        self.largest = 0

    def part(self, sentences: int, offset: int) -> None:
        """An accumulated part of the (micro-)batch starts (a per-sentence objective's micro-batch,
        :meth:`cselab.training.loop.Trainer.step`): its ``sentences`` at ``offset`` in the global
        batch, under the step's seed, its runs numbered from the first again, so each row gets the
        keys (the dropout) it has in the whole batch."""
        self.calls, self.sentences, self.offset, self.cached = 0, sentences, offset, []

    def count_tokens(self, lengths: torch.Tensor | int) -> None:
        """Record an encoder run's real tokens (its rows' lengths on the host, or a count), read
        by :attr:`tokens` outside the step (a compiled step reads no tensor)."""
        self._tokens.append(lengths)

    @property
    def tokens(self) -> int:
        """Real tokens the encoder ran in this (micro-)batch (the MFU diagnostic's work)."""
        return sum(t if isinstance(t, int) else host_sum(t) for t in self._tokens)

    def row_keys(self, rows: int, device: torch.device) -> torch.Tensor:
        """One key per row of the next run: ``rows`` is a whole number of views of the micro-batch
        (view-major, as every method lays them out), else each row keys by its index."""
        call, self.calls = self.calls, self.calls + 1
        return keyed_ops.row_keys(self.seed.to(device), call, rows, self.sentences, self.offset)

    def run(self, fn: Callable, *inputs: Any, **kwargs) -> Any:
        """``fn(*inputs, **kwargs)`` under keyed dropout; ``inputs`` with one row per leading
        index are the rows (chunked together); the outputs have one row per input row."""
        if self.seed is None:  # outside a training step (a method called directly): torch's dropout
            return fn(*inputs, **kwargs)
        rows = inputs[0].size(0)
        self.largest = max(self.largest, rows)
        keys = self.row_keys(rows, inputs[0].device)
        width = inputs[0].size(1) if inputs[0].dim() > 1 else 1
        if not self.chunked or rows <= self.rows_a_chunk(width) or not torch.is_grad_enabled():
            with keyed.keys(keys):
                return fn(*inputs, **kwargs)
        return self._first_pass(fn, inputs, kwargs, rows, keys)

    def _parts(self, run: _Run) -> list[slice]:
        size = self._size(run)
        return [slice(s, min(s + size, run.rows)) for s in range(0, run.rows, size)]

    def _chunk(self, run: _Run, part: slice) -> tuple:
        """The outputs of ``run``'s rows ``part``: eager, or compiled in the fixed shape (:meth:`compile_chunks`)."""
        inputs = tuple(_slice(x, run.rows, part) for x in run.inputs)
        if self.compiled is None:
            with keyed.keys(run.keys[part]):
                return _as_tuple(run.fn(*inputs, **run.kwargs))
        real, size = part.stop - part.start, self._size(run)
        width = run.inputs[0].size(1) if run.inputs[0].dim() > 1 else None
        graph = self.graphs.get(run.fn)
        if graph is None:
            graph = self.graphs[run.fn] = torch.compile(_keyed_call(run.fn), dynamic=False, **self.compiled)
        if self.compiled.get("mode") == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()  # the previous chunk's outputs are read or copied by now
        keys = _fixed(run.keys[part], real, size, None, None)
        out = graph(keys, *(_fixed(x, real, size, self.width, width) for x in inputs), **run.kwargs)
        return tuple(_cut(o, real, self.width, width) for o in _as_tuple(out))

    def _size(self, run: _Run) -> int:
        """Rows a chunk of ``run``."""
        return self.rows_a_chunk(run.inputs[0].size(1) if run.inputs[0].dim() > 1 else 1)

    def _first_pass(self, fn, inputs, kwargs, rows, keys):
        run = _Run(fn, inputs, kwargs, rows, keys, [], ())
        outs = []
        with torch.no_grad():
            for part in self._parts(run):
                run.rng.append(_rng_state())
                outs.append(self._chunk(run, part))
        run.outputs = tuple(torch.cat(column).requires_grad_(column[0].is_floating_point()) for column in zip(*outs))
        self.cached.append(run)
        return run.outputs if len(run.outputs) > 1 else run.outputs[0]

    def backward(self, loss: torch.Tensor, backward: Callable[..., None]) -> None:
        """Back-propagate ``loss`` (``backward(loss, retain_graph=...)``: the run's precision),
        then replay the cached runs, latest first, chunk by chunk."""
        if not self.cached:
            backward(loss)
            return
        backward(loss, retain_graph=True)
        after = _rng_state()
        for run in reversed(self.cached):
            grads = [leaf.grad for leaf in run.outputs]
            for part, rng in zip(self._parts(run), run.rng):
                self._replay(run, part, rng, grads)
        _set_rng_state(after)
        self.cached = []

    def _replay(self, run: _Run, part: slice, rng: tuple, grads: list) -> None:
        """One chunk again, with a graph, and its cached gradient back-propagated; the chunk's
        graph is freed on return (the loss's graph is retained: later chunks may pass through it)."""
        _set_rng_state(rng)
        out = self._chunk(run, part)
        pairs = [(o, g[part]) for o, g in zip(out, grads) if g is not None]
        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs], retain_graph=True)


def _keyed_call(fn: Callable) -> Callable:
    """``fn(*inputs)`` under the row keys given as its first input (what a compiled chunk runs: the
    keys are a graph input, not a global the graph would be specialised on)."""

    def call(keys: torch.Tensor, *inputs, **kwargs):
        with keyed.keys(keys):
            return fn(*inputs, **kwargs)

    return call


def _fixed(x: Any, real: int, size: int, width: int | None, tokens: int | None) -> Any:
    """A chunk's input in the fixed shape: its ``real`` rows padded to ``size`` with copies of the
    last (finite, valid rows: their outputs are cut and get no gradient), and a token matrix
    (integer ids, masks) of ``tokens`` columns padded to ``width`` with zeros (masked)."""
    if not isinstance(x, torch.Tensor) or not x.dim() or x.size(0) != real:
        return x
    if size > real:
        x = torch.cat([x, x[-1:].expand(size - real, *x.shape[1:])])
    if width and tokens and x.dim() == 2 and not x.is_floating_point() and x.size(1) == tokens < width:
        x = torch.nn.functional.pad(x, (0, width - tokens))
    return x


def _cut(out: torch.Tensor, real: int, width: int | None, tokens: int | None) -> torch.Tensor:
    """A compiled chunk's output back to its real rows (and per-token outputs to the run's tokens),
    copied out of the compiled function's memory (CUDA graphs reuse it at the next replay)."""
    out = out[:real]
    if width and tokens and tokens < width and out.dim() >= 3 and out.size(1) == width:
        out = out[:, :tokens]
    return out.clone()
