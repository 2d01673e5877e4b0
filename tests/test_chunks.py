"""Gradient caching (``training.chunk_size``) is the full-batch step: for every method and
auxiliary, with dropout on, the chunked step's loss and every parameter's gradient equal the
unchunked step's, at chunk sizes that do and do not divide the batch; in the training loop,
2 processes chunked equal 1 process unchunked, and a resumed chunked run equals an
uninterrupted one. Dropout is keyed by row (:mod:`cselab.models.keyed`), so the masks of a
sentence do not depend on which chunk or process encodes it."""

import pytest
import torch

from cselab.models import keyed
from cselab.models.encoder import load_encoder
from cselab.training.loop import train
from cselab.training.methods import registry
from cselab.training.objective import build_objective
from tests.helpers import make_corpus, make_tiny_generator, training_defaults
from tests.test_distributed import run
from tests.test_resume import Crash, assert_same_weights, crash_at, curve_rows, probe_dev
from tests.test_train import spec_for

SENTENCES = ["a man plays a guitar on the street .", "the dog runs fast in the park .", "hello world",
             "it rains all day in the city .", "two women are talking about the weather .",
             "she reads a long book about the history of the north .", "a cat sleeps .",
             "the children play football after school on a sunny afternoon ."]

#: (primary, its options, auxiliaries): every method and auxiliary; ``GEN`` stands for the generator
CASES = {
    "simcse": ("simcse", {}, {}),
    "simcse-batchnorm": ("simcse", {"head": "batchnorm"}, {}),
    "compcse-z+": ("compcse", {"compose": "z+"}, {}),
    "compcse-both": ("compcse", {"compose": "both", "aggregation": "avg"}, {}),
    "compcse-per-part": ("compcse", {"aggregation": "concat_project", "head_placement": "per_part"}, {}),
    **{f"paradigm-{loss}": ("paradigm", {"loss": loss}, {})
       for loss in ("infonce", "arccon", "mpt", "met", "mat", "paradigm", "barlowtwins", "vicreg", "mhe", "mhs")},
    "simcse_edits": ("simcse_edits", {"generator": "GEN"}, {}),
    "rtd": ("simcse", {"head": "batchnorm"}, {"rtd": {"weight": 0.005, "options": {"generator": "GEN"}}}),
    "cmlm": ("simcse", {}, {"cmlm": {"weight": 0.1, "options": {}}}),
    "corrective_lm": ("simcse", {}, {"corrective_lm": {"weight": 0.1, "options": {"generator": "GEN"}}}),
    "infocse_mlm": ("simcse", {"head": "batchnorm"},
                    {"infocse_mlm": {"weight": 0.1, "options": {"pretrained": False, "views": 2}}}),
    "infocse_mlm-undetached": ("simcse", {"head": "batchnorm"}, {"infocse_mlm": {"weight": 0.1, "options": {
        "pretrained": False, "views": 2, "detach": False}}}),  # Table 6: the lower copy trains
    "infocse_mlm-lower-dropout": ("simcse", {"head": "batchnorm"}, {"infocse_mlm": {"weight": 0.1, "options": {
        "pretrained": False, "views": 2, "lower_dropout": True}}}),  # BERT-large's frozen copy, dropout on
    "infocse_pretrain": ("infocse_pretrain", {}, {}),
}


def default_case(method) -> tuple[str, dict, dict]:
    """A registered method no case above names, at its default options (``generator`` the tiny
    generator): primary on its own, or an auxiliary of SimCSE."""
    import dataclasses

    options = {f.name: "GEN" for f in dataclasses.fields(method.Options) if f.name == "generator"}
    if "primary" in method.roles:
        return method.name, options, {}
    return "simcse", {}, {method.name: {"weight": 0.1, "options": options}}


#: every method of cselab/training/methods has a case: a new one is covered at its defaults
#: without a line here (the tests' own toy methods are not)
CASES.update({name: default_case(method) for name, method in sorted(registry().items())
              if method.__module__.startswith("cselab.")
              and all(name != primary and name not in auxiliaries for primary, _, auxiliaries in CASES.values())})


@pytest.fixture(scope="module")
def generator(tiny_bert, tmp_path_factory):
    return make_tiny_generator(tmp_path_factory.mktemp("generator"), tiny_bert)


def with_generator(options: dict, generator) -> dict:
    return {k: str(generator) if v == "GEN" else v for k, v in options.items()}


def one_step(tiny_bert, generator, case: str, chunk_size: int | None, unpadded: bool = True,
             compiled: dict | None = None, double: bool = False, **training):
    """The loss and every parameter's gradient of one training step on ``SENTENCES`` (dropout
    on, the same torch seed), the way the loop runs it; ``compiled``: the chunks compiled in their
    fixed shape (32 tokens) with these ``torch.compile`` arguments, the encoder's static shapes on,
    as a compiled step runs them; ``double``: every network in float64."""
    primary, options, auxiliaries = CASES[case]
    auxiliaries = {k: {**a, "options": with_generator(a["options"], generator)} for k, a in auxiliaries.items()}
    torch.manual_seed(0)
    encoder = load_encoder(tiny_bert)
    spec = {"objective": primary, "weight": 1.0, "options": with_generator(options, generator),
            "auxiliaries": auxiliaries, "training": training_defaults(chunk_size=chunk_size, unpadded=unpadded,
                                                                      **training)}
    objective = build_objective(spec, encoder, {}, tiny_bert)
    encoder.train(), objective.train()
    if double:
        encoder.double(), objective.double()
    if compiled is not None:
        objective.runner.compile_chunks(32, **compiled)
        encoder.static_shapes = True
    ids = encoder.tokenize(SENTENCES, 32)
    batch = {**encoder.pad(ids), "index": torch.arange(len(ids)), "lengths": torch.tensor([len(i) for i in ids])}
    torch.manual_seed(1)
    with torch.no_grad():
        batch = objective.prepare(batch)
    objective.runner.begin(len(ids))
    loss, _, _ = objective(batch)
    objective.runner.backward(loss, lambda x, retain_graph=False: x.backward(retain_graph=retain_graph))
    named = [*encoder.named_parameters(), *objective.named_parameters()]
    return loss.item(), {name: p.grad.clone() for name, p in named if p.grad is not None}


def assert_same_gradients(a: dict, b: dict) -> None:
    """Every gradient within 1e-5 relative (of its own norm, plus 1e-6 of the largest gradient:
    some gradients are exactly 0 in exact math, e.g. attention's key bias, and float noise)."""
    assert a.keys() == b.keys() and a
    scale = max(g.norm().item() for g in a.values())
    for name, g in a.items():
        err = (g - b[name]).norm().item()
        assert err <= 1e-5 * g.norm().item() + 1e-6 * scale, f"{name}: {err} (norm {g.norm().item()})"


@pytest.mark.parametrize("case", sorted(CASES))
def test_chunked_step_is_the_full_batch_step(tiny_bert, generator, case):
    """fp32: the loss to 1e-6, every gradient within 1e-5 of its norm, and no gradient element
    off by more than 1e-5 (of the largest gradient, where gradients exceed 1: the tiny model's
    BatchNorm and MLM heads reach 10-80, and fp32 rounds those to about 1e-6 of them)."""
    loss, grads = one_step(tiny_bert, generator, case, None)
    largest = max(g.abs().max().item() for g in grads.values())
    for chunk_size in (3, 4):  # 16 rows of two views: 3 does not divide them, 4 does
        chunked_loss, chunked = one_step(tiny_bert, generator, case, chunk_size)
        assert chunked_loss == pytest.approx(loss, rel=1e-6), chunk_size
        assert_same_gradients(grads, chunked)
        worst = max((g - chunked[name]).abs().max().item() for name, g in grads.items())
        print(f"{case}, chunks of {chunk_size}: max abs gradient difference {worst:.2e} (largest gradient "
              f"{largest:.2e})")
        assert worst <= 1e-5 * max(1.0, largest), (chunk_size, worst, largest)


@pytest.mark.parametrize("case", sorted(CASES))
def test_chunked_step_is_the_full_batch_step_to_float64_rounding(tiny_bert, generator, case):
    """The fp32 differences above are rounding: in float64 every gradient of the chunked step
    (chunks of 3, which do not divide the batch) equals the whole batch's to 1e-12 absolute, also
    where gradients reach 10-80 (measured: at most 9.1e-14)."""
    loss, grads = one_step(tiny_bert, generator, case, None, double=True)
    chunked_loss, chunked = one_step(tiny_bert, generator, case, 3, double=True)
    assert all(g.dtype == torch.float64 for g in grads.values())
    assert chunked_loss == pytest.approx(loss, rel=1e-12, abs=1e-12)
    worst = max((g - chunked[name]).abs().max().item() for name, g in grads.items())
    assert worst <= 1e-12, worst


def test_chunks_by_a_token_budget_are_the_full_batch_step(tiny_bert, generator, monkeypatch):
    """``chunk_tokens``: as many rows a chunk as fit the budget at the run's width (SENTENCES pad to
    14 tokens: 45 tokens are chunks of 3 rows), the full batch's gradients."""
    from cselab.training import chunks

    sizes, original = [], chunks.Runner._parts
    monkeypatch.setattr(chunks.Runner, "_parts", lambda self, run: sizes.append(self._size(run)) or original(self, run))
    loss, grads = one_step(tiny_bert, generator, "simcse", None)
    chunked_loss, chunked = one_step(tiny_bert, generator, "simcse", None, chunk_tokens=45)
    assert sizes and set(sizes) == {3}, sizes
    assert chunked_loss == pytest.approx(loss, rel=1e-6)
    assert_same_gradients(grads, chunked)


def test_padded_forward_chunks_alike(tiny_bert, generator):
    """Hugging Face's padded forward: the same masks per row (keyed), so chunks change nothing."""
    loss, grads = one_step(tiny_bert, generator, "compcse-both", None, unpadded=False)
    chunked_loss, chunked = one_step(tiny_bert, generator, "compcse-both", 3, unpadded=False)
    assert chunked_loss == pytest.approx(loss, rel=1e-6)
    assert_same_gradients(grads, chunked)


def test_dropout_is_on_and_keyed_by_row(tiny_encoder):
    """Dropout acts (two views differ), a row's masks do not depend on the rows beside it, and the
    same keys give the same masks."""
    ids = tiny_encoder.tokenize(SENTENCES, 32)
    batch = tiny_encoder.pad(ids)
    tiny_encoder.train()
    keyed.install(tiny_encoder, "encoder")
    keys = keyed.mix(torch.arange(len(ids)))
    with keyed.keys(keys):
        full = tiny_encoder(batch["input_ids"], batch["attention_mask"])
        again = tiny_encoder(batch["input_ids"], batch["attention_mask"])
    with keyed.keys(keys[2:5]):
        part = tiny_encoder(batch["input_ids"][2:5], batch["attention_mask"][2:5])
    with keyed.keys(keys + 1):
        other = tiny_encoder(batch["input_ids"], batch["attention_mask"])
    torch.testing.assert_close(full, again, rtol=0, atol=0)
    torch.testing.assert_close(part, full[2:5], rtol=1e-5, atol=1e-6)
    assert (full - other).abs().max() > 1e-2


def test_two_processes_chunked_equal_one_unchunked(tiny_bert, tmp_path):
    """Global batch 8 on 2 processes, chunks of 3 of each shard's 8 rows, dropout on: the same
    losses and the same averaged gradient at every step as 1 process without chunks."""
    corpus = make_corpus(tmp_path / "corpus.txt", 40)
    base = dict(batch_size=8, max_steps=3, eval_steps=None, log_steps=1, lr=1e-4, unpadded=False)
    one = run(spec_for(tiny_bert, "simcse", {"head": "batchnorm"}, **base), corpus, tmp_path / "one", devices=1,
              entry="tests.test_distributed:recording_gradients")
    two = run(spec_for(tiny_bert, "simcse", {"head": "batchnorm"}, chunk_size=3, **base), corpus, tmp_path / "two",
              devices=2, entry="tests.test_distributed:recording_gradients")
    losses = [[r["loss"] for r in res.curve if "loss" in r] for res in (one, two)]
    assert len(losses[0]) == 3 and losses[0] == pytest.approx(losses[1], rel=1e-5)
    grads = [torch.load(tmp_path / name / "grads.pt") for name in ("one", "two")]
    a, b = grads[0][0], grads[1][0]  # the first step: the same parameters, so pure math
    assert_same_gradients({i: g for i, g in enumerate(a) if g is not None},
                          {i: g for i, g in enumerate(b) if g is not None})


def test_chunks_combine_with_accumulation(tiny_bert, tmp_path):
    """Micro-batches of 4 (accumulation 2), each chunked by 3: the unchunked accumulated step."""
    corpus = make_corpus(tmp_path / "corpus.txt", 40)
    base = dict(batch_size=8, max_steps=2, eval_steps=None, log_steps=1, accumulation_steps=2)
    one = train(spec_for(tiny_bert, "compcse", {"partitions": 2}, **base), corpus, probe_dev, tmp_path / "one")
    two = train(spec_for(tiny_bert, "compcse", {"partitions": 2}, chunk_size=3, **base), corpus, probe_dev,
                tmp_path / "two")
    assert [r["loss"] for r in one.curve if "loss" in r] == pytest.approx(
        [r["loss"] for r in two.curve if "loss" in r], rel=1e-5)


def test_resumed_chunked_run_equals_an_uninterrupted_one(tiny_bert, tmp_path):
    spec = spec_for(tiny_bert, "simcse", chunk_size=3, max_steps=None, eval_steps=3, eval_at_end=True, log_steps=1,
                    checkpoint_steps=2)
    corpus = make_corpus(tmp_path / "corpus.txt", 80)
    reference = train(spec, corpus, probe_dev, tmp_path / "ref")
    out = tmp_path / "out"
    with pytest.raises(Crash):
        train(spec, corpus, probe_dev, out, on_log=crash_at(5), checkpoint_dir=out / "resume")
    resumed = train(spec, corpus, probe_dev, out, checkpoint_dir=out / "resume")
    assert resumed.resumed_from == 4 and resumed.steps == reference.steps == 10
    assert curve_rows(out) == curve_rows(tmp_path / "ref")
    assert_same_weights(out / "model", tmp_path / "ref" / "model")



#: a network run of each kind: two views (SimCSE), the parts (CompCSE), a second network reading
#: the sentence embedding (RTD's discriminator, InfoCSE's auxiliary network), per-token outputs
#: (InfoCSE's stage 1)
COMPILED_CASES = ["simcse", "compcse-both", "rtd", "infocse_mlm", "infocse_pretrain"]


@pytest.mark.parametrize("case", COMPILED_CASES)
def test_compiled_chunks_in_one_fixed_shape_are_the_eager_and_the_full_batch_step(tiny_bert, generator, case):
    """Chunks compiled in their fixed shape (3 rows x 32 tokens: the last chunk's rows and every
    row's tokens padded, then cut) give the eager chunked step's and the full batch's loss and
    gradients (dynamo's graphs, run by aot_eager: inductor's C++ build of every case would take many
    minutes on this machine; tests/test_compiled.py trains through inductor)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    loss, grads = one_step(tiny_bert, generator, case, None)
    _, eager = one_step(tiny_bert, generator, case, 3)
    torch._dynamo.reset()
    counters.clear()
    compiled_loss, compiled = one_step(tiny_bert, generator, case, 3, compiled={"backend": "aot_eager"})
    assert counters["stats"]["unique_graphs"] >= 2  # the chunks ran compiled: without and with a graph
    assert compiled_loss == pytest.approx(loss, rel=1e-6)
    largest = max(g.abs().max().item() for g in grads.values())
    for reference in (grads, eager):
        assert_same_gradients(reference, compiled)
        worst = max((g - compiled[name]).abs().max().item() for name, g in reference.items())
        assert worst <= 1e-5 * max(1.0, largest), worst


def test_a_compiled_cached_step_compiles_its_chunks_once(tiny_bert, tmp_path, monkeypatch, capsys):
    """``training.compile`` with gradient caching (SimCSE, batch 8 in chunks of 4 rows, max_len 16),
    22 steps of sentences of varying lengths (batches whose longest sentence pads to 8 and to 16
    tokens; a compiled step builds every batch 16 wide): the chunks' graphs (one without a graph,
    one with) and the optimizer update's are made in the first step and none after it, with no
    graph break but torch's optimizer step's own; the aten ops dispatched outside the compiled
    regions (the chunks' forward and backward, the update) are counted over steps 3-22 and
    reported. dynamo's graphs run by aot_eager (inductor's C++ build takes minutes here; with it
    the same graphs and ops were counted, docs/speed.md)."""
    import torch._dynamo
    from torch._dynamo.utils import counters
    from torch.utils._python_dispatch import _disable_current_modes

    from cselab.training import chunks
    from tests.test_step_cost import OpCounter

    real_compile, real_backward = torch.compile, torch.autograd.backward

    def outside_counting(fn):
        def call(*args, **kwargs):
            with _disable_current_modes():  # a compiled region: not counted
                return fn(*args, **kwargs)
        return call

    def compile_(fn, mode=None, **kwargs):
        return outside_counting(real_compile(fn, backend="aot_eager", **kwargs))

    monkeypatch.setattr(torch, "compile", compile_)
    monkeypatch.setattr(torch.autograd, "backward", outside_counting(real_backward))  # the replays' compiled backward
    widths, run = set(), chunks.Runner.run  # (the batch's width, its longest sentence's tokens, rounded up to 8)
    monkeypatch.setattr(chunks.Runner, "run", lambda self, fn, *a, **k: widths.add(
        (a[0].size(1), -(-int(a[2].max()) // 8) * 8)) or run(self, fn, *a, **k))
    torch._dynamo.reset()
    counters.clear()
    graphs, counter = {}, OpCounter()

    def on_log(row):
        if "loss" not in row:  # the first STS-B dev score
            return
        graphs[row["step"]] = counters["stats"]["unique_graphs"]
        if row["step"] == 2:
            counter.__enter__()
        if row["step"] == 22:
            counter.__exit__(None, None, None)

    corpus = tmp_path / "corpus.txt"  # 1 sentence in 10 long: some batches of 8 are all short (width 8)
    words = "the dog runs fast in the park on a sunny day after school with friends".split()
    corpus.write_text("".join(" ".join(words[i % 5:i % 5 + (12 if i % 10 == 0 else 3)]) + f" {i} .\n"
                              for i in range(8 * 22)))
    spec = spec_for(tiny_bert, "simcse", chunk_size=4, max_steps=22, eval_steps=None, log_steps=1, dropout=0.1,
                    compile=True)
    train(spec, corpus, lambda encoder: 0.0, tmp_path / "out", device="cpu", on_log=on_log)
    assert widths == {(16, 8), (16, 16)}, widths  # the sentences' lengths vary; every batch is 16 wide
    # the chunks' two and the optimizer update's, all in the first step, none after it
    assert graphs[1] >= 3 and set(graphs.values()) == {graphs[1]}, graphs
    # none but the two torch's optimizer step makes around itself (its grad mode)
    assert not [k for k in counters["graph_break"] if "graph_break()" not in k], dict(counters["graph_break"])
    per_step = sum(counter.ops.values()) / 20
    with capsys.disabled():
        print(f"\ncompiled cached step: {per_step:.0f} aten ops a step outside the compiled chunks; most: "
              f"{counter.ops.most_common(4)}")
    assert per_step < 300  # the loss, the chunks' slices and outputs (the optimizer's update is compiled too)
