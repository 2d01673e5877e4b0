"""The tokenised corpus (flat tensors, on-disk cache), tensor batches, the vectorised CompCSE
partition, token-budget evaluation batches, and the throughput benchmark staying runnable."""

from __future__ import annotations

import csv
import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cselab.data.tokens import TokenizedCorpus, tokenize_corpus, tokenizer_fingerprint
from cselab.models.encoder import pad_batch, token_batches
from cselab.training.methods.compcse import split_batch, split_ids, split_rows
from tests.helpers import make_corpus, make_senteval

ROOT = Path(__file__).resolve().parents[1]


def random_rows(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[101] + [rng.randrange(1000, 2000) for _ in range(rng.randrange(0, 12))] + [102] for _ in range(n)]


@pytest.mark.parametrize("multiple", [1, 8])
def test_batch_equals_the_python_padding(multiple):
    rows = random_rows(50)
    corpus = TokenizedCorpus.from_lists(rows)
    assert len(corpus) == 50 and corpus[7] == rows[7]
    index = torch.tensor([3, 0, 49, 17, 17])
    got = corpus.batch(index, pad_id=0, multiple=multiple)
    want = pad_batch([rows[i] for i in index.tolist()], 0)
    width = want["input_ids"].size(1)
    assert got["input_ids"].size(1) == (-(-width // multiple) * multiple)
    assert torch.equal(got["input_ids"][:, :width], want["input_ids"])
    assert torch.equal(got["attention_mask"][:, :width], want["attention_mask"])
    assert not got["attention_mask"][:, width:].any() and (got["input_ids"][:, width:] == 0).all()


@pytest.mark.parametrize("k", [2, 3, 4])
def test_split_rows_is_split_ids_for_every_length(k):
    rows = [[101] + list(range(1000, 1000 + n)) + [102] for n in range(0, 9)] + random_rows(40, seed=k)
    parts = split_rows(TokenizedCorpus.from_lists(rows), k)
    assert len(parts) == k * len(rows)
    for i, row in enumerate(rows):
        assert [parts[j * len(rows) + i] for j in range(k)] == split_ids(row, k)


def test_split_batch_matches_split_ids_on_a_padded_batch():
    rows = random_rows(20, seed=3)
    batch = pad_batch(rows, 0)
    out = split_batch(batch["input_ids"], batch["attention_mask"], 2, 0)
    got = [r[m.bool()].tolist() for r, m in zip(out["input_ids"], out["attention_mask"])]
    assert got == [split_ids(r, 2)[j] for j in range(2) for r in rows]


def test_token_cache_is_reused_and_keyed(tiny_encoder, tmp_path, monkeypatch):
    texts = [f"sentence number {i} with some words" for i in range(30)]
    tok = tiny_encoder.tokenizer
    first = tokenize_corpus(texts, tok, 8, tmp_path)
    assert [first[i] for i in range(30)] == tok(texts, truncation=True, max_length=8)["input_ids"]
    assert len(list(tmp_path.glob("*.npz"))) == 1

    calls = []
    monkeypatch.setattr(type(tok), "__call__", lambda self, *a, **k: calls.append(1) or pytest.fail("re-tokenised"))
    again = tokenize_corpus(texts, tok, 8, tmp_path)
    assert torch.equal(again.ids, first.ids) and torch.equal(again.offsets, first.offsets) and not calls
    monkeypatch.undo()

    tokenize_corpus(texts, tok, 16, tmp_path)          # another max_len: another entry
    tokenize_corpus(texts[:-1], tok, 8, tmp_path)      # other texts: another entry
    assert len(list(tmp_path.glob("*.npz"))) == 3
    for f in tmp_path.glob("*.npz"):                   # a corrupt entry is rebuilt, not trusted
        f.write_bytes(b"not an npz")
    rebuilt = tokenize_corpus(texts, tok, 8, tmp_path)
    assert torch.equal(rebuilt.ids, first.ids)


def test_tokenizer_fingerprint_sees_the_vocabulary(tiny_encoder, tmp_path):
    tok = tiny_encoder.tokenizer
    assert tokenizer_fingerprint(tok) == tokenizer_fingerprint(tok)
    tok.save_pretrained(tmp_path)
    state = json.loads((tmp_path / "tokenizer.json").read_text())
    vocab = state["model"]["vocab"]
    a, b = list(vocab)[2000:2002]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (tmp_path / "tokenizer.json").write_text(json.dumps(state))
    from transformers import AutoTokenizer

    assert tokenizer_fingerprint(AutoTokenizer.from_pretrained(tmp_path)) != tokenizer_fingerprint(tok)


def test_token_batches_respect_rows_and_tokens():
    rng = random.Random(0)
    lengths = sorted(rng.randrange(3, 200) for _ in range(500))
    batches = token_batches(lengths, batch_size=64, max_tokens=2048)
    assert [i for b in batches for i in b] == list(range(500))
    for b in batches:
        assert len(b) <= 64
        assert len(b) == 1 or len(b) * lengths[b[-1]] <= 2048
    assert max(len(b) for b in batches) == 64 and min(len(b) for b in batches) < 64
    assert [len(b) for b in token_batches(lengths, 100)] == [100] * 5


def test_encode_by_tokens_gives_the_same_embeddings(tiny_encoder):
    rng = random.Random(1)
    sentences = [" ".join(f"w{rng.randrange(50)}" for _ in range(rng.randrange(1, 40))) for _ in range(60)]
    a = tiny_encoder.encode(sentences, batch_size=16)
    b = tiny_encoder.encode(sentences, batch_size=64, max_tokens=300)
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_loop_uses_the_token_cache_and_trains_the_same(tiny_bert, tmp_path):
    from cselab.training.loop import train
    from tests.test_train import spec_for

    corpus = make_corpus(tmp_path / "corpus.txt", 40)
    spec = spec_for(tiny_bert, "compcse", max_steps=4, eval_steps=None, log_steps=1)
    plain = train(spec, corpus, lambda enc: 0.0, tmp_path / "a", device="cpu")
    cached = train(spec, corpus, lambda enc: 0.0, tmp_path / "b", device="cpu", token_cache=tmp_path / "tokens")
    again = train(spec, corpus, lambda enc: 0.0, tmp_path / "c", device="cpu", token_cache=tmp_path / "tokens")
    assert len(list((tmp_path / "tokens").glob("*.npz"))) == 1
    losses = [[r["loss"] for r in res.curve if "loss" in r] for res in (plain, cached, again)]
    assert losses[0] == losses[1] == losses[2] and len(losses[0]) == 4


def test_throughput_benchmark_runs_and_writes_ratios(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks_scripts"))
    import throughput

    corpus = make_corpus(tmp_path / "corpus.txt", 40)
    senteval = make_senteval(tmp_path / "senteval", n_extra=5)
    out = tmp_path / "bench.csv"
    throughput.main(["--corpus", str(corpus), "--senteval", str(senteval), "--size", "tiny", "--steps", "4",
                     "--batch-size", "8", "--rounds", "1", "--profile", "--out", str(out)])
    rows = list(csv.DictReader(out.open()))
    kinds = {(r["kind"], r["method"]) for r in rows}
    assert {("train_ratio", "simcse"), ("train_ratio", "compcse"), ("sts_ratio", "-"),
            ("host_overhead", "simcse")} <= kinds
    overhead = [float(r["value"]) for r in rows if r["kind"] == "host_overhead"]
    assert all(0 <= v < 1 for v in overhead)
    sts = {r["side"]: r["avg_spearman"] for r in rows if r["kind"] == "sts"}
    assert abs(float(sts["pipeline"]) - float(sts["plain"])) < 0.05  # the same model, the same scores
