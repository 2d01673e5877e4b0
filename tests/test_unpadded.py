"""The unpadded forward (real tokens only) against Hugging Face's padded forward."""

import pytest
import torch
from transformers import BertConfig, BertModel, RobertaConfig, RobertaModel

from cselab.models import unpadded
from cselab.models.encoder import SentenceEncoder, pad_batch


def _backbone(kind: str, dropout: float = 0.0, attention_dropout: float | None = None, **extra):
    torch.manual_seed(0)
    common = dict(vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
                  hidden_dropout_prob=dropout, **extra,
                  attention_probs_dropout_prob=dropout if attention_dropout is None else attention_dropout)
    if kind == "roberta":
        config = RobertaConfig(max_position_embeddings=40, pad_token_id=1, **common)
        return RobertaModel(config, add_pooling_layer=False)
    return BertModel(BertConfig(max_position_embeddings=40, **common), add_pooling_layer=False)


def _batch(pad_id: int, lengths=(9, 3, 17, 1, 17, 5)):
    g = torch.Generator().manual_seed(1)
    rows = [[5] + torch.randint(6, 100, (n - 1,), generator=g).tolist() if n > 1 else [5] for n in lengths]
    return pad_batch(rows, pad_id)


def _padded(backbone, batch, pooler):
    encoder = SentenceEncoder(backbone, tokenizer=None, pooler=pooler)
    encoder.use_unpadded(False)
    return encoder(**batch)


@pytest.mark.parametrize("kind", ["bert", "roberta"])
@pytest.mark.parametrize("pooler", ["cls", "avg"])
def test_same_embeddings_and_gradients_as_the_padded_forward(kind, pooler):
    backbone = _backbone(kind).train()  # dropout 0: train mode is deterministic
    batch = _batch(backbone.config.pad_token_id)
    target = torch.randn(len(batch["input_ids"]), 32, generator=torch.Generator().manual_seed(2))

    def run(fn):
        backbone.zero_grad()
        out = fn()
        (out * target).sum().backward()
        return out.detach(), {n: p.grad.clone() for n, p in backbone.named_parameters() if p.grad is not None}

    ref, ref_grads = run(lambda: _padded(backbone, batch, pooler))
    got, grads = run(lambda: unpadded.pooled(backbone, batch["input_ids"], batch["attention_mask"], pooler))
    torch.testing.assert_close(got, ref, atol=2e-5, rtol=1e-4)
    assert grads.keys() == ref_grads.keys()
    for name, grad in ref_grads.items():
        torch.testing.assert_close(grads[name], grad, atol=2e-5, rtol=1e-3, msg=name)
    moved = [n for n, g in ref_grads.items() if g.abs().max() > 0]
    assert any("layer.2.attention.self.query" in n for n in moved)  # the last layer's [CLS] query is trained


def test_a_full_length_batch_and_a_single_sentence():
    backbone = _backbone("bert").eval()
    for lengths in [(17, 17, 17), (12,)]:
        batch = _batch(0, lengths)
        got = unpadded.pooled(backbone, batch["input_ids"], batch["attention_mask"], "cls")
        torch.testing.assert_close(got, _padded(backbone, batch, "cls"), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("hidden, attention", [(0.3, 0.0), (0.0, 0.3)])
def test_dropout_applies_in_training_only(hidden, attention):
    backbone = _backbone("bert", dropout=hidden, attention_dropout=attention)
    batch = _batch(0)
    args = (batch["input_ids"], batch["attention_mask"])
    backbone.train()
    assert not torch.allclose(unpadded.pooled(backbone, *args), unpadded.pooled(backbone, *args))
    backbone.eval()
    torch.testing.assert_close(unpadded.pooled(backbone, *args), unpadded.pooled(backbone, *args))
    torch.testing.assert_close(unpadded.pooled(backbone, *args), _padded(backbone, batch, "cls"),
                               atol=2e-5, rtol=1e-4)


def test_bf16_autocast_keeps_dtypes_consistent():
    backbone = _backbone("roberta").eval()
    batch = _batch(1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = unpadded.pooled(backbone, batch["input_ids"], batch["attention_mask"], "avg")
        ref = _padded(backbone, batch, "avg")
    torch.testing.assert_close(got.float(), ref.float(), atol=0.05, rtol=0.05)


def test_the_encoder_uses_it_by_default_and_falls_back_with_a_reason():
    encoder = SentenceEncoder(_backbone("bert"), tokenizer=None)
    assert encoder.unpadded and encoder.use_unpadded(True) is None and encoder.unpadded
    assert encoder.use_unpadded(False) is None and not encoder.unpadded
    relative = SentenceEncoder(_backbone("bert", position_embedding_type="relative_key"), tokenizer=None)
    assert not relative.unpadded
    assert "relative_key" in relative.use_unpadded(True) and not relative.unpadded
    # a forward asking for the backbone's outputs is Hugging Face's, also with unpadded on
    batch = _batch(0)
    pooled, out = encoder.__class__(_backbone("bert"), None)(**batch, output_hidden_states=True)
    assert len(out.hidden_states) == 4 and pooled.shape == (6, 32)


@pytest.mark.parametrize("method", ["simcse", "compcse"])
def test_training_unpadded_gives_the_padded_losses(tiny_bert, tmp_path, method):
    """training.unpadded on and off: the same loss at every step (dropout off), so the same
    gradients and updates; the switch is part of the experiment's spec (dropout streams differ)."""
    from cselab.training.loop import train
    from tests.helpers import make_corpus
    from tests.test_train import spec_for

    corpus = make_corpus(tmp_path / "corpus.txt", 24)
    losses = {}
    for flag in (True, False):
        spec = spec_for(tiny_bert, method, max_steps=3, eval_steps=None, log_steps=1, dropout=0.0, unpadded=flag)
        res = train(spec, corpus, lambda enc: 0.0, tmp_path / str(flag), device="cpu")
        losses[flag] = [r["loss"] for r in res.curve if "loss" in r]
    assert len(losses[True]) == 3
    assert losses[True] == pytest.approx(losses[False], abs=1e-5)



def test_host_lengths_give_the_same_packing_as_the_mask():
    """Lengths known on the host (the batch builder's) pack exactly like the mask, also with
    padding beyond the longest row (pad_to_multiple_of)."""
    batch = _batch(0)
    mask = torch.nn.functional.pad(batch["attention_mask"], (0, 7))
    lengths = batch["attention_mask"].sum(1)
    a, b = unpadded.Packing(mask), unpadded.Packing(mask, lengths)
    for name in ("index", "first", "lengths"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    backbone = _backbone("bert").eval()
    ids = torch.nn.functional.pad(batch["input_ids"], (0, 7))
    torch.testing.assert_close(unpadded.pooled(backbone, ids, mask, "avg", lengths),
                               _padded(backbone, batch, "avg"), atol=2e-5, rtol=1e-4)
