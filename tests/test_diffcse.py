"""DiffCSE's conditional replaced-token detection: the generator's edits and their labels (replace,
insert, delete), the discriminator conditioned on the sentence vector through its embedding
module, the loss over every position, and where the gradient goes."""

import pytest
import torch

from cselab.errors import ConfigError, ModelError
from cselab.models.encoder import load_encoder
from cselab.training.objective import build_objective
from cselab.training.methods.diffcse import RTD
from tests.helpers import make_tiny_generator, training_defaults

SENTENCES = ["a man plays a guitar on the street .", "the dog runs fast in the park .",
             "it rains all day in the city .", "two women are talking about the weather ."]


@pytest.fixture(scope="module")
def generator(tiny_bert, tmp_path_factory):
    return make_tiny_generator(tmp_path_factory.mktemp("generator"), tiny_bert)


def build(tiny_bert, generator, **options):
    encoder = load_encoder(tiny_bert)
    spec = {"objective": "simcse", "weight": 1.0, "options": {"head": "batchnorm"}, "training": training_defaults(),
            "auxiliaries": {"rtd": {"weight": 1.0, "options": {"generator": str(generator), **options}}}}
    objective = build_objective(spec, encoder, {}, tiny_bert)
    objective.train()
    return encoder, objective


def batch(encoder):
    return encoder.pad(encoder.tokenize(SENTENCES, 32))


def test_replace_labels_are_what_the_generator_changed(tiny_bert, generator):
    encoder, objective = build(tiny_bert, generator)
    torch.manual_seed(0)
    b = objective.prepare(batch(encoder))
    ids, attn = b["input_ids"].repeat(2, 1), b["attention_mask"].repeat(2, 1)
    edited, labels = b["rtd_input_ids"], b["rtd_labels"]
    assert edited.shape == ids.shape and torch.equal(b["rtd_attention_mask"], attn)
    assert torch.equal(labels.bool(), (edited != ids) & attn.bool())  # restored tokens count as original
    assert (edited[:, 0] == ids[:, 0]).all() and (labels[:, 0] == 0).all()  # [CLS] never replaced
    assert (edited[attn == 0] == encoder.tokenizer.pad_token_id).all()


def test_insert_and_delete_labels(tiny_bert, generator):
    encoder, objective = build(tiny_bert, generator, augment="insert", edit_ratio=0.3)
    torch.manual_seed(0)
    b = objective.prepare(batch(encoder))
    lengths = b["attention_mask"].sum(1).repeat(2)
    new = b["rtd_attention_mask"].sum(1)
    inserted = b["rtd_labels"].sum(1)
    assert torch.equal(new, lengths + inserted) and (inserted >= 1).all()
    assert not (b["rtd_input_ids"] == encoder.tokenizer.mask_token_id).any()  # the generator filled them
    _, objective = build(tiny_bert, generator, augment="delete", edit_ratio=0.3)
    b = objective.prepare(batch(encoder))
    removed = lengths - b["rtd_attention_mask"].sum(1)
    assert (removed >= 1).all()
    assert (b["rtd_labels"].sum(1) <= removed).all() and (b["rtd_labels"].sum(1) >= 1).all()
    ids = b["rtd_input_ids"]
    assert (ids[:, 0] == encoder.tokenizer.cls_token_id).all()  # [CLS] and [SEP] are never deleted
    last = b["rtd_attention_mask"].sum(1) - 1
    assert (ids[torch.arange(len(ids)), last] == encoder.tokenizer.sep_token_id).all()


def test_discriminator_is_conditioned_on_the_sentence_vector(tiny_bert, generator):
    encoder, objective = build(tiny_bert, generator)
    rtd = objective.components[1]
    rtd.eval()
    b = objective.prepare(batch(encoder))
    h = torch.randn(8, encoder.hidden_size, requires_grad=True)
    loss = rtd(b, {"projected": h}).losses["rtd"]
    first = rtd.discriminator(input_ids=b["rtd_input_ids"], attention_mask=b["rtd_attention_mask"])
    assert rtd._cls_input is None  # the hook is inactive outside the forward
    loss.backward()
    assert h.grad is not None and h.grad.abs().sum() > 0  # the sentence vector gets RTD's gradient
    with torch.no_grad():
        rtd._cls_input = h
        conditioned = rtd.discriminator(input_ids=b["rtd_input_ids"], attention_mask=b["rtd_attention_mask"])
        rtd._cls_input = None
    assert not torch.allclose(conditioned.last_hidden_state[:, 0], first.last_hidden_state[:, 0])
    # the loss averages over every position, padding included (the authors' code)
    logits = rtd.rtd_head(conditioned.last_hidden_state)
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 2), b["rtd_labels"].reshape(-1))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_generator_is_frozen_and_discriminator_trains(tiny_bert, generator):
    encoder, objective = build(tiny_bert, generator)
    rtd = objective.components[1]
    assert "rtd.generator" in objective.frozen()
    assert rtd.generator.training  # dropout on, as the authors' code
    assert not any(k.startswith("components.1.generator") for k in objective.state_dict())
    assert any(k.startswith("components.1.discriminator") for k in objective.state_dict())
    total, terms, scalars = objective(objective.prepare(batch(encoder)))
    assert set(terms) == {"contrastive", "rtd", "total"} and 0 <= scalars["rtd_acc"] <= 1
    total.backward()
    assert all(p.grad is None for p in rtd.generator.parameters())
    assert rtd.discriminator.encoder.layer[0].output.dense.weight.grad is not None
    assert encoder.backbone.encoder.layer[0].output.dense.weight.grad is not None


def test_generator_from_a_stage_and_bad_generators(tiny_bert, generator, tmp_path):
    assert RTD.requires(RTD.check_options({})) == {"generator": "infocse-pretrain"}
    assert RTD.requires(RTD.check_options({"generator": "distilbert-base-uncased"})) == {}
    with pytest.raises(ModelError, match="has no MLM head"):
        build(tiny_bert, tiny_bert)  # a checkpoint without an MLM head is not a generator
    with pytest.raises(ConfigError, match=r"'options\.augment': 'swap' is not one of"):
        RTD.check_options({"augment": "swap"})
    with pytest.raises(ConfigError, match=r"'options\.mask_ratio': must be a number in \(0, 1\), got 0"):
        RTD.check_options({"mask_ratio": 0})


def test_rating_groups_and_retrieval_examples(tmp_path):
    import numpy as np

    from cselab.reporting.figures import diffcse

    assert list(diffcse.rating_group(np.array([0.0, 0.99, 1.0, 3.5, 4.0, 5.0]))) == [0, 0, 1, 3, 4, 4]
    corpus = ["the cat sits .", "a cat is sitting .", "dogs bark .", "it rains ."]
    c = np.array([[1.0, 0, 0], [0.9, 0.1, 0], [0, 1.0, 0], [0, 0, 1.0]])
    q = np.array([[1.0, 0.05, 0], [0, 0.2, 1.0]])
    df = diffcse.retrieval_examples({"M": (c, q)}, corpus, ["the cat sits .", "is it raining ?"], k=2,
                                    printed=[{"query": "is it raining ?", "simcse": ["a", "b", "c"]}])
    first = df[(df["query"] == "the cat sits .") & (df["model"] == "M")]
    assert list(first["sentence"]) == ["a cat is sitting .", "dogs bark ."]  # the query itself is excluded
    second = df[(df["query"] == "is it raining ?") & (df["model"] == "M")]
    assert list(second["sentence"])[0] == "it rains ." and list(second["rank"]) == [1, 2]
    assert list(df[df["model"] == "paper: simcse"]["sentence"]) == ["a", "b"]
    diffcse.figure_retrieval_examples(df, tmp_path / "t9.png", tmp_path / "t9.csv")
    assert (tmp_path / "t9.png").stat().st_size > 1000


def test_position_zero_input_of_the_discriminator_is_h(tiny_bert, generator):
    encoder, objective = build(tiny_bert, generator)
    rtd = objective.components[1].eval()  # no dropout: the other positions are comparable
    b = objective.prepare(batch(encoder))
    seen = {}
    # registered after the method's own hook: it sees the embedding output as the layers receive it
    handle = rtd.discriminator.embeddings.register_forward_hook(lambda m, i, o: seen.update(out=o))
    h = torch.randn(8, encoder.hidden_size)
    rtd(b, {"projected": h})
    handle.remove()
    assert torch.equal(seen["out"][:, 0], h)
    plain = rtd.discriminator.embeddings(input_ids=b["rtd_input_ids"])
    assert torch.allclose(seen["out"][:, 1:], plain[:, 1:])  # every other position untouched


def test_a_training_step_is_bit_identical_with_the_same_seed(tiny_bert, generator):
    def step():
        torch.manual_seed(7)
        encoder, objective = build(tiny_bert, generator)
        groups = [{"params": list(encoder.parameters())}, *objective.param_groups(1e-3)]
        optimizer = torch.optim.AdamW(groups, lr=1e-3)
        torch.manual_seed(11)
        with torch.no_grad():
            b = objective.prepare(batch(encoder))
        loss, terms, _ = objective(b)
        loss.backward()
        optimizer.step()
        return terms["rtd"].item(), [p.detach().clone() for p in encoder.parameters()]

    (loss_a, params_a), (loss_b, params_b) = step(), step()
    assert loss_a == loss_b
    assert all(torch.equal(a, b) for a, b in zip(params_a, params_b))


@pytest.mark.parametrize("auxiliary", ["rtd", "infocse_mlm"])
def test_training_losses_do_not_depend_on_pad_to_multiple_of(tiny_bert, generator, tmp_path, auxiliary):
    """An operational setting changes no number: the RTD mean runs over the batch's natural padded
    length and the masks, the generator and the auxiliary networks never see the extra padding."""
    from cselab.training.loop import train
    from tests.helpers import make_corpus
    from tests.test_train import spec_for

    corpus = make_corpus(tmp_path / "corpus.txt", 40)
    options = {"generator": str(generator)} if auxiliary == "rtd" else {"pretrained": False, "views": 2}
    losses = []
    for multiple in (None, 16):
        spec = spec_for(tiny_bert, "simcse", {"head": "batchnorm"}, max_steps=4, log_steps=1, eval_steps=None,
                        pad_to_multiple_of=multiple,
                        auxiliaries={auxiliary: {"weight": 1.0, "options": options}})
        res = train(spec, corpus, lambda encoder: 0.0, tmp_path / f"out-{multiple}")
        term = "loss.rtd" if auxiliary == "rtd" else "loss.mlm"
        losses.append([(r["loss"], r[term]) for r in res.curve if "loss" in r])
    assert len(losses[0]) == 4 and losses[0] == pytest.approx(losses[1], rel=1e-5)


def build_aux(tiny_bert, name, **options):
    encoder = load_encoder(tiny_bert)
    spec = {"objective": "simcse", "weight": 1.0, "options": {"head": "batchnorm"}, "training": training_defaults(),
            "auxiliaries": {name: {"weight": 1.0, "options": options}}}
    objective = build_objective(spec, encoder, {}, tiny_bert)
    objective.train()
    return encoder, objective


def test_conditional_mlm_predicts_the_masked_same_sentence_from_h(tiny_bert):
    """DiffCSE Table 3's conditional MLM: the masked sentence, h at position 0, an MLM head."""
    encoder, objective = build_aux(tiny_bert, "cmlm")
    cmlm = objective.components[1]
    torch.manual_seed(0)
    b = objective.prepare(batch(encoder))
    labels = b["cmlm_labels"]
    assert b["cmlm_input_ids"].shape[0] == 2 * len(SENTENCES) and (labels != -100).any()
    masked = labels != -100
    assert (b["cmlm_input_ids"][masked] != labels[masked]).float().mean() > 0.5  # mostly [MASK]
    h = torch.randn(8, encoder.hidden_size, requires_grad=True)
    loss = cmlm(b, {"projected": h}).losses["cmlm"]
    loss.backward()
    assert h.grad.abs().sum() > 0 and cmlm.discriminator.encoder.layer[0].output.dense.weight.grad is not None
    other = cmlm(b, {"projected": h.detach() + 1.0}).losses["cmlm"]
    assert other.item() != pytest.approx(loss.item())  # the prediction depends on h
    _, full = objective(b)[:2]
    assert set(full) == {"contrastive", "cmlm", "total"}


def test_corrective_lm_recovers_the_original_tokens_with_a_copy_mechanism(tiny_bert, generator):
    encoder, objective = build_aux(tiny_bert, "corrective_lm", generator=str(generator))
    clm = objective.components[1]
    torch.manual_seed(0)
    b = objective.prepare(batch(encoder))
    assert torch.equal(b["clm_targets"], b["input_ids"].repeat(2, 1))
    assert (b["clm_input_ids"] != b["clm_targets"]).any()  # the generator replaced tokens
    h = torch.randn(8, encoder.hidden_size, requires_grad=True)
    out = clm(b, {"projected": h})
    out.losses["clm"].backward()
    assert h.grad.abs().sum() > 0 and clm.copy_head.weight.grad is not None and clm.lm_head.decoder.weight.grad is not None
    assert 0 < out.scalars["clm_copy_loss"].item() < out.losses["clm"].item()
    with pytest.raises(ConfigError, match="'options.augment': the corrective LM"):
        build_aux(tiny_bert, "corrective_lm", generator=str(generator), augment="insert")


@pytest.mark.parametrize("use,augment", [("negative", "replace"), ("positive", "delete"), ("negative", "insert")])
def test_edits_as_extra_positives_or_negatives(tiny_bert, generator, use, augment):
    """DiffCSE Table 15: SimCSE with each sentence's edit as an extra negative (2N candidates per
    anchor) or an extra positive (the mean of two InfoNCE terms)."""
    from cselab.training.losses import info_nce, info_nce_hard_negatives

    encoder = load_encoder(tiny_bert)
    spec = {"objective": "simcse_edits", "weight": 1.0, "training": training_defaults(), "auxiliaries": {},
            "options": {"use": use, "augment": augment, "generator": str(generator)}}
    objective = build_objective(spec, encoder, {}, tiny_bert)
    objective.train()
    torch.manual_seed(0)
    b = objective.prepare({**batch(encoder), "lengths": batch(encoder)["attention_mask"].sum(1)})
    if augment == "delete":
        assert (b["edit_attention_mask"].sum(1) < b["attention_mask"].sum(1)).all()
        assert torch.equal(b["edit_lengths"], b["edit_attention_mask"].sum(1))
    loss, terms, _ = objective(b)
    loss.backward()
    assert terms["contrastive"].item() > 0 and encoder.backbone.embeddings.word_embeddings.weight.grad is not None
    u, v, e = torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8)
    hard = info_nce_hard_negatives(u, torch.stack([v, e], 1), 0.05)
    sim = torch.cat([torch.nn.functional.normalize(u, dim=-1) @ torch.nn.functional.normalize(v, dim=-1).T,
                     torch.nn.functional.normalize(u, dim=-1) @ torch.nn.functional.normalize(e, dim=-1).T], 1)
    assert hard.item() == pytest.approx(torch.nn.functional.cross_entropy(sim / 0.05, torch.arange(4)).item(), rel=1e-5)
    assert hard.item() > info_nce(u, v, 0.05).item()  # more negatives, a larger loss
