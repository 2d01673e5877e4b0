"""InfoCSE: BERT's masking, the auxiliary network's input [h ; lower states], stage 1 (shared
lower layers, tied decoder) and its export, stage 2 (frozen detached copy, gradient only
through h, options of the ablations), and the MLM head taken from a checkpoint that has one."""

import pytest
import torch

from cselab.errors import ConfigError
from cselab.training import mlm
from cselab.models.encoder import load_encoder
from cselab.training.objective import build_objective
from cselab.training.methods.infocse import AUX_CONFIG, AUX_FILE, InfoCSEMLM
from tests.helpers import read_yaml, training_defaults

SENTENCES = ["a man plays a guitar on the street .", "the dog runs fast in the park .",
             "it rains all day in the city .", "two women are talking about the weather ."]


def test_masking_is_berts_80_10_10(tiny_encoder):
    tok = tiny_encoder.tokenizer
    batch = tiny_encoder.pad(tiny_encoder.tokenize(SENTENCES * 200, 32))
    ids, attn = batch["input_ids"], batch["attention_mask"]
    masked, labels = mlm.mask_tokens(ids, attn, 0.4, tok, torch.Generator().manual_seed(0))
    selected = labels != mlm.IGNORE
    special = (ids == tok.cls_token_id) | (ids == tok.sep_token_id) | (attn == 0)
    assert not (selected & special).any()  # never [CLS], [SEP] or padding
    assert (labels[selected] == ids[selected]).all() and (masked[~selected] == ids[~selected]).all()
    share = selected.sum() / (~special).sum()
    assert share.item() == pytest.approx(0.4, abs=0.02)
    to_mask = (masked[selected] == tok.mask_token_id).float().mean().item()
    unchanged = (masked[selected] == ids[selected]).float().mean().item()
    assert to_mask == pytest.approx(0.8, abs=0.02) and unchanged == pytest.approx(0.1, abs=0.02)


def test_aux_input_is_h_then_the_lower_states(tiny_encoder):
    from cselab.training.methods.infocse import AuxNetwork

    torch.manual_seed(0)
    aux = AuxNetwork(tiny_encoder.backbone, 2).eval()
    n, t, d = 3, 6, tiny_encoder.hidden_size
    h, lower = torch.randn(n, d), torch.randn(n, t, d)
    attn = torch.ones(n, t, dtype=torch.long)
    labels = torch.full((n, t), mlm.IGNORE)
    labels[:, 2] = 1000

    def loss(h, lower, labels):
        return mlm.mlm_loss(aux.head, aux.hidden(h, lower, attn), labels)

    base = loss(h, lower, labels)
    changed_pos0 = lower.clone()
    changed_pos0[:, 0] += 5.0  # position 0 of the lower states is replaced by h: no effect
    assert loss(h, changed_pos0, labels).item() == pytest.approx(base.item())
    assert loss(h + 1.0, lower, labels).item() != pytest.approx(base.item())
    none = torch.full((n, t), mlm.IGNORE)
    zero = loss(h.requires_grad_(), lower, none)
    assert zero.item() == 0.0
    zero.backward()  # a batch without a masked token still backpropagates


def stage_one(tiny_bert):
    encoder = load_encoder(tiny_bert)
    spec = {"objective": "infocse_pretrain", "weight": 1.0, "options": {}, "auxiliaries": {},
            "training": training_defaults()}
    return encoder, build_objective(spec, encoder, {}, tiny_bert)


def stage_two(tiny_bert, stage_dir, **options):
    encoder = load_encoder(tiny_bert)
    spec = {"objective": "simcse", "weight": 1.0, "options": {"head": "batchnorm"}, "training": training_defaults(),
            "auxiliaries": {"infocse_mlm": {"weight": 1.0, "options": options}}}
    artifacts = {"aux_network": stage_dir} if stage_dir else {}
    return encoder, build_objective(spec, encoder, artifacts, tiny_bert)


@pytest.fixture(scope="module")
def exported(tiny_bert, tmp_path_factory):
    """Stage 1 trained for two steps, then exported."""
    torch.manual_seed(0)
    encoder, objective = stage_one(tiny_bert)
    groups = [{"params": list(encoder.parameters()), "lr": 1e-3}, *objective.param_groups(1e-3)]
    optimizer = torch.optim.AdamW(groups)  # raises if the tied decoder were in two groups
    objective.train()
    for _ in range(2):
        batch = objective.prepare(encoder.pad(encoder.tokenize(SENTENCES, 32)))
        loss, terms, scalars = objective(batch)
        assert set(terms) == {"aux", "mlm", "total"} and 0 < scalars["masked_share"] < 0.5
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    out = tmp_path_factory.mktemp("stage1")
    objective.primary.export(out)
    return encoder, objective, out


def test_stage_one_shares_the_lower_layers_and_ties_the_decoder(exported):
    encoder, objective, out = exported
    stage = objective.primary
    assert stage.aux.head.decoder.weight is encoder.backbone.embeddings.word_embeddings.weight
    assert stage.k == 1  # half of the tiny BERT's 2 layers
    own = {id(p) for g in stage.param_groups(1e-3) for p in g["params"]}
    assert not own & {id(p) for p in encoder.parameters()}
    assert {"config.json", "model.safetensors", AUX_FILE, AUX_CONFIG} <= {p.name for p in out.iterdir()}


def test_stage_two_starts_from_stage_one_with_a_frozen_detached_copy(tiny_bert, exported):
    trained, stage1, out = exported
    encoder, objective = stage_two(tiny_bert, out)
    aux = objective.components[1]
    for (name, a), b in zip(encoder.backbone.state_dict().items(), trained.backbone.state_dict().values()):
        assert torch.equal(a, b), name
    assert torch.equal(aux.aux.extra[0].output.dense.weight, stage1.primary.aux.extra[0].output.dense.weight)
    assert aux.aux.head.decoder.weight is not encoder.backbone.embeddings.word_embeddings.weight  # untied copy
    assert not any(k.startswith("components.1.lower") for k in objective.state_dict())  # not resumable state
    assert "infocse_mlm.lower" in objective.frozen()
    in_groups = {id(p) for g in objective.param_groups(1e-3) for p in g["params"]}
    assert not in_groups & {id(p) for p in aux.lower.parameters()}

    objective.train()
    assert not aux.lower.training  # the frozen copy runs in eval mode
    batch = objective.prepare(encoder.pad(encoder.tokenize(SENTENCES, 32)))
    assert batch["aux_input_ids"].shape[0] == 2 * len(SENTENCES)  # both views masked, independently
    assert not torch.equal(batch["aux_input_ids"][:4], batch["aux_input_ids"][4:])
    shared = {"pooled": encoder(batch["input_ids"].repeat(2, 1), batch["attention_mask"].repeat(2, 1)).detach()}
    aux(batch, shared).losses["mlm"].backward()
    # h detached and the lower copy detached: the MLM reaches neither the encoder nor the copy
    assert all(p.grad is None for p in encoder.parameters())
    assert all(p.grad is None for p in aux.lower.parameters())
    assert aux.aux.extra[0].output.dense.weight.grad is not None  # the extra layers and head train


def test_stage_two_without_detach_trains_the_auxiliary_copy_not_the_encoder(tiny_bert, exported):
    """InfoCSE Table 6 "w/o gradient detach": the gradient reaches the auxiliary network's own
    lower copy (which trains, is optimised and checkpointed), never the encoder's lower layers."""
    _, _, out = exported
    encoder, objective = stage_two(tiny_bert, out, detach=False)
    aux = objective.components[1]
    assert not objective.frozen()
    in_groups = {id(p) for g in objective.param_groups(1e-3) for p in g["params"]}
    assert {id(p) for p in aux.lower.parameters()} <= in_groups
    assert any(k.startswith("components.1.lower.") for k in objective.state_dict())
    objective.train()
    assert aux.lower.training  # a trained copy: dropout on
    batch = objective.prepare(encoder.pad(encoder.tokenize(SENTENCES, 32)))
    pooled = encoder(batch["input_ids"].repeat(2, 1), batch["attention_mask"].repeat(2, 1))
    aux(batch, {"pooled": pooled.detach()}).losses["mlm"].backward()
    assert aux.lower.stack[0].output.dense.weight.grad.abs().sum() > 0
    assert aux.lower.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in encoder.parameters())  # h detached here: nothing else reaches it


def test_stage_two_lower_dropout_keeps_the_frozen_copy_in_train_mode(tiny_bert, exported):
    """The authors' BERT-large script leaves the frozen copy's dropout on (base: eval mode)."""
    _, _, out = exported
    _, objective = stage_two(tiny_bert, out, lower_dropout=True)
    objective.train()
    assert objective.components[1].lower.training and "infocse_mlm.lower" in objective.frozen()
    objective.eval()
    assert not objective.components[1].lower.training
    with pytest.raises(ConfigError, match="lower_dropout"):
        InfoCSEMLM.check_options({"detach": False, "lower_dropout": True})


def test_stage_one_is_one_masked_forward_and_h_is_its_cls(tiny_bert):
    """Section 3.1: both MLM objectives on the same (masked) input, one backbone forward; h is
    that forward's top-layer [CLS] and the auxiliary head reads its lower layers' states."""
    torch.manual_seed(0)
    encoder, objective = stage_one(tiny_bert)
    stage = objective.primary
    calls, seen = [], {}
    encoder.backbone.register_forward_hook(lambda m, args, kwargs, out: calls.append(kwargs["input_ids"]),
                                           with_kwargs=True)
    real_hidden = stage.aux.hidden

    def spy(h, lower, mask):
        seen.update(h=h, lower=lower)
        return real_hidden(h, lower, mask)

    stage.aux.hidden = spy
    objective.eval()  # no dropout: the reference forward below is the same computation
    batch = objective.prepare(encoder.pad(encoder.tokenize(SENTENCES, 32)))
    objective(batch)
    assert len(calls) == 1 and torch.equal(calls[0], batch["mlm_input_ids"])  # one forward, on the masked input
    with torch.no_grad():
        ref = encoder.backbone(input_ids=batch["mlm_input_ids"], attention_mask=batch["attention_mask"],
                               output_hidden_states=True)
    torch.testing.assert_close(seen["h"], ref.last_hidden_state[:, 0])
    torch.testing.assert_close(seen["lower"], ref.hidden_states[stage.k])


def test_whole_word_masking_selects_every_piece_of_a_word():
    from cselab.models.checkpoints import resolve_model
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model("all-MiniLM-L6-v2"))
    starts = mlm.word_start_table(tok)
    batch = tok(["the unbelievably extraordinary tokenization of everything works"] * 400, return_tensors="pt")
    ids, attn = batch["input_ids"], batch["attention_mask"]
    masked, labels = mlm.mask_tokens(ids, attn, 0.3, tok, torch.Generator().manual_seed(0), word_starts=starts)
    selected = labels != mlm.IGNORE
    pieces = tok.convert_ids_to_tokens(ids[0])
    for i, piece in enumerate(pieces):
        if piece.startswith("##"):  # a continuation piece is selected exactly when its word's first piece is
            first = max(j for j in range(i) if not pieces[j].startswith("##"))
            assert torch.equal(selected[:, i], selected[:, first])
    words = [i for i, piece in enumerate(pieces) if not piece.startswith("##") and piece not in ("[CLS]", "[SEP]")]
    assert selected[:, words].float().mean().item() == pytest.approx(0.3, abs=0.03)


def test_masking_ignores_padding_added_beyond_the_natural_width(tiny_bert):
    """training.pad_to_multiple_of is operational: stage 1 masks and encodes the batch at its
    natural width, so a batch padded further gives the same masks and the same loss."""
    def loss(extra):
        torch.manual_seed(0)
        encoder, objective = stage_one(tiny_bert)
        objective.eval()
        batch = encoder.pad(encoder.tokenize(SENTENCES, 32))
        batch["lengths"] = batch["attention_mask"].sum(1)
        pad = encoder.tokenizer.pad_token_id
        batch["input_ids"] = torch.cat([batch["input_ids"], torch.full((len(SENTENCES), extra), pad)], 1)
        batch["attention_mask"] = torch.cat([batch["attention_mask"], torch.zeros(len(SENTENCES), extra,
                                                                                  dtype=torch.long)], 1)
        torch.manual_seed(1)
        prepared = objective.prepare(batch)
        return prepared["mlm_input_ids"], objective(prepared)[0]

    (ids, a), (wide, b) = loss(0), loss(11)
    assert torch.equal(ids, wide) and a.item() == b.item()
def test_stage_two_without_pretraining_needs_no_artifact(tiny_bert):
    assert InfoCSEMLM.requires(InfoCSEMLM.check_options({"pretrained": False})) == {}
    assert InfoCSEMLM.requires(InfoCSEMLM.check_options({})) == {"aux_network": "infocse-pretrain"}
    encoder, objective = stage_two(tiny_bert, None, pretrained=False)
    objective.train()
    loss, terms, _ = objective(objective.prepare(encoder.pad(encoder.tokenize(SENTENCES, 32))))
    assert set(terms) == {"contrastive", "mlm", "total"}
    loss.backward()
    assert encoder.backbone.encoder.layer[1].output.dense.weight.grad is not None  # through h


def test_views_must_match_the_primary(tiny_bert):
    encoder, objective = stage_two(tiny_bert, None, pretrained=False, views=3)
    with pytest.raises(ConfigError, match=r"infocse_mlm needs the primary method's pooled \[CLS\] of 3 views"):
        objective(objective.prepare(encoder.pad(encoder.tokenize(SENTENCES, 32))))


@pytest.mark.parametrize("options, message", [
    ({"mask_ratio": 1.2}, r"'options\.mask_ratio': must be a number in \(0, 1\), got 1\.2"),
    ({"mask_rate": 0.3, "mask_ratio": 0.3}, r"'options\.mask_ratio': 'mask_ratio' is the former name|former name of"),
    ({"lower_layers": 0}, r"'options\.lower_layers': must be an integer >= 1 or null, got 0"),
    ({"views": 0}, r"'options\.views': must be an integer >= 1, got 0"),
    ({"mask": 0.3}, r"unknown config key 'options\.mask'; valid keys here: .*mask_ratio.*\(method 'infocse_mlm'\)"),
])
def test_bad_options(options, message):
    with pytest.raises(ConfigError, match=message):
        InfoCSEMLM.check_options(options)


def test_mlm_head_comes_from_a_checkpoint_that_has_one(tmp_path, tiny_bert):
    from transformers import AutoConfig, BertForMaskedLM

    config = AutoConfig.from_pretrained(tiny_bert)
    torch.manual_seed(1)
    model = BertForMaskedLM(config)
    with torch.no_grad():
        model.cls.predictions.transform.dense.weight.normal_()
        model.cls.predictions.bias.fill_(0.5)
    model.save_pretrained(tmp_path)
    head = mlm.make_mlm_head(config, tmp_path)
    assert torch.equal(head.transform.dense.weight, model.cls.predictions.transform.dense.weight)
    assert torch.allclose(head.decoder.bias, torch.full_like(head.decoder.bias, 0.5))
    assert torch.equal(head.decoder.weight, model.bert.embeddings.word_embeddings.weight)  # tied, stored once
    fresh = mlm.make_mlm_head(config, tiny_bert)  # a checkpoint without a head: BERT's init
    assert fresh.transform.dense.weight.std().item() == pytest.approx(0.02, rel=0.2)


def test_without_pretraining_the_extra_layers_are_the_backbones_upper_layers(tiny_bert):
    encoder, objective = stage_two(tiny_bert, None, pretrained=False)
    extra = objective.components[1].aux.extra
    assert len(extra) == 2
    top = encoder.backbone.encoder.layer
    assert torch.equal(extra[0].output.dense.weight, top[0].output.dense.weight)  # the tiny BERT has 2 layers
    assert extra[1].output.dense.weight is not top[1].output.dense.weight  # a copy, not shared
    _, fresh = stage_two(tiny_bert, None, pretrained=False, extra_init="random")
    assert not torch.equal(fresh.components[1].aux.extra[0].output.dense.weight, top[0].output.dense.weight)


def test_load_head_applies_the_saved_training_head_in_eval_mode(tmp_path):
    import json

    import numpy as np

    from cselab.models.heads import load_head, make_head, save_head

    torch.manual_seed(0)
    head = make_head("batchnorm", 8)
    head.train()
    head(torch.randn(32, 8) * 3 + 1)  # running statistics move away from their init
    save_head(tmp_path, head, "batchnorm")  # the kind beside the weights: no method registry needed
    assert json.loads((tmp_path / "head.json").read_text()) == {"kind": "batchnorm"}
    x = np.random.default_rng(0).normal(size=(5, 8)).astype(np.float32)
    head.eval()
    expected = head(torch.from_numpy(x)).detach().numpy()
    assert np.allclose(load_head(tmp_path)(x), expected, atol=1e-6)
    (tmp_path / "head.pt").unlink()
    with pytest.raises(Exception, match="has no training head"):
        load_head(tmp_path)


def test_a_pooler_table_needs_trained_experiments():
    from pathlib import Path

    from cselab.pipeline import config as cc
    from cselab.pipeline import targets as ct
    from tests.test_config import deep_update

    root = Path(__file__).resolve().parents[1]
    cfg = read_yaml(root / "config.yaml")
    bad = deep_update(cfg, {"tables": {"infocse_table9": {"experiments": ["untrained-bert-base"]}}})
    with pytest.raises(ConfigError, match=r"'tables\.infocse_table9\.experiments\[0\]': 'untrained-bert-base' is "
                                          r"untrained; a pooler table needs training runs"):
        cc.validate(bad)
    valid = cc.validate(cfg)
    files = ct.table_inputs(valid, "infocse_table9")["infocse-bert-base-s42"]
    assert [Path(f).name for f in files] == ["stsb_dev_head.json", "stsb_dev.json"]


def test_the_former_option_name_is_the_same_experiment():
    """One name per concept (mask_ratio, as DiffCSE's): InfoCSE's former mask_rate is an alias
    that gives the same spec, so the same experiment, nothing retrained."""
    from pathlib import Path

    from cselab.pipeline import config as cc
    from tests.test_config import deep_update

    cfg = read_yaml(Path(__file__).resolve().parents[1] / "config.yaml")
    old = deep_update(cfg, {"experiments": {"info-mask20-bert-base": {  # written by hand beside its sweep point
        "plm": "bert-base", "method": "infocse", "auxiliaries": {"infocse_mlm": {"options": {"mask_rate": 0.2}}}}}})
    old["experiments"]["info-mask20-bert-base"]["auxiliaries"]["infocse_mlm"]["options"].pop("mask_ratio", None)
    new_spec = cc.experiment_spec(cc.validate(cfg), "info-mask20-bert-base-s42")
    assert cc.experiment_spec(cc.validate(old), "info-mask20-bert-base-s42") == new_spec
    assert new_spec["auxiliaries"]["infocse_mlm"]["options"]["mask_ratio"] == 0.2
    assert InfoCSEMLM.check_options({"mask_rate": 0.25}).mask_ratio == 0.25
