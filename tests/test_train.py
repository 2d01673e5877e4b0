"""The shared training loop on a tiny random BERT: curve, best checkpoint, determinism."""

import csv
import json
import math

import pytest

from cselab.training.loop import train
from tests.helpers import make_corpus, training_defaults


def spec_for(tiny_bert, objective="simcse", options=None, seed=7, auxiliaries=None, **training):
    t = training_defaults(**{"batch_size": 8, "max_len": 16, "epochs": 1, "max_steps": 6, "lr": 1e-3,
                             "temperature": 0.05, "pooler": "cls", "eval_steps": 3, "log_steps": 2, "precision": "fp32",
                             **training})
    return {"id": f"{objective}-tiny-s{seed}", "name": f"{objective}-tiny", "plm": "tiny", "model": str(tiny_bert),
            "method": objective, "objective": objective, "weight": 1.0, "options": options or {},
            "auxiliaries": auxiliaries or {}, "signature": objective, "seed": seed, "training": t}


def fake_dev(scores):
    it = iter(scores)
    return lambda encoder: next(it)


def test_train_writes_curve_and_keeps_best_checkpoint(tiny_bert, tmp_path):
    corpus = make_corpus(tmp_path / "corpus.txt", 60)
    res = train(spec_for(tiny_bert, "compcse", {"partitions": 2}), corpus, fake_dev([10.0, 30.0, 20.0]),
                tmp_path / "out")
    assert (res.best_step, res.best_dev, res.steps) == (3, 30.0, 6)
    rows = list(csv.DictReader((tmp_path / "out" / "curve.csv").open()))
    assert [r["step"] for r in rows if r["stsb_dev_spearman"]] == ["0", "3", "6"]
    assert [r["step"] for r in rows if r["loss"]] == ["2", "4", "6"]
    assert float(rows[-2]["lr"]) == 0.0  # linear decay reaches 0 at the last step
    meta = json.loads((tmp_path / "out" / "model" / "cselab.json").read_text())
    assert meta["best_step"] == 3 and (tmp_path / "out" / "model" / "modules.json").is_file()


def test_epochs_and_partial_batches(tiny_bert, tmp_path):
    corpus = make_corpus(tmp_path / "corpus.txt", 17)  # 2 full batches of 8 + a batch of 1 (dropped)
    res = train(spec_for(tiny_bert, max_steps=None, epochs=2, eval_steps=100), corpus,
                fake_dev([1.0, 2.0]), tmp_path / "out")
    assert res.steps == 4 and res.best_step == 4


def test_same_seed_same_curve(tiny_bert, tmp_path):
    corpus = make_corpus(tmp_path / "corpus.txt", 40)
    runs = [train(spec_for(tiny_bert), corpus, lambda enc: 1.0, tmp_path / f"out{i}").curve for i in range(2)]
    losses = [[r["loss"] for r in curve if "loss" in r] for curve in runs]
    assert losses[0] == losses[1]
    other = train(spec_for(tiny_bert, seed=8), corpus, lambda enc: 1.0, tmp_path / "out3").curve
    assert [r["loss"] for r in other if "loss" in r] != losses[0]


def test_dev_evaluation_at_multiples_of_eval_steps_only(tiny_bert, tmp_path):
    """As the references' trainer: steps 3 and 6 of 7, not the last; eval_at_end adds it."""
    corpus = make_corpus(tmp_path / "corpus.txt", 60)
    res = train(spec_for(tiny_bert, max_steps=7), corpus, lambda enc: 1.0, tmp_path / "a")
    assert [r["step"] for r in res.curve if "stsb_dev_spearman" in r] == [0, 3, 6] and res.best_step == 3
    res = train(spec_for(tiny_bert, max_steps=7, eval_at_end=True), corpus, fake_dev([1.0, 2.0, 3.0, 4.0]),
                tmp_path / "b")
    assert [r["step"] for r in res.curve if "stsb_dev_spearman" in r] == [0, 3, 6, 7] and res.best_step == 7


def test_named_loss_terms_are_window_means(tiny_bert, tmp_path):
    corpus = make_corpus(tmp_path / "corpus.txt", 60)
    res = train(spec_for(tiny_bert, "compcse", log_steps=3), corpus, lambda enc: 1.0, tmp_path / "out")
    rows = [r for r in res.curve if "loss" in r]
    assert [r["step"] for r in rows] == [3, 6]
    assert all(r["loss.contrastive"] == pytest.approx(r["loss"]) for r in rows)


def test_fp16_trains_with_a_scaler_on_cpu(tiny_bert, tmp_path):
    corpus = make_corpus(tmp_path / "corpus.txt", 40)
    res = train(spec_for(tiny_bert, precision="fp16", max_steps=4, checkpoint_steps=2), corpus, lambda enc: 1.0,
                tmp_path / "out", checkpoint_dir=tmp_path / "out" / "resume")
    assert res.steps == 4 and all(math.isfinite(r["loss"]) for r in res.curve if "loss" in r)


def test_too_small_corpus_is_a_clear_error(tiny_bert, tmp_path):
    from cselab.errors import DataError

    (tmp_path / "c.txt").write_text("only one line\n\n")
    with pytest.raises(DataError, match=r"c\.txt has 1 non-empty line"):
        train(spec_for(tiny_bert), tmp_path / "c.txt", lambda enc: 1.0, tmp_path / "out")
