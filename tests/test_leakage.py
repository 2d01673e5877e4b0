"""The leakage audit finds evaluation sentences planted in a training corpus, exactly and by
8-gram overlap, agrees with a brute-force count, and finds nothing in a clean corpus."""

import random

import pytest

from cselab.evaluation.leakage import audit, evaluation_sets, words
from tests.helpers import make_beir, make_corpus, make_senteval, make_transfer, random_sentence


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("senteval")
    make_senteval(root, n_extra=30)
    make_transfer(root)
    beir = make_beir(tmp_path_factory.mktemp("beir") / "toy")
    return evaluation_sets(root, {"toy": beir})


def brute_force(corpus_lines, sentences, n=8):
    """Exact and n-gram matches of ``sentences`` in ``corpus_lines``, the slow obvious way."""
    lines = [words(line) for line in corpus_lines]
    whole = set(lines)
    grams = {line[i:i + n] for line in lines for i in range(len(line) - n + 1)}
    distinct = {words(s) for s in sentences} - {()}
    exact = {s for s in distinct if s in whole}
    shared = {s for s in distinct if any(s[i:i + n] in grams for i in range(len(s) - n + 1))}
    return len(distinct), len(exact), len(exact | shared)


def test_planted_sentences_are_found(sets, tmp_path):
    long_sts = next(s for s in sets["STS12"] if len(words(s)) >= 9)
    planted = [
        sets["STS13"][0],                                                 # exact (a short STS sentence)
        "Some words before " + long_sts + " and some after",              # its 8-grams, not exact
        sets["MR"][3],                                                    # a transfer sentence, exact
        sets["BEIR toy queries"][0].upper(),                             # a BEIR query, other case
    ]
    corpus = make_corpus(tmp_path / "corpus.txt", 300, seed=5)
    lines = corpus.read_text().splitlines()
    for i, line in enumerate(planted):
        lines.insert(50 * i + 7, line)
    corpus.write_text("\n".join(lines) + "\n")
    rows = {r["set"]: r for r in audit({"corpus": corpus}, sets)}
    assert rows["STS13"]["exact"] >= 1 and rows["MR"]["exact"] >= 1 and rows["BEIR toy queries"]["exact"] == 1
    assert rows["STS12"]["ngram"] >= 1 and rows["STS12"]["ngram"] > rows["STS12"]["exact"]
    for name, sentences in sets.items():
        assert (rows[name]["sentences"], rows[name]["exact"], rows[name]["ngram"]) == brute_force(lines, sentences), name
    assert rows["MR"]["exact_pct"] == pytest.approx(100 * rows["MR"]["exact"] / rows["MR"]["sentences"], abs=1e-3)


def test_a_clean_corpus_leaks_nothing(sets, tmp_path):
    rng = random.Random(2)
    corpus = tmp_path / "clean.txt"
    corpus.write_text("".join(f"zebra {random_sentence(rng)} quokka\n" for _ in range(200)))
    rows = audit({"clean": corpus, "clean again": corpus}, sets)
    assert len(rows) == 2 * len(sets) and {r["corpus"] for r in rows} == {"clean", "clean again"}
    assert all(r["exact"] == r["ngram"] == 0 for r in rows)
