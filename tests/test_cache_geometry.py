"""Embedding cache hit/miss/invalidation; alignment and uniformity against a direct numpy computation."""

import numpy as np
import pytest

from cselab.evaluation.encoding import EmbeddingCache
from cselab.evaluation.geometry import align_uniform
from cselab.data.tasks import Subset


def test_cache_hit_miss_and_invalidation(tiny_encoder, tmp_path):
    model = tmp_path / "model"
    tiny_encoder.save(model)
    calls = []

    def encode(s):
        calls.append(len(s))
        return tiny_encoder.encode(s)

    sents = ["a b c", "d e", "f"]
    cache = EmbeddingCache(tmp_path / "cache", model, {"pooler": "cls", "max_len": 32})
    first = cache.get("toy", sents, encode)
    again = EmbeddingCache(tmp_path / "cache", model, {"pooler": "cls", "max_len": 32}).get("toy", sents, encode)
    np.testing.assert_array_equal(first, again)
    assert calls == [3]
    cache.get("toy", sents + ["new"], encode)  # same name, different content: miss
    EmbeddingCache(tmp_path / "cache", model, {"pooler": "avg", "max_len": 32}).get("toy", sents, encode)
    assert calls == [3, 4, 3]
    (model / "config.json").write_text((model / "config.json").read_text() + " ")  # changed checkpoint
    EmbeddingCache(tmp_path / "cache", model, {"pooler": "cls", "max_len": 32}).get("toy", sents, encode)
    assert calls == [3, 4, 3, 3]


@pytest.mark.parametrize("damage", ["cut", "rewritten", "garbage"])
def test_damaged_cache_entry_is_never_read_as_complete(tmp_path, caplog, damage):
    """A cached array cut short, rewritten with another shape, or unreadable, beside a record
    that still matches its sentences: a miss said in the log, encoded again, never loaded."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    calls = []

    def encode(s):
        calls.append(len(s))
        return rows

    cache = EmbeddingCache(tmp_path / "cache", model, {"pooler": "cls"})
    cache.get("toy", ["a", "b", "c"], encode)
    npy = cache.dir / "toy.npy"
    if damage == "cut":
        npy.write_bytes(npy.read_bytes()[:-8])
    elif damage == "rewritten":  # a whole array of another shape, the record's size kept
        np.save(npy, np.zeros((4, 3), dtype=np.float32))
    else:
        npy.write_bytes(b"\0" * npy.stat().st_size)
    with caplog.at_level("WARNING", logger="cselab.evaluation.encoding"):
        got = EmbeddingCache(tmp_path / "cache", model, {"pooler": "cls"}).get("toy", ["a", "b", "c"], encode)
    np.testing.assert_array_equal(got, rows)
    assert calls == [3, 3] and "is damaged" in caplog.text and "encoding again" in caplog.text
    assert EmbeddingCache(tmp_path / "cache", model, {"pooler": "cls"}).get("toy", ["a", "b", "c"], encode).shape \
        == (3, 4) and calls == [3, 3]  # mended: a hit again


def test_align_uniform_matches_numpy():
    rng = np.random.default_rng(0)
    sents = [f"s{i}" for i in range(12)]
    table = {s: rng.normal(size=8) for s in sents}
    subset = Subset("toy", sents[:6], sents[6:], np.array([5.0, 4.5, 4.0, 1.0, 4.2, 0.0]))
    got = align_uniform(lambda s: np.stack([table[x] for x in s]), subset)

    def unit(v):
        return v / np.linalg.norm(v)

    pos = [(a, b) for a, b, g in zip(subset.sent1, subset.sent2, subset.gold) if g > 4]
    align = np.mean([np.sum((unit(table[a]) - unit(table[b])) ** 2) for a, b in pos])
    pairs = [(i, j) for i in range(12) for j in range(i + 1, 12)]
    uniform = np.log(np.mean([np.exp(-2 * np.sum((unit(table[sents[i]]) - unit(table[sents[j]])) ** 2))
                              for i, j in pairs]))
    assert got["alignment"] == pytest.approx(align, rel=1e-5)
    assert got["uniformity"] == pytest.approx(uniform, rel=1e-5)
    assert got["n_positive_pairs"] == 3 and got["n_sentences"] == 12
