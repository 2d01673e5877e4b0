"""``training.chunk_size: auto``: how a step's batch runs in a device's memory, decided before the
run starts, from the model's shape, the batch's tokens and the device's memory. Imports no torch:
the cost plan (:mod:`cselab.pipeline.cost`) decides the same way, from a rates table's
``device_memory_gb``.

- On the CPU (no device memory to plan) ``auto`` never chunks: the batch runs whole.
- On a GPU the batch runs whole where its step fits; else, for an objective whose loss is a sum
  over sentences (every method of it declares ``per_sentence``), in accumulated micro-batches of
  the most sentences that fit (one forward each, :meth:`cselab.training.loop.Trainer.step`);
  for any other, in gradient-cached chunks of the most rows that fit (:mod:`cselab.training.chunks`).
- An integer keeps its meaning (rows a network run; for a per-sentence objective, the sentences
  of a micro-batch), null runs the batch whole.

A step's memory (an estimate; the first step's peak is logged beside it): 16 bytes a trained
parameter (fp32 weights, gradients, AdamW's two moments), plus the activations the backward keeps:
a transformer layer's per token ``18 h + 4 i + 5 a s`` bytes in 16-bit precision, twice that in
fp32 (Korthikanti et al., 2022, "Reducing Activation Recomputation in Large Transformer Models",
section 4.1: ``s b h (34 + 5 a s / h)`` a layer, ``i = 4 h``; ``a`` heads of 64, ``s`` tokens), and
a vocabulary-wide MLM head's logits (16-bit, their fp32 copy and its gradient), for the layers and
heads each sentence runs (:class:`Footprint`, declared by each method). Of the device's free
memory, :data:`USABLE` is planned: the rest is for the allocator's fragmentation, cuBLAS
workspaces and CUDA graphs' pools.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cselab.errors import ConfigError

#: the share of the device's free memory a step is planned to use
USABLE = 0.8
#: device bytes a trained parameter holds: fp32 weights, gradients and AdamW's two moments
PARAMETER_BYTES = 16
#: bytes an activation element takes by ``training.precision`` (autocast keeps 16-bit activations)
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


@dataclass(frozen=True)
class Footprint:
    """What one sentence costs a training step, declared by a method for its options
    (``MethodConfig.footprint``) and summed over an experiment's methods: ``layers`` transformer
    layers run with a graph (SimCSE: two views through the encoder's L layers, 2 L), ``vocab``
    vocabulary-wide logits a token (an MLM head over every position: 1 a view), ``parameters``
    trained parameters besides the encoder's, as a share of the encoder's (a second copy of it: 1)."""

    layers: float = 0.0
    vocab: float = 0.0
    parameters: float = 0.0

    def __add__(self, other: "Footprint") -> "Footprint":
        return Footprint(self.layers + other.layers, self.vocab + other.vocab, self.parameters + other.parameters)


@dataclass(frozen=True)
class Model:
    """The shape a step's memory is estimated from (a Hugging Face config's sizes)."""

    layers: int
    hidden: int
    intermediate: int
    vocab: int
    parameters: int

    @property
    def heads(self) -> int:
        return max(1, self.hidden // 64)


@dataclass(frozen=True)
class StepPlan:
    """How a step runs its batch: ``chunk_size`` rows a network run (gradient caching; None:
    whole), or ``micro_batch`` sentences an accumulated micro-batch (a per-sentence objective;
    None: whole), and why (for the log)."""

    chunk_size: int | None = None
    micro_batch: int | None = None
    reason: str = "the batch runs whole"
    chunk_tokens: int | None = None  # gradient caching by a token budget (training.chunk_tokens)
    per_sentence: bool = False  # the objective's loss is a sum over sentences (micro-batches, not chunks)
    estimate_bytes: float = math.nan  # the estimated peak of the step as planned
    available_bytes: float = math.nan  # the device memory it was planned in


def layer_bytes(model: Model, tokens: int, precision: str) -> float:
    """Activation bytes one token keeps through one transformer layer of ``model``, in rows of
    ``tokens`` tokens."""
    half = ELEMENT_BYTES[precision] / 2
    return half * (18 * model.hidden + 4 * model.intermediate + 5 * model.heads * tokens)


def vocab_bytes(model: Model, precision: str) -> float:
    """Bytes one token's vocabulary-wide logits keep: 16-bit (or fp32) logits, their fp32 copy
    for the loss and its gradient."""
    return model.vocab * (ELEMENT_BYTES[precision] + 8)


def sentence_bytes(model: Model, footprint: Footprint, tokens: int, precision: str) -> float:
    """Activation bytes one sentence of ``tokens`` tokens keeps in a step."""
    return tokens * (footprint.layers * layer_bytes(model, tokens, precision)
                     + footprint.vocab * vocab_bytes(model, precision))


def plan_step(setting: int | str | None, per_sentence: bool, model: Model | None, footprint: Footprint,
              sentences: int, tokens: int, precision: str, device_bytes: float | None, what: str = "the model",
              can_chunk: bool = True, chunk_tokens: int | None = None) -> StepPlan:
    """The :class:`StepPlan` of ``training.chunk_size`` = ``setting`` for a step of ``sentences``
    sentences (this process's micro-batch) of at most ``tokens`` tokens, on a device with
    ``device_bytes`` free (None: the CPU, where ``auto`` runs whole). A batch that does not fit
    even one row at a time (or at all, where chunks cannot run: ``can_chunk`` False, torch's own
    dropout) raises one ConfigError naming ``what`` (the model), the batch, the device's memory and
    the setting to change. ``chunk_tokens`` (``training.chunk_tokens``) wins over ``setting``:
    chunks of that many tokens (a per-sentence objective's micro-batches of that many at ``tokens`` a row)."""
    if chunk_tokens:
        rows = max(1, chunk_tokens // tokens)
        if per_sentence:
            return StepPlan(micro_batch=rows, per_sentence=True,
                            reason=f"micro-batches of {rows} sentences (training.chunk_tokens {chunk_tokens})")
        return StepPlan(chunk_tokens=chunk_tokens, reason=f"chunks of {chunk_tokens} tokens (training.chunk_tokens)")
    if setting is None or setting == "auto" and not device_bytes:
        return StepPlan(per_sentence=per_sentence)
    if setting != "auto":
        if per_sentence:
            return StepPlan(micro_batch=setting, per_sentence=True,
                            reason=f"micro-batches of {setting} sentences (training.chunk_size)")
        return StepPlan(chunk_size=setting, reason=f"chunks of {setting} rows (training.chunk_size)")
    budget = USABLE * device_bytes - PARAMETER_BYTES * model.parameters * (1 + footprint.parameters)
    sentence = sentence_bytes(model, footprint, tokens, precision)
    if sentences * sentence <= budget:
        return StepPlan(reason="the batch fits whole", per_sentence=per_sentence, estimate_bytes=sentences * sentence,
                        available_bytes=device_bytes)
    if not can_chunk:
        raise too_large(what, sentences, tokens, device_bytes, "whole (chunks need training.keyed_dropout: true)")
    if per_sentence:
        fits = int(budget // sentence) if budget > 0 else 0
        if fits >= 1:
            fits = fits // 8 * 8 or fits
            return StepPlan(micro_batch=fits, per_sentence=True, reason=f"micro-batches of {fits} sentences fit",
                            estimate_bytes=fits * sentence, available_bytes=device_bytes)
    else:
        row = tokens * model.layers * layer_bytes(model, tokens, precision)  # one encoder row's run at a time
        kept = sentences * tokens * footprint.vocab * vocab_bytes(model, precision)  # the loss's heads: whole batch
        fits = int((budget - kept) // row) if budget - kept > 0 else 0
        if fits >= 1:
            fits = fits // 8 * 8 or fits
            return StepPlan(chunk_size=fits, reason=f"chunks of {fits} rows fit", estimate_bytes=kept + fits * row,
                            available_bytes=device_bytes)
    raise too_large(what, sentences, tokens, device_bytes)


def too_large(what: str, sentences: int, tokens: int, device_bytes: float | None,
              how: str = "even one row at a time (training.chunk_size)") -> ConfigError:
    """The one message of a batch that fits the device not even one row at a time (``device_bytes``
    None: the device's free memory is not known, the CPU's)."""
    memory = "memory" if device_bytes is None else f"{device_bytes / 1e9:.1f} GB of free memory"
    return ConfigError(f"training: a batch of {sentences} sentences of up to {tokens} tokens on {what} does not fit "
                       f"the device's {memory} {how}; lower training.batch_size or training.max_len, or train on a "
                       "device with more memory")


def objective_memory(components, layers: int) -> tuple[bool, Footprint]:
    """(whether the objective is per sentence, its :class:`Footprint`) for ``components``, pairs of
    a method's declaration (``MethodConfig``) and its checked options: per sentence when every
    method is (``MethodConfig.per_sentence_problem``), the footprints summed."""
    total, per_sentence = Footprint(), True
    for cls, options in components:
        total = total + cls.footprint(options, layers)
        per_sentence = per_sentence and cls.per_sentence_problem(options) is None
    return per_sentence, total


def model_of_config(config: dict) -> Model:
    """The :class:`Model` of a Hugging Face ``config.json`` (BERT-style keys; DistilBERT's too),
    its parameters counted as BERT's: embeddings, layers, pooler."""
    h = config.get("hidden_size", config.get("dim"))
    layers = config.get("num_hidden_layers", config.get("n_layers"))
    i = config.get("intermediate_size", config.get("hidden_dim", 4 * h))
    vocab, positions = config["vocab_size"], config.get("max_position_embeddings", 512)
    parameters = (vocab + positions + 2) * h + layers * (4 * h * h + 2 * h * i + 9 * h + i) + h * h + h
    return Model(layers, h, i, vocab, parameters)


def rows_a_chunk(chunk_size: int | None, chunk_tokens: int | None, width: int) -> int | None:
    """Rows of a gradient-cached chunk whose rows have ``width`` tokens: as many as
    ``chunk_tokens`` holds (at least one), else ``chunk_size`` (None: no chunks)."""
    if chunk_tokens:
        return max(1, chunk_tokens // width)
    return chunk_size


def tokens_of(max_len: int) -> int:
    """The longest row a batch may have: ``max_len`` padded to a multiple of 8 (a compiled step's width)."""
    return -(-max_len // 8) * 8
