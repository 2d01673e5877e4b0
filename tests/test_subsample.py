import json
import re

import pytest

from cselab.errors import ConfigError, DataError
from cselab.data.subsample import STRATEGIES, expand_corpus, subsamples


def word_units(text):
    """One unit per whitespace-separated word."""
    return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


FIVE = "one two three four five"


@pytest.mark.parametrize("strategy, expected", [
    ("none", []),
    ("adjacent", ["one two", "three four"]),
    ("overlapping", ["one two", "two three", "three four", "four five"]),
    # C (dropped: the sentence), C[:2], C[2:], then their halves, breadth first
    ("subsuming", ["one two", "three four five", "one", "two", "three", "four five", "four", "five"]),
])
def test_five_units(strategy, expected):
    assert subsamples(FIVE, word_units(FIVE), strategy) == expected


def test_multiword_units_take_the_exact_span():
    text = "He came home,  and she  left."
    units = [(0, 13), (15, 29)]  # "He came home," / "and she  left."
    assert subsamples(text, units, "subsuming") == ["He came home,", "and she  left."]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_one_unit_adds_nothing(strategy):
    assert subsamples("  solo sentence. ", [(2, 16)], strategy) == []


@pytest.mark.parametrize("strategy, expected", [
    ("none", []), ("adjacent", []), ("overlapping", []), ("subsuming", ["alpha", "beta"]),
])
def test_two_units(strategy, expected):
    assert subsamples(" alpha beta ", word_units(" alpha beta "), strategy) == expected


def test_three_units():
    t = "a b c"
    assert subsamples(t, word_units(t), "adjacent") == ["a b"]
    assert subsamples(t, word_units(t), "overlapping") == ["a b", "b c"]
    assert subsamples(t, word_units(t), "subsuming") == ["a", "b c", "b", "c"]


def test_dedupe_within_sentence():
    t = "yes yes yes yes"
    assert subsamples(t, word_units(t), "overlapping") == ["yes yes"]
    assert subsamples(t, word_units(t), "subsuming") == ["yes yes", "yes"]
    assert subsamples(t, [], "subsuming") == []


def test_min_words():
    assert subsamples(FIVE, word_units(FIVE), "subsuming", min_words=2) == [
        "one two", "three four five", "four five"]
    assert subsamples(FIVE, word_units(FIVE), "overlapping", min_words=3) == []


def test_unknown_strategy():
    with pytest.raises(ConfigError, match=r"training\.subsampling.*'halves'.*none, adjacent, overlapping, subsuming"):
        subsamples(FIVE, word_units(FIVE), "halves")


def write_spans(path, texts):
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            units = [list(u) for u in word_units(t)]
            f.write(json.dumps({"i": i, "text": t, "n": len(units), "units": units}) + "\n")


def test_expand_corpus(tmp_path):
    spans = tmp_path / "spans.jsonl"
    write_spans(spans, ["a b c", "single", "x y"])
    out = tmp_path / "out" / "train.txt"
    stats = expand_corpus(spans, "overlapping", out)
    assert out.read_text(encoding="utf-8").splitlines() == ["a b c", "a b", "b c", "single", "x y"]
    assert stats == {"n_original": 3, "n_added": 2, "n_total": 5, "added_per_sentence_mean": 2 / 3,
                     "strategy": "overlapping", "min_words": 1}
    stats = expand_corpus(spans, "subsuming", out, min_words=1)
    assert out.read_text(encoding="utf-8").splitlines() == [
        "a b c", "a", "b c", "b", "c", "single", "x y", "x", "y"]
    assert stats["n_added"] == 6
    stats = expand_corpus(spans, "none", out)
    assert out.read_text(encoding="utf-8").splitlines() == ["a b c", "single", "x y"]
    assert stats["n_added"] == 0 and stats["n_total"] == 3
    assert [p.name for p in out.parent.iterdir()] == ["train.txt"]


def test_expand_corpus_errors(tmp_path):
    spans = tmp_path / "spans.jsonl"
    write_spans(spans, ["a b"])
    with pytest.raises(ConfigError, match=r"training\.subsampling"):
        expand_corpus(spans, "random", tmp_path / "o.txt")
    with pytest.raises(ConfigError, match=r"spans\.min_words"):
        expand_corpus(spans, "adjacent", tmp_path / "o.txt", min_words=0)
    write_spans(spans, ["a\nb"])
    with pytest.raises(DataError, match="line break"):
        expand_corpus(spans, "adjacent", tmp_path / "o.txt")
    assert not (tmp_path / "o.txt").exists()
    spans.write_text("")
    with pytest.raises(DataError, match="empty"):
        expand_corpus(spans, "adjacent", tmp_path / "o.txt")
