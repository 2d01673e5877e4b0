"""``training.chunk_size: auto`` (cselab/training/memory.py) and what the loop does with it: the
plan of a step on a device (whole where it fits, the largest chunks or, for a per-sentence
objective, micro-batches that fit; one message where nothing fits), the same step again after an
out-of-memory error in chunks half as large (bit for bit the run that used them from the start),
and per-sentence accumulation (InfoCSE's stage 1), whose gradients are the whole batch's."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import pytest
import torch

from cselab.errors import ConfigError
from cselab.training import memory
from cselab.training.loop import TIMING_FIELDS, train
from cselab.training.methods import method_config, registry
from tests.helpers import make_corpus
from tests.test_resume import probe_dev
from tests.test_train import spec_for

BERT_BASE = memory.Model(layers=12, hidden=768, intermediate=3072, vocab=30522, parameters=110_000_000)
SIMCSE = memory.Footprint(layers=24)
GB = 1e9


# -- the plan -----------------------------------------------------------------------------------


def test_auto_runs_whole_on_the_cpu_and_an_integer_or_null_keep_their_meaning():
    assert memory.plan_step("auto", False, BERT_BASE, SIMCSE, 4096, 32, "fp16", None) == memory.StepPlan()
    assert memory.plan_step(None, False, BERT_BASE, SIMCSE, 4096, 32, "fp16", 80 * GB).chunk_size is None
    assert memory.plan_step(128, False, BERT_BASE, SIMCSE, 1024, 32, "fp16", 80 * GB).chunk_size == 128
    per_sentence = memory.plan_step(128, True, BERT_BASE, SIMCSE, 1024, 32, "fp16", 80 * GB)
    assert (per_sentence.chunk_size, per_sentence.micro_batch) == (None, 128)


def test_auto_runs_whole_where_the_step_fits_else_the_largest_chunks_that_fit():
    whole = memory.plan_step("auto", False, BERT_BASE, SIMCSE, 1024, 32, "fp16", 80 * GB)
    assert whole.chunk_size is None and whole.micro_batch is None and whole.estimate_bytes < 0.8 * 80 * GB
    small = 4 * GB
    chunked = memory.plan_step("auto", False, BERT_BASE, SIMCSE, 1024, 32, "fp16", small)
    budget = memory.USABLE * small - memory.PARAMETER_BYTES * BERT_BASE.parameters
    row = 32 * BERT_BASE.layers * memory.layer_bytes(BERT_BASE, 32, "fp16")
    assert chunked.chunk_size % 8 == 0 and chunked.chunk_size * row <= budget < (chunked.chunk_size + 8) * row
    fp32 = memory.plan_step("auto", False, BERT_BASE, SIMCSE, 1024, 32, "fp32", small)
    assert fp32.chunk_size < chunked.chunk_size  # fp32 activations are twice the size
    micro = memory.plan_step("auto", True, BERT_BASE, SIMCSE, 1024, 32, "fp16", small)
    sentence = memory.sentence_bytes(BERT_BASE, SIMCSE, 32, "fp16")
    assert micro.chunk_size is None and micro.micro_batch * sentence <= budget < (micro.micro_batch + 8) * sentence


def test_a_batch_that_fits_not_even_one_row_at_a_time_is_one_message():
    with pytest.raises(ConfigError) as e:
        memory.plan_step("auto", False, BERT_BASE, SIMCSE, 1024, 32, "fp16", 2.2 * GB, what="bert-base-uncased")
    message = str(e.value)
    for part in ("bert-base-uncased", "1024 sentences", "32 tokens", "2.2 GB", "training.batch_size"):
        assert part in message, (part, message)
    with pytest.raises(ConfigError, match="keyed_dropout"):  # no chunks without keyed dropout: whole or nothing
        memory.plan_step("auto", False, BERT_BASE, SIMCSE, 1024, 32, "fp16", 8 * GB, can_chunk=False)


def test_every_method_declares_what_a_sentence_costs():
    """Each method's footprint (cselab/training/methods) at its default options: layers run with
    a graph, vocabulary-wide logits, extra parameters; InfoCSE's stage 1 is the per-sentence one."""
    for name, cls in sorted(registry().items()):
        if not cls.__module__.startswith("cselab."):
            continue
        footprint = cls.footprint(cls.Options(), 12)
        assert footprint.layers > 0 and footprint.vocab >= 0 and footprint.parameters >= 0, name
    assert {n for n, c in registry().items() if c.per_sentence and c.__module__.startswith("cselab.")} == {
        "infocse_pretrain"}


# -- an out-of-memory step runs again in half the chunks -------------------------------------------


def curve(out: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in csv.DictReader((out / "curve.csv").open())]


def saved(out: Path) -> dict[str, torch.Tensor]:
    """Every saved tensor of a run's model folder (the encoder, a head with its BatchNorm statistics,
    a stage's auxiliary network)."""
    from safetensors.torch import load_file

    state = {}
    for path in sorted((out / "model").iterdir()):
        if path.suffix == ".safetensors":
            state.update({f"{path.name}:{k}": v for k, v in load_file(path).items()})
        elif path.suffix == ".pt":
            state.update({f"{path.name}:{k}": v for k, v in torch.load(path).items()})
    return state


def assert_identical(a: Path, b: Path) -> None:
    assert curve(a) == curve(b)
    wa, wb = saved(a), saved(b)
    assert wa.keys() == wb.keys() and wa and all(torch.equal(wa[k], wb[k]) for k in wa)


def out_of_memory_once(monkeypatch, where: str) -> list[int]:
    """The first network run (``forward``) or the first optimizer step (``optimizer``: after the
    step's forward, backward, BatchNorm statistics and logging) raises CUDA's out-of-memory error."""
    from cselab.training import chunks, loop

    target, name = (chunks.Runner, "run") if where == "forward" else (loop.Precision, "step")
    original, calls = getattr(target, name), []

    def out_of_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (injected)")

    def failing(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1 and where == "forward":  # inside the network run, as a real one fails
            return original(self, out_of_memory, *args[1:], **kwargs)
        if len(calls) == 1:
            out_of_memory()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(target, name, failing)
    return calls


@pytest.mark.parametrize("where", ["forward", "optimizer"])
@pytest.mark.parametrize("chunk, halved", [(4, 2), ("auto", 8)])
def test_an_out_of_memory_step_runs_again_in_half_the_chunks(tiny_bert, tmp_path, monkeypatch, caplog, where, chunk,
                                                              halved):
    """SimCSE with a BatchNorm head, batch 8 (16 rows a run), 3 steps: an out-of-memory error in
    the first step (in its first network run, or at its optimizer step, after everything else of it
    ran) halves the chunks (4 -> 2; auto, whole on the CPU -> 8) and runs that step again: the
    curve and every saved tensor (BatchNorm's running statistics too) equal, bit for bit, a run in
    those chunks from the start; one warning."""
    corpus = make_corpus(tmp_path / "corpus.txt", 24)
    base = dict(max_steps=3, eval_steps=3, log_steps=1, dropout=0.1)
    reference = train(spec_for(tiny_bert, "simcse", {"head": "batchnorm"}, chunk_size=halved, **base), corpus,
                      probe_dev, tmp_path / "reference")
    calls = out_of_memory_once(monkeypatch, where)
    with caplog.at_level(logging.WARNING, logger="cselab"):
        retried = train(spec_for(tiny_bert, "simcse", {"head": "batchnorm"}, chunk_size=chunk, **base), corpus,
                        probe_dev, tmp_path / "retried")
    assert len(calls) > 1 and retried.steps == reference.steps == 3
    assert_identical(tmp_path / "retried", tmp_path / "reference")
    warnings = [r.getMessage() for r in caplog.records if "out of device memory" in r.getMessage()]
    assert len(warnings) == 1 and f"chunks of {halved} rows" in warnings[0] and "injected" in warnings[0]


def test_an_out_of_memory_per_sentence_step_halves_its_micro_batches(tiny_bert, tmp_path, monkeypatch, caplog):
    """InfoCSE's stage 1 (per sentence), batch 8 whole on the CPU: after an out-of-memory error the
    step runs in micro-batches of 4, the run of ``chunk_size: 4`` (micro-batches of 4 sentences)
    bit for bit."""
    corpus = make_corpus(tmp_path / "corpus.txt", 24)
    base = dict(max_steps=3, log_steps=1, dropout=0.1, eval_steps=None)
    reference = train(spec_for(tiny_bert, "infocse_pretrain", chunk_size=4, **base), corpus, None,
                      tmp_path / "reference")
    out_of_memory_once(monkeypatch, "forward")
    with caplog.at_level(logging.WARNING, logger="cselab"):
        retried = train(spec_for(tiny_bert, "infocse_pretrain", **base), corpus, None, tmp_path / "retried")
    assert retried.steps == reference.steps == 3
    assert_identical(tmp_path / "retried", tmp_path / "reference")
    assert sum("micro-batches of 4 sentences" in r.getMessage() for r in caplog.records) == 1


def test_a_step_out_of_memory_at_one_row_a_chunk_is_one_message(tiny_bert, tmp_path, monkeypatch):
    from cselab.training import chunks

    original = chunks.Runner.run

    def out_of_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")

    monkeypatch.setattr(chunks.Runner, "run", lambda self, fn, *args, **kw: original(self, out_of_memory, *args, **kw))
    corpus = make_corpus(tmp_path / "corpus.txt", 24)
    with pytest.raises(ConfigError) as e:
        train(spec_for(tiny_bert, "simcse", chunk_size=2, max_steps=2, eval_steps=None), corpus, None, tmp_path / "o")
    assert str(tiny_bert) in str(e.value) and "8 sentences" in str(e.value) and "training.batch_size" in str(e.value)


# -- per-sentence accumulation ----------------------------------------------------------------------


def first_step_gradients(spec: dict, corpus: Path, out: Path, monkeypatch) -> list[torch.Tensor | None]:
    """The gradients of a run's first optimizer step (before clipping and Adam), as the loop made them."""
    from cselab.training import loop

    original, grads = loop.Precision.step, []

    def step(self, optimizer, params, max_grad_norm):
        grads.append([p.grad.detach().clone() if p.grad is not None else None for p in params])
        original(self, optimizer, params, max_grad_norm)

    monkeypatch.setattr(loop.Precision, "step", step)
    train(spec, corpus, None, out)
    monkeypatch.setattr(loop.Precision, "step", original)
    return grads[0]


@pytest.mark.parametrize("name", sorted(n for n, c in registry().items() if c.per_sentence))
def test_accumulated_micro_batches_give_the_whole_batchs_gradients(tiny_bert, tmp_path, monkeypatch, name):
    """Every method that declares its loss per sentence, fp32, dropout on, batch 8: micro-batches of
    3 (3 + 3 + 2 sentences, one forward each, weighted by their share of the loss's units) give
    every parameter's gradient of the whole batch's step within 1e-5 (max abs difference)."""
    corpus = make_corpus(tmp_path / "corpus.txt", 16)
    base = dict(max_steps=1, log_steps=1, dropout=0.1, eval_steps=None, precision="fp32")
    whole = first_step_gradients(spec_for(tiny_bert, name, chunk_size=None, **base), corpus, tmp_path / "whole",
                                 monkeypatch)
    parts = first_step_gradients(spec_for(tiny_bert, name, chunk_size=3, **base), corpus, tmp_path / "parts",
                                 monkeypatch)
    assert len(whole) == len(parts) and sum(g is not None for g in whole) > 0
    worst = max((a - b).abs().max().item() for a, b in zip(whole, parts) if a is not None)
    print(f"{name}: accumulated against whole, max abs gradient difference {worst:.2e}")
    assert all((a is None) == (b is None) for a, b in zip(whole, parts)) and worst <= 1e-5


def test_a_per_sentence_declaration_in_a_composition_that_is_not_is_refused(monkeypatch):
    """When the config is read: a per-sentence method beside one with in-batch terms, and a method
    declaring it with a BatchNorm head, are one message naming the method."""
    from cselab.pipeline import config as cc
    from cselab.training import method_config as mc
    from tests.test_config import ROOT, deep_update
    from tests.helpers import read_yaml

    smoke = deep_update(read_yaml(ROOT / "config.yaml"), read_yaml(ROOT / "configs" / "smoke.yaml"))
    mixed = {"methods": {"mlm-mixed": {"objective": "infocse_pretrain", "auxiliaries": {"cmlm": {"weight": 0.1}}}}}
    with pytest.raises(ConfigError, match=r"methods\.mlm-mixed': method 'infocse_pretrain' declares its loss per "
                                          r"sentence .* but 'cmlm' beside it is not per sentence"):
        cc.validate(deep_update(smoke, mixed))

    import dataclasses

    monkeypatch.setattr(mc, "_CONFIGS", dict(mc._CONFIGS))  # the method below is registered for this test only

    class PerSentenceHead(mc.MethodConfig):  # a plugin's method: per sentence, with a head option
        name = "per_sentence_head"
        per_sentence = True

        @dataclasses.dataclass
        class Options:
            head: str = "mlp"

    bn = {"methods": {"per_sentence_head": {"options": {"head": "batchnorm"}}}}
    with pytest.raises(ConfigError, match=r"method 'per_sentence_head' declares its loss per sentence .* but its "
                                          "BatchNorm head normalises over the batch"):
        cc.validate(deep_update(smoke, bn))
    assert method_config("per_sentence_head").per_sentence_problem(PerSentenceHead.Options()) is None
