"""InfoNCE, the naive partition splitter, composition and d0 slicing."""

import math

import pytest
import torch

from cselab.objectives import OBJECTIVES, objective_class
from cselab.objectives.compcse import (
    AGGREGATIONS,
    Aggregator,
    CompCSE,
    split_batch,
    split_ids,
)
from cselab.objectives.losses import info_nce

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
    obj = CompCSE({"partitions": k, "aggregation": aggregation, "compose": compose, "d0": 16}, 32, 0.05)
    tiny_encoder.train()
    tiny_encoder.zero_grad()
    batch = tiny_encoder.pad(tiny_encoder.tokenize(["a man is lifting weights in a garage .", "a dog",
                                                   "x", "the cat sat on the mat today"], 32))
    loss, _ = obj(tiny_encoder, batch)
    assert torch.isfinite(loss)
    loss.backward()
    emb = tiny_encoder.backbone.embeddings.word_embeddings.weight.grad
    assert emb is not None and emb.abs().sum() > 0
    if aggregation.endswith("project"):
        assert obj.aggregate.proj.weight.grad.abs().sum() > 0


def test_simcse_uses_dropout_views(tiny_encoder):
    obj = objective_class("simcse")({}, 32, 0.05)
    batch = tiny_encoder.pad(tiny_encoder.tokenize(["one sentence", "another one", "a third"], 32))
    tiny_encoder.train()
    loss, _ = obj(tiny_encoder, batch)
    tiny_encoder.eval()
    with torch.no_grad():
        eval_loss, _ = obj(tiny_encoder, batch)
    tiny_encoder.train()
    assert torch.isfinite(loss) and loss.item() != pytest.approx(eval_loss.item())


def test_registry_and_option_errors():
    from cselab.errors import ConfigError

    assert {"simcse", "compcse"} <= set(OBJECTIVES)
    with pytest.raises(ConfigError, match=r"unknown objective 'nope'; valid objectives: .*compcse.*simcse"):
        objective_class("nope")
    with pytest.raises(ConfigError, match=r"'x\.aggregaton'.*valid options: aggregation, compose, d0, partitions"):
        CompCSE.check_options({"aggregaton": "avg"}, where="x")
    with pytest.raises(ConfigError, match=r"'x\.partitions': must be an integer in 2\.\.4"):
        CompCSE.check_options({"partitions": 5}, where="x")
    with pytest.raises(ConfigError, match=r"concat_absdiff_project is defined for partitions = 2"):
        CompCSE.check_options({"partitions": 3, "aggregation": "concat_absdiff_project"})
    with pytest.raises(ConfigError, match="exceeds the model's hidden size 32"):
        CompCSE({"d0": 64}, 32, 0.05)
