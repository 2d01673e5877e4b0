"""The method contract and the methods: InfoNCE (fp32 under autocast), heads, the naive partition
splitter, composition in the authors' order, d0 slicing, frozen networks, parameter groups,
batch preparation, named loss terms and auxiliary objectives."""

import math

import pytest
import torch

from torch import nn

from cselab.data.tokens import TokenizedCorpus, tokenize_corpus
from cselab.errors import ConfigError
from cselab.models.heads import make_head
from cselab.training.losses import info_nce
from cselab.training.methods import Context, Output, registry
from cselab.training.objective import Method, Objective, method_class
from cselab.training.methods.compcse import (
    AGGREGATIONS,
    Aggregator,
    CompCSE,
    split_batch,
    split_ids,
    split_words,
)

TRAINING = {"temperature": 0.05, "max_len": 32}


def build(name, encoder, options=None, training=None):
    cls = method_class(name)
    options = cls.check_options(options or {})
    return cls(Context(encoder=encoder, options=options, training={**TRAINING, **(training or {})}))


def toks(encoder, sentences):
    ids = encoder.tokenize(sentences, 32)
    return {**encoder.pad(ids), "index": torch.arange(len(ids))}

CLS, SEP, PAD = 101, 102, 0


def test_info_nce_hand_computed_3x3():
    # anchors e1, e2, e1; positives e1, e2, e2 -> s = [[1,0,0],[0,1,1],[1,0,0]]; tau = 0.5
    u = torch.tensor([[1.0, 0.0], [0.0, 1.0], [3.0, 0.0]])  # norms differ: cosine must normalise
    v = torch.tensor([[2.0, 0.0], [0.0, 1.0], [0.0, 5.0]])
    e2 = math.exp(2.0)
    expected = (-math.log(e2 / (e2 + 2)) - math.log(e2 / (1 + 2 * e2)) - math.log(1 / (e2 + 2))) / 3
    assert info_nce(u, v, temperature=0.5).item() == pytest.approx(expected, rel=1e-6)


def test_info_nce_d0_uses_first_coordinates_only():
    torch.manual_seed(0)
    u = torch.randn(5, 8, requires_grad=True)
    v = torch.randn(5, 8)
    loss = info_nce(u, v, 0.05, d0=3)
    assert loss.item() == pytest.approx(info_nce(u[:, :3], v[:, :3], 0.05).item())
    loss.backward()
    assert u.grad[:, :3].abs().sum() > 0 and torch.all(u.grad[:, 3:] == 0)
    assert info_nce(u, v, 0.05, d0=8).item() == pytest.approx(info_nce(u, v, 0.05).item())


def test_split_on_token_boundaries():
    ids = [CLS, 1, 2, 3, 4, 5, SEP]
    assert split_ids(ids, 2) == [[CLS, 1, 2, SEP], [CLS, 3, 4, 5, SEP]]
    assert split_ids(ids, 3) == [[CLS, 1, SEP], [CLS, 2, 3, SEP], [CLS, 4, 5, SEP]]
    assert split_ids(ids, 4) == [[CLS, 1, SEP], [CLS, 2, SEP], [CLS, 3, SEP], [CLS, 4, 5, SEP]]


def test_split_one_token_and_empty():
    assert split_ids([CLS, 7, SEP], 2) == [[CLS, 7, SEP], [CLS, 7, SEP]]
    assert split_ids([CLS, 7, 8, SEP], 3) == [[CLS, 7, 8, SEP], [CLS, 7, SEP], [CLS, 8, SEP]]
    assert split_ids([CLS, SEP], 2) == [[CLS, SEP], [CLS, SEP]]


def test_split_max_length_input(tiny_encoder):
    (ids,) = tiny_encoder.tokenize([" ".join(["word"] * 100)], max_len=32)
    assert len(ids) == 32 and ids[0] == tiny_encoder.tokenizer.cls_token_id
    left, right = split_ids(ids, 2)
    assert len(left) == len(right) == 17
    assert left[1:-1] + right[1:-1] == ids[1:-1]
    assert left[-1] == right[-1] == tiny_encoder.tokenizer.sep_token_id


def test_split_batch_is_part_major_and_ignores_padding():
    ids = torch.tensor([[CLS, 1, 2, 3, 4, SEP], [CLS, 5, 6, SEP, PAD, PAD]])
    mask = (ids != PAD).long()
    out = split_batch(ids, mask, 2, PAD)
    assert out["input_ids"].tolist() == [[CLS, 1, 2, SEP], [CLS, 5, SEP, PAD], [CLS, 3, 4, SEP], [CLS, 6, SEP, PAD]]
    assert out["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 0]]


def test_aggregations_values_and_shapes():
    a = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    b = torch.tensor([[10.0, 20.0, 30.0, 40.0]])
    parts = torch.stack([a, b])
    assert Aggregator("sum", 2, 4)(parts).tolist() == [[11.0, 22.0, 33.0, 44.0]]
    assert Aggregator("avg", 2, 4)(parts).tolist() == [[5.5, 11.0, 16.5, 22.0]]
    assert Aggregator("concat_halves", 2, 4)(parts).tolist() == [[1.0, 2.0, 30.0, 40.0]]
    assert Aggregator("concat_project", 2, 4)(parts).shape == (1, 4)
    assert Aggregator("concat_absdiff_project", 2, 4)(parts).shape == (1, 4)
    three = torch.stack([a, b, a * 100])
    assert Aggregator("concat_halves", 3, 4)(three).tolist() == [[1.0, 2.0, 30.0, 400.0]]


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("compose", ["z+", "z", "both"])
def test_compcse_gradients_reach_encoder(tiny_encoder, aggregation, compose):
    torch.manual_seed(0)
    k = 2 if aggregation == "concat_absdiff_project" else 3
    obj = build("compcse", tiny_encoder, {"partitions": k, "aggregation": aggregation, "compose": compose, "d0": 16})
    tiny_encoder.train()
    tiny_encoder.zero_grad()
    batch = obj.prepare(toks(tiny_encoder, ["a man is lifting weights in a garage .", "a dog", "x",
                                            "the cat sat on the mat today"]))
    loss = obj(batch, {}).losses["contrastive"]
    assert torch.isfinite(loss)
    loss.backward()
    emb = tiny_encoder.backbone.embeddings.word_embeddings.weight.grad
    assert emb is not None and emb.abs().sum() > 0
    if aggregation.endswith("project"):
        assert obj.aggregate.proj.weight.grad.abs().sum() > 0


def test_simcse_uses_dropout_views(tiny_encoder):
    obj = build("simcse", tiny_encoder)
    batch = toks(tiny_encoder, ["one sentence", "another one", "a third"])
    tiny_encoder.train()
    shared = {}
    loss = obj(batch, shared).losses["contrastive"]
    tiny_encoder.eval()
    with torch.no_grad():
        eval_loss = obj(batch, {}).losses["contrastive"]
    tiny_encoder.train()
    assert torch.isfinite(loss) and loss.item() != pytest.approx(eval_loss.item())
    assert shared["pooled"].shape == shared["projected"].shape == (6, 32) and shared["input_ids"].shape[0] == 6


def test_registry_and_option_errors(tiny_encoder):
    assert {"simcse", "compcse"} <= set(registry())
    with pytest.raises(ConfigError, match=r"unknown method 'nope'; valid methods: .*compcse.*simcse"):
        method_class("nope")
    with pytest.raises(ConfigError, match=r"'x\.aggregaton' \(did you mean 'aggregation'\?\); valid keys here: "
                                          r"aggregation, compose, d0, head.*\(method 'compcse'\)"):
        CompCSE.check_options({"aggregaton": "avg"}, where="x")
    with pytest.raises(ConfigError, match=r"'x\.d0': must be an integer >= 1 or null, got 0"):
        CompCSE.check_options({"d0": 0}, where="x")
    with pytest.raises(ConfigError, match=r"'x\.partitions': 2\.5 is not of type 'integer'"):
        CompCSE.check_options({"partitions": 2.5}, where="x")
    with pytest.raises(ConfigError, match=r"'x\.partitions': must be an integer in 2\.\.4"):
        CompCSE.check_options({"partitions": 5}, where="x")
    with pytest.raises(ConfigError, match=r"concat_absdiff_project is defined for partitions = 2"):
        CompCSE.check_options({"partitions": 3, "aggregation": "concat_absdiff_project"})
    with pytest.raises(ConfigError, match=r"'options\.partition_unit': 'char' is not one of"):
        CompCSE.check_options({"partition_unit": "char"})
    with pytest.raises(ConfigError, match="exceeds the model's hidden size 32"):
        build("compcse", tiny_encoder, {"d0": 64})


# ------------------------------------------------------------------ reference-exact numerics


def test_info_nce_runs_in_fp32_under_autocast():
    """The similarity matrix, softmax and cross-entropy escape bf16 autocast (as the references'
    cosine_similarity and cross_entropy, which autocast keeps in fp32)."""
    torch.manual_seed(0)
    u, v = torch.randn(64, 384), torch.randn(64, 384)
    ref = info_nce(u, v, 0.05)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = info_nce(u.to(torch.bfloat16).float(), v.to(torch.bfloat16).float(), 0.05)
        bf16_inputs = info_nce(u.to(torch.bfloat16), v.to(torch.bfloat16), 0.05)
    exact = info_nce(u.to(torch.bfloat16).float(), v.to(torch.bfloat16).float(), 0.05)
    assert got.dtype == bf16_inputs.dtype == torch.float32
    assert got.item() == exact.item() and bf16_inputs.item() == exact.item()
    assert got.item() == pytest.approx(ref.item(), abs=5e-3)


def test_fp16_uses_a_gradient_scaler_and_bf16_does_not():
    """fp16 gradients below 3e-8 underflow to 0 without loss scaling (the references trained
    with fp16 + a scaler); with the scaler the tiny gradient survives."""
    from cselab.training.numerics import Precision

    def one_step(precision):
        w = nn.Parameter(torch.zeros(8, 8))
        opt = torch.optim.SGD([w], lr=1.0)
        x = torch.full((4, 8), 5e-5)
        with precision.autocast():  # the linear runs in fp16; its weight gradient would be 2e-8
            loss = nn.functional.linear(x, w).float().sum() * 1e-4
        precision.backward(loss)
        precision.step(opt, [w], max_grad_norm=None)
        return w.detach().abs().max().item()

    fp16 = Precision("fp16", torch.device("cpu"))
    assert fp16.scaler.is_enabled() and not Precision("bf16", torch.device("cpu")).scaler.is_enabled()
    assert one_step(fp16) == pytest.approx(2e-8, rel=1e-2)
    unscaled = Precision("fp16", torch.device("cpu"))
    unscaled.scaler = torch.amp.GradScaler("cpu", enabled=False)
    assert one_step(unscaled) == 0.0


@pytest.mark.parametrize("kind", ["mlp", "linear", "batchnorm"])
def test_heads_get_berts_init(kind):
    torch.manual_seed(0)
    head = make_head(kind, 64, init_std=0.02)
    linears = [m for m in head.modules() if isinstance(m, nn.Linear)]
    assert linears
    for m in linears:
        assert m.weight.std().item() == pytest.approx(0.02, rel=0.1) and abs(m.weight.mean().item()) < 2e-3
        assert m.bias is None or torch.all(m.bias == 0)


def test_methods_init_their_head_from_the_plms_initializer_range(tiny_encoder):
    for name in ("simcse", "compcse"):
        linear = build(name, tiny_encoder).head[0]
        assert torch.all(linear.bias == 0) and linear.weight.std().item() == pytest.approx(0.02, rel=0.15)


def test_compcse_head_runs_after_aggregation_as_in_the_authors_code(tiny_encoder):
    """Pool the parts' raw [CLS], aggregate, then the head (CompCSE's cl_forward); the first
    implementation ran the head on each part (kept as head_placement: per_part)."""
    torch.manual_seed(0)
    obj = build("compcse", tiny_encoder, {"aggregation": "avg"})
    old = build("compcse", tiny_encoder, {"aggregation": "avg", "head_placement": "per_part"})
    old.load_state_dict(obj.state_dict())
    batch = obj.prepare(toks(tiny_encoder, ["a man is lifting weights in a garage .", "we store it outside ."]))
    parts = 3 * torch.randn(4, 32)  # the encoder's [CLS] of part 1 (2 sentences), then part 2
    for m in (obj, old):
        encoder = lambda ids, mask, lengths=None: parts[: ids.shape[0]]  # noqa: E731
        m.ctx = Context(encoder=encoder, options=m.options, training=TRAINING)
    with torch.no_grad():
        (got,) = obj.compose(batch)
        (per_part,) = old.compose(batch)
        by_part = parts.view(2, 2, 32)
        assert torch.allclose(got, obj.head(by_part.mean(0)), atol=1e-6)
        assert torch.allclose(per_part, obj.head(by_part).mean(0), atol=1e-6)
        assert not torch.allclose(got, per_part, atol=1e-3)


def test_word_partition_tokenises_each_half_on_its_own(tiny_encoder):
    sentences = ["unbelievably, the garage was repainted yesterday", "a dog"]
    assert split_words(sentences[0], 2) == ["unbelievably, the garage", "was repainted yesterday"]
    assert split_words("one", 2) == ["one", "one"]
    obj = build("compcse", tiny_encoder, {"partition_unit": "word"})
    ids = tiny_encoder.tokenize(sentences, 32)
    obj.attach_corpus(sentences, TokenizedCorpus.from_lists(ids),
                      lambda texts: tokenize_corpus(texts, tiny_encoder.tokenizer, 32))
    batch = obj.prepare({**tiny_encoder.pad([ids[1], ids[0]]), "index": torch.tensor([1, 0])})
    tok = tiny_encoder.tokenizer
    expected = [tok("a")["input_ids"], tok("unbelievably, the garage")["input_ids"],
                tok("dog")["input_ids"], tok("was repainted yesterday")["input_ids"]]
    got = [row[m.bool()].tolist() for row, m in zip(batch["parts_input_ids"], batch["parts_attention_mask"])]
    assert got == expected
    subword = build("compcse", tiny_encoder).prepare(toks(tiny_encoder, sentences[:1]))
    assert subword["parts_input_ids"].shape[0] == 2


# ------------------------------------------------------------------ the contract


class _Toy(Method):
    """A method with its own head, a frozen extra network and a trainable one at its own lr."""

    name = "contracttoy"
    roles = ("primary", "auxiliary")

    def __init__(self, ctx):
        super().__init__(ctx)
        self.head = make_head("linear", ctx.hidden_size)
        self.critic = nn.Linear(ctx.hidden_size, 1)
        self.teacher = self.freeze("teacher", nn.Sequential(nn.Linear(ctx.hidden_size, 4), nn.Dropout(0.5)))

    def param_groups(self, lr):
        return [{"params": list(self.head.parameters()), "lr": lr},
                {"params": list(self.critic.parameters()), "lr": 10 * lr}]

    def prepare(self, batch):
        return {**batch, "masked": batch["input_ids"].clone()}

    def forward(self, batch, shared):
        pooled = shared.get("pooled")
        if pooled is None:
            pooled = self.ctx.encoder(batch["masked"], batch["attention_mask"])
        return Output({"toy": self.critic(self.head(pooled)).pow(2).mean() + self.teacher(pooled).sum() * 0},
                      {"teacher_mean": self.teacher(pooled).mean()})


def test_frozen_networks_stay_out_of_optimizer_and_state(tiny_encoder):
    obj = build("contracttoy", tiny_encoder)
    names = set(obj.state_dict())
    assert names == {"head.weight", "head.bias", "critic.weight", "critic.bias"}
    assert all(not p.requires_grad for p in obj.teacher.parameters())
    assert {id(p) for g in obj.param_groups(1e-3) for p in g["params"]}.isdisjoint(map(id, obj.teacher.parameters()))
    assert [g["lr"] for g in obj.param_groups(1e-3)] == [1e-3, 1e-2]
    obj.to(torch.float64)
    assert obj.teacher[0].weight.dtype == torch.float64  # moved with the method
    obj.to(torch.float32)
    obj.train()
    assert obj.critic.training and not obj.teacher.training  # fixed input: eval mode unless asked
    assert set(obj.frozen()) == {"teacher"}


def test_objective_sums_weighted_terms_and_shares_views(tiny_encoder):
    simcse, toy = build("simcse", tiny_encoder), build("contracttoy", tiny_encoder)
    objective = Objective([("simcse", 1.0, simcse), ("contracttoy", 0.5, toy)])
    batch = objective.prepare(toks(tiny_encoder, ["one sentence", "another one", "a third"]))
    assert "masked" in batch
    torch.manual_seed(0)
    total, terms, scalars = objective(batch)
    assert set(terms) == {"contrastive", "toy", "total"} and "teacher_mean" in scalars
    assert total.item() == pytest.approx(terms["contrastive"].item() + 0.5 * terms["toy"].item(), rel=1e-6)
    assert set(objective.frozen()) == {"contracttoy.teacher"}
