"""Tests for cselab.data.beir and cselab.evaluation.retrieval: BEIR download/verify over a
loopback server, chunked search, pytrec_eval metrics on a hand-checked example, and the STS-B
in-domain retrieval dataset.

Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from pathlib import Path

import numpy as np
import pytest

from cselab.errors import DataError
from cselab.data.beir import beir_subsets, load_beir, prepare_beir, stsb_retrieval_dataset
from tests.helpers import make_beir
from cselab.evaluation.retrieval import doc_text, evaluate_retrieval, evaluate_run, retrieve, search
from tests.helpers import find_shared_data

# --------------------------------------------------------------------------- a tiny BEIR dataset

CORPUS = [
    {"_id": "d1", "title": "Cats", "text": "A cat sleeps on the mat."},
    {"_id": "d2", "title": "", "text": "Dogs bark at night."},
    {"_id": "d3", "text": "The river floods in spring."},  # no title
    {"_id": "q2", "title": "Self", "text": "A document sharing its id with query q2."},
]
QUERIES = [
    {"_id": "q1", "text": "where do cats sleep"},
    {"_id": "q2", "text": "why do dogs bark"},
    {"_id": "q3", "text": "a query without qrels"},
]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td3\t0\nq2\td2\t1\n"


def _files(qrels: str = QRELS, corpus=CORPUS, queries=QUERIES) -> dict[str, str]:
    return {
        "corpus.jsonl": "".join(json.dumps(d) + "\n" for d in corpus),
        "queries.jsonl": "".join(json.dumps(q) + "\n" for q in queries),
        "qrels/test.tsv": qrels,
    }


def _corpus(data) -> dict[str, str]:
    """A streamed corpus as id -> BEIR text (tests only: the library never builds this dict)."""
    return {i: t for ids, texts in data.corpus_chunks(2) for i, t in zip(ids, texts)}


def _zip(files: dict[str, str | bytes], prefix: str = "tiny/") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(prefix, "")  # directory entry, as in the BEIR zips
        for name, body in files.items():
            zf.writestr(prefix + name, body)
    return buf.getvalue()


def _write_tree(base: Path, files: dict[str, str]) -> Path:
    for name, body in files.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_text(body)
    return base


def _prepare(server, tmp_path, body: bytes, **kw):
    server.files["/tiny.zip"] = body
    return prepare_beir("tiny", url=server.url("/tiny.zip"), out_dir=tmp_path / "tree",
                        manifest=tmp_path / "manifest.json", download_dir=tmp_path / "dl", **kw)


def test_prepare_beir_download_extract_verify(server, tmp_path):
    got = _prepare(server, tmp_path, _zip(_files()))
    root = tmp_path / "tree" / "tiny"
    assert got["root"] == str(root.resolve())
    assert got["source"] == server.url("/tiny.zip") and got["archive"]["bytes"] > 0
    assert got["counts"] == {"docs": 4, "queries": 3, "qrels": 3, "queries_with_qrels": 2}
    assert set(got["files"]) == {"corpus.jsonl", "queries.jsonl", "qrels/test.tsv"}
    assert all(len(v["sha256"]) == 64 for v in got["files"].values())
    assert json.loads((tmp_path / "manifest.json").read_text()) == got
    # Second run: cached zip, already extracted.
    _prepare(server, tmp_path, _zip(_files()))
    assert server.hits["/tiny.zip"] == 1

    data = load_beir(root)
    assert set(data.queries) == {"q1", "q2"}  # q3 has no qrels
    assert data.qrels == {"q1": {"d1": 2, "d3": 0}, "q2": {"d2": 1}}
    # the corpus is streamed, never a dict: BEIR's text is (title + " " + text).strip()
    chunks = list(data.corpus_chunks(3))
    assert [len(ids) for ids, _ in chunks] == [3, 1]
    docs = _corpus(data)
    assert docs["d3"] == "The river floods in spring." == doc_text({"text": "The river floods in spring."})
    assert docs["d1"] == "Cats A cat sleeps on the mat." and docs["d2"] == "Dogs bark at night."


def test_prepare_beir_local_path_used_in_place(server, tmp_path):
    local = _write_tree(tmp_path / "local" / "tiny", _files())
    got = prepare_beir("tiny", url=server.url("/never.zip"), path=str(local), out_dir=tmp_path / "tree",
                       manifest=tmp_path / "m.json", download_dir=tmp_path / "dl")
    assert got["root"] == str(local.resolve()) and got["archive"] is None
    assert not (tmp_path / "tree").exists() and not server.hits
    # The parent folder works too.
    got = prepare_beir("tiny", path=str(tmp_path / "local"), out_dir=tmp_path / "tree",
                       manifest=tmp_path / "m.json", download_dir=tmp_path / "dl")
    assert got["root"] == str(local.resolve())


def test_prepare_beir_subsets_cqadupstack_layout(tmp_path):
    base = tmp_path / "cqadupstack"
    for forum in ("android", "gis"):
        _write_tree(base / forum, _files())
    got = prepare_beir("cqadupstack", path=str(base), out_dir=tmp_path / "t", manifest=tmp_path / "m.json",
                       download_dir=tmp_path / "dl")
    assert set(got["subsets"]) == {"android", "gis"} and got["counts"]["docs"] == 8
    assert "android/corpus.jsonl" in got["files"]
    assert [p.name for p in beir_subsets(base)] == ["android", "gis"]
    with pytest.raises(DataError, match="sub-datasets"):
        load_beir(base)
    # Each forum is retrieved on its own corpus; the metrics are their mean.
    got = evaluate_retrieval(_bow_encoder(), base, k=3, chunk_size=2, k_values=(1, 3))
    assert set(got["subsets"]) == {"android", "gis"} and got["n_queries"] == 4
    assert got["metrics"]["recall@1"] == got["subsets"]["gis"]["recall@1"] == 1.0
    single = evaluate_retrieval(_bow_encoder(), base / "gis", k=3, k_values=(1, 3))
    assert single["subsets"] == {} and single["metrics"] == got["subsets"]["gis"]


def test_prepare_beir_corrupt_zip(server, tmp_path):
    with pytest.raises(DataError, match=r"tiny\.zip is corrupt or not a zip") as e:
        _prepare(server, tmp_path, b"this is not a zip archive" * 10)
    assert "delete" in str(e.value)
    truncated = _zip(_files())
    with pytest.raises(DataError, match="corrupt"):
        _prepare(server, tmp_path / "b", truncated[: len(truncated) // 2])


def test_prepare_beir_missing_qrels(server, tmp_path):
    files = _files()
    del files["qrels/test.tsv"]
    with pytest.raises(DataError, match=r"qrels/test\.tsv is missing") as e:
        _prepare(server, tmp_path, _zip(files))
    assert "delete" in str(e.value) and "local path" in str(e.value)


def test_prepare_beir_qrel_unknown_doc(server, tmp_path):
    with pytest.raises(DataError, match=r"qrels/test\.tsv has 1 judgement.*'d9' not in .*corpus\.jsonl"):
        _prepare(server, tmp_path, _zip(_files(QRELS + "q2\td9\t1\n")))
    # A known upstream defect can be accepted explicitly; it is recorded in the manifest.
    got = _prepare(server, tmp_path, _zip(_files(QRELS + "q2\td9\t1\n")), max_dangling_qrels=1)
    assert len(got["dangling_qrels"]) == 1


@pytest.mark.parametrize("qrels, corpus, match", [
    ("query-id\tdoc\tscore\nq1\td1\t1\n", CORPUS, r"qrels/test\.tsv: line 1 must be the header"),
    ("query-id\tcorpus-id\tscore\nq1\td1\thigh\n", CORPUS, r"qrels/test\.tsv, line 2: score"),
    (QRELS, CORPUS + [{"title": "no id", "text": "x"}], r"corpus\.jsonl, line 5: no \"_id\""),
    (QRELS, None, r"corpus\.jsonl, line 2: not valid JSON"),
])
def test_prepare_beir_malformed_files(tmp_path, qrels, corpus, match):
    files = _files(qrels, corpus or CORPUS)
    if corpus is None:
        files["corpus.jsonl"] = files["corpus.jsonl"][:80]  # truncated mid-record
    local = _write_tree(tmp_path / "tiny", files)
    with pytest.raises(DataError, match=match):
        prepare_beir("tiny", path=str(local), out_dir=tmp_path / "t", manifest=tmp_path / "m.json",
                     download_dir=tmp_path / "dl")


def test_prepare_beir_rejects_unsafe_zip_member(server, tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("tiny/corpus.jsonl", "{}")
        zf.writestr("../evil.txt", "owned")
    with pytest.raises(DataError, match="unsafe member '../evil.txt'"):
        _prepare(server, tmp_path, buf.getvalue())
    assert not (tmp_path / "evil.txt").exists()


def test_prepare_beir_rejects_symlink_member(server, tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        link = zipfile.ZipInfo("tiny/corpus.jsonl")
        link.external_attr = 0o120777 << 16  # a symlink entry
        zf.writestr(link, "/etc/passwd")
    with pytest.raises(DataError, match="link or special file 'tiny/corpus.jsonl'"):
        _prepare(server, tmp_path, buf.getvalue())


def test_prepare_beir_download_404_names_url_and_fix(server, tmp_path):
    with pytest.raises(DataError, match=r"HTTP 404.*set the local path"):
        prepare_beir("nope", url=server.url("/nope.zip"), out_dir=tmp_path / "t",
                     manifest=tmp_path / "m.json", download_dir=tmp_path / "dl")


# --------------------------------------------------------------------------- metrics


def test_evaluate_run_hand_checked():
    # q1 has graded qrels (d1: 2, d2: 1, d3: 0 = judged non-relevant); q2 one relevant doc.
    qrels = {"q1": {"d1": 2, "d2": 1, "d3": 0}, "q2": {"d4": 1}}
    run = {
        "q1": {"d3": 0.9, "d1": 0.8, "d5": 0.7, "d2": 0.6},  # ranks: d3, d1, d5, d2
        "q2": {"q2": 5.0, "d6": 0.9, "d4": 0.5},  # the self-hit q2 is ignored (BEIR rule)
    }
    m = evaluate_run(qrels, run, k_values=(1, 2, 10))
    # nDCG (trec_eval: gain = relevance grade, discount log2(rank + 1)):
    dcg_q1 = 0 / math.log2(2) + 2 / math.log2(3) + 0 / math.log2(4) + 1 / math.log2(5)
    idcg_q1 = 2 / math.log2(2) + 1 / math.log2(3)
    ndcg_q2 = (1 / math.log2(3)) / 1.0  # d4 at rank 2 once q2 is dropped
    assert m["ndcg@10"] == pytest.approx((dcg_q1 / idcg_q1 + ndcg_q2) / 2, abs=1e-9)
    assert m["ndcg@1"] == pytest.approx(0.0)
    # nDCG@2 for q1: ranks 1-2 give 2/log2(3); ideal 2 + 1/log2(3).
    assert m["ndcg@2"] == pytest.approx(((2 / math.log2(3)) / idcg_q1 + ndcg_q2) / 2, abs=1e-9)
    # recall counts relevance > 0: q1 has 2 relevant docs.
    assert m["recall@1"] == pytest.approx(0.0)
    assert m["recall@2"] == pytest.approx((1 / 2 + 1) / 2)
    assert m["recall@10"] == pytest.approx(1.0)
    assert m["precision@2"] == pytest.approx((1 / 2 + 1 / 2) / 2)
    # Keeping identical ids pushes d4 to rank 3 for q2 (out of the top 2).
    m2 = evaluate_run(qrels, run, k_values=(2,), ignore_identical_ids=False)
    assert m2["recall@2"] == pytest.approx((1 / 2 + 0) / 2)
    assert m2["ndcg@2"] == pytest.approx((2 / math.log2(3)) / idcg_q1 / 2, abs=1e-9)


def test_evaluate_run_missing_query_counts_zero():
    qrels = {"q1": {"d1": 1}, "q2": {"d2": 1}}
    m = evaluate_run(qrels, {"q1": {"d1": 1.0}}, k_values=(1,))
    assert m["recall@1"] == pytest.approx(0.5) and m["ndcg@1"] == pytest.approx(0.5)


# --------------------------------------------------------------------------- search


def _brute_force(q: np.ndarray, c: np.ndarray, k: int, score: str) -> list[list[int]]:
    if score == "cos":
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
        c = c / np.linalg.norm(c, axis=1, keepdims=True)
    s = q.astype(np.float64) @ c.astype(np.float64).T
    return [list(np.argsort(-row)[:k]) for row in s]


@pytest.mark.parametrize("score", ["cos", "dot"])
@pytest.mark.parametrize("chunk_size", [7, 64, 1000])
def test_search_matches_brute_force(score, chunk_size):
    rng = np.random.default_rng(0)
    q = rng.normal(size=(23, 16)).astype(np.float32)
    c = (rng.normal(size=(301, 16)) * rng.uniform(0.5, 2.0, size=(301, 1))).astype(np.float32)
    qids = [f"q{i}" for i in range(len(q))]
    cids = [f"d{i}" for i in range(len(c))]
    chunks = []

    def enc_chunk(ids):
        chunks.append(len(ids))
        return c[[int(i[1:]) for i in ids]]

    run = search(lambda ids: q[[int(i[1:]) for i in ids]], enc_chunk, cids, qids, k=10,
                 chunk_size=chunk_size, score=score, query_block=5)
    assert max(chunks) <= chunk_size and sum(chunks) == len(c)
    expected = _brute_force(q, c, 10, score)
    for i, qid in enumerate(qids):
        assert list(run[qid]) == [f"d{j}" for j in expected[i]]
        scores = list(run[qid].values())
        assert scores == sorted(scores, reverse=True)
    if score == "cos":
        assert all(-1.0001 <= v <= 1.0001 for r in run.values() for v in r.values())


def test_search_excludes_identical_and_listed_ids():
    rng = np.random.default_rng(1)
    c = rng.normal(size=(20, 8)).astype(np.float32)
    cids = [f"d{i}" for i in range(20)]
    # Query "d3" is the vector of doc d3; query "x" is doc d5's vector with d5 excluded.
    qvec = {"d3": c[3], "x": c[5]}
    run = search(lambda ids: np.stack([qvec[i] for i in ids]), lambda ids: c[[int(i[1:]) for i in ids]],
                 cids, ["d3", "x"], k=19, chunk_size=6, exclude={"x": ["d5"]})
    assert "d3" not in run["d3"] and len(run["d3"]) == 19
    assert "d5" not in run["x"] and len(run["x"]) == 19
    run = search(lambda ids: np.stack([qvec[i] for i in ids]), lambda ids: c[[int(i[1:]) for i in ids]],
                 cids, ["d3"], k=1, chunk_size=6, ignore_identical_ids=False)
    assert list(run["d3"]) == ["d3"]


def test_search_rejects_bad_embeddings():
    with pytest.raises(ValueError, match="encode_corpus_chunk returned shape"):
        search(lambda ids: np.ones((1, 4)), lambda ids: np.ones((len(ids), 3)), ["a", "b"], ["q"])
    with pytest.raises(ValueError, match="NaN"):
        search(lambda ids: np.full((1, 4), np.nan), lambda ids: np.ones((len(ids), 4)), ["a"], ["q"])
    with pytest.raises(ValueError, match="score"):
        search(lambda ids: np.ones((1, 4)), lambda ids: np.ones((len(ids), 4)), ["a"], ["q"], score="l2")


def _bow_encoder(vocab_size: int = 512):
    """A deterministic bag-of-words encoder (hashing trick): equal texts, equal vectors."""
    import zlib

    def encode(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), vocab_size), dtype=np.float32)
        for r, t in enumerate(texts):
            for w in t.lower().replace(".", " ").split():
                out[r, zlib.crc32(w.encode()) % vocab_size] += 1.0
        return out + 1e-3  # no all-zero rows
    return encode


def test_retrieve_end_to_end_on_tiny_beir(tmp_path):
    data = load_beir(_write_tree(tmp_path / "tiny", _files()))
    run = retrieve(_bow_encoder(), data, k=3, chunk_size=2)
    assert set(run) == {"q1", "q2"} and all(len(r) == 3 for r in run.values())
    assert "q2" not in run["q2"]  # identical id masked
    assert next(iter(run["q1"])) == "d1" and next(iter(run["q2"])) == "d2"
    m = evaluate_run(data.qrels, run, (1, 3))
    assert m["recall@1"] == 1.0 and m["ndcg@3"] == 1.0


def test_retrieve_with_tiny_bert_encoder(tiny_encoder, tmp_path):
    data = load_beir(_write_tree(tmp_path / "tiny", _files()))
    run = retrieve(lambda texts: tiny_encoder.encode(texts, batch_size=2, max_len=32), data, k=2, chunk_size=3,
                   score="dot")
    assert {len(r) for r in run.values()} == {2} and "q2" not in run["q2"]


# --------------------------------------------------------------------------- STS-B in-domain retrieval


def _stsb_row(i: int, score: str, a: str, b: str) -> str:
    return f"main-captions\tMSRvid\t2012test\t{i:04d}\t{score}\t{a}\t{b}\n"


def test_stsb_retrieval_dataset_synthetic(tmp_path):
    d = tmp_path / "senteval" / "STS" / "STSBenchmark"
    d.mkdir(parents=True)
    rows = [
        (5.0, "a man is playing a flute .", "a man plays the flute ."),
        (3.2, "a dog runs .", "a cat sleeps ."),
        (5.0, "it is not a good idea .", "it isn't a good idea ."),
        (5.000, "it is not a good idea .", "this is not a good idea ."),  # repeated first sentence
        (4.8, "a man plays the flute .", "a man plays a guitar ."),  # reuses a sentence
        (5.0, "the sun shines .", "the sun is shining ."),
    ]
    (d / "sts-test.csv").write_text("".join(_stsb_row(i, f"{g:.3f}", a, b) for i, (g, a, b) in enumerate(rows)))
    out = stsb_retrieval_dataset(tmp_path / "senteval", tmp_path / "stsb_ret")
    data = load_beir(out)
    unique = {s for _, a, b in rows for s in (a, b)}
    assert len(_corpus(data)) == len(unique) == 10
    assert sorted(data.queries) == ["q0000", "q0002", "q0003", "q0005"]
    text_to_id = {text: i for i, text in _corpus(data).items()}
    assert data.qrels["q0000"] == {text_to_id["a man plays the flute ."]: 1}
    assert data.qrels["q0003"] == {text_to_id["this is not a good idea ."]: 1}
    assert data.exclude["q0002"] == [text_to_id["it is not a good idea ."]]
    # The same retrieval code; the query sentence itself is never returned.
    run = retrieve(_bow_encoder(), data, k=5, chunk_size=3)
    for qid, docs in run.items():
        assert data.exclude[qid][0] not in docs and len(docs) == 5
    metrics = evaluate_retrieval(_bow_encoder(), stsb_retrieval_dataset(tmp_path / "senteval", tmp_path / "stsb_ret2"),
                                 k_values=(1, 5, 10))["metrics"]
    assert metrics["recall@10"] == 1.0  # only 9 candidates per query
    assert 0.0 <= metrics["recall@1"] <= metrics["recall@5"] <= 1.0


@pytest.mark.skipif(find_shared_data() is None, reason="shared data dir not available")
def test_stsb_retrieval_dataset_real(tmp_path):
    out = stsb_retrieval_dataset(find_shared_data() / "senteval", tmp_path / "stsb")
    data = load_beir(out)
    assert len(data.queries) == 97  # the papers' 97 score-5 pairs
    assert len(_corpus(data)) == 2551  # unique sentences of the 2 x 1379 in sts-test.csv
    assert len({data.queries[q] for q in data.queries}) == 86  # 9 first sentences twice, 1 thrice
    assert all(len(r) == 1 for r in data.qrels.values())
    assert all(data.exclude[q] and data.exclude[q][0] not in data.qrels[q] for q in data.queries)


# --------------------------------------------------------------------------- fp16 search, shared corpora


@pytest.mark.parametrize("score", ["cos", "dot"])
def test_fp16_search_equals_fp32_when_certified(score):
    """The fp16 score matrix (GPU tensor cores) with the 2k best re-scored in fp32 returns the
    fp32 search's top-k and its exact scores; 0 queries uncertified on well-separated data."""
    rng = np.random.default_rng(3)
    q = rng.normal(size=(17, 32)).astype(np.float32)
    c = rng.normal(size=(900, 32)).astype(np.float32)
    qids, cids = [f"q{i}" for i in range(17)], [f"d{i}" for i in range(900)]
    kw = dict(k=10, chunk_size=128, score=score, query_block=6)
    enc_q, enc_c = (lambda ids: q[[int(i[1:]) for i in ids]]), (lambda ids: c[[int(i[1:]) for i in ids]])
    exact = search(enc_q, enc_c, cids, qids, **kw)
    half = search(enc_q, enc_c, cids, qids, precision="fp16", **kw)
    assert [list(r) for r in half.values()] == [list(r) for r in exact.values()]
    for qid in qids:
        assert np.allclose(list(half[qid].values()), list(exact[qid].values()), rtol=0, atol=1e-5)


def test_fp16_search_counts_queries_it_cannot_certify():
    """Near-ties below fp16's resolution: the running top-k says how many queries may differ
    from the exact search instead of claiming exactness."""
    import torch

    from cselab.evaluation.retrieval import RunningTopK

    rng = np.random.default_rng(4)
    base = rng.normal(size=(1, 16)).astype(np.float32)
    c = torch.tensor(base + 1e-5 * rng.normal(size=(400, 16)).astype(np.float32))
    c = torch.nn.functional.normalize(c, dim=1)
    q = torch.nn.functional.normalize(torch.tensor(base), dim=1)
    top = RunningTopK(q, 5, precision="fp16")
    for s in range(0, 400, 100):
        top.add(c[s:s + 100], [f"d{i}" for i in range(s, s + 100)], s)
    assert top.uncertified() == 1
    exact = RunningTopK(q, 5)
    exact.add(c, [f"d{i}" for i in range(400)], 0)
    assert exact.uncertified() == 0
    with pytest.raises(ValueError, match="precision"):
        RunningTopK(q, 5, precision="int8")


def _shared_pair(tmp_path):
    """Two BEIR datasets whose corpora overlap: b lacks d5, has a new d9, and d2 with another text."""
    a_docs = [{"_id": f"d{i}", "title": "", "text": t} for i, t in enumerate(
        ["cats sleep on mats", "dogs bark at night", "rivers flood in spring", "bread rises in ovens",
         "stars burn for ages", "owls hunt at dusk"])]
    b_docs = [d for d in a_docs if d["_id"] != "d5"]
    b_docs[2] = {"_id": "d2", "title": "", "text": "rivers freeze in winter"}
    b_docs.append({"_id": "d9", "title": "Owls", "text": "barn owls nest in towers"})
    qa = [{"_id": "q1", "text": "where do cats sleep"}, {"_id": "q2", "text": "when do owls hunt"}]
    qb = [{"_id": "q1", "text": "when do rivers freeze"}, {"_id": "d1", "text": "why do dogs bark"}]
    a = _write_tree(tmp_path / "a", _files("query-id\tcorpus-id\tscore\nq1\td0\t1\nq2\td5\t1\n", a_docs, qa))
    b = _write_tree(tmp_path / "b", _files("query-id\tcorpus-id\tscore\nq1\td2\t1\nd1\td1\t1\n", b_docs, qb))
    return a, b


def test_shared_corpora_encode_each_document_once_and_score_as_alone(tmp_path):
    from cselab.evaluation.retrieval import evaluate_shared, retrieve_shared

    a, b = _shared_pair(tmp_path)
    encode, encoded = _bow_encoder(), []

    def encode_docs(texts):
        encoded.extend(texts)
        return encode(texts)

    got = evaluate_shared({"a": a, "b": b}, lambda name, texts: encode(texts), encode_docs, k=3, chunk_size=2,
                          k_values=(1, 3))
    assert len(encoded) == len(set(encoded)) == 8  # 6 of a, then b's new d2 text and d9
    for name, root in (("a", a), ("b", b)):
        alone = evaluate_retrieval(encode, root, k=3, chunk_size=4, k_values=(1, 3))
        assert got[name]["metrics"] == alone["metrics"] and got[name]["n_docs"] == alone["n_docs"]
        assert got[name]["search"]["shared_corpus"] == ["a", "b"] and got[name]["search"]["encoded_docs"] == 8
    assert got["b"]["n_docs"] == 6 and got["a"]["n_docs"] == 6
    # every run holds only its own corpus's documents, with its own texts' scores, each id once
    runs = retrieve_shared({"a": load_beir(a), "b": load_beir(b)}, lambda name, texts: encode(texts), encode, k=10,
                           chunk_size=2)
    for name, root in (("a", a), ("b", b)):
        alone = retrieve(encode, load_beir(root), k=10, chunk_size=3)
        assert runs[name]["run"].keys() == alone.keys()
        for q, r in alone.items():  # every document (k > corpus), the bag-of-words ties in any order
            assert runs[name]["run"][q] == pytest.approx(r, rel=1e-5, abs=1e-7)
    assert all("d9" not in r for r in runs["a"]["run"].values())
    # b's runs never hold a's d5 nor the query's own id d1
    data = load_beir(b)
    run = retrieve(encode, data, k=6, chunk_size=2)
    assert all("d5" not in r for r in run.values()) and "d1" not in run["d1"]


def test_shared_corpora_reject_a_split_dataset_and_a_missing_corpus(tmp_path):
    from cselab.evaluation.retrieval import evaluate_shared

    a, _ = _shared_pair(tmp_path)
    split = tmp_path / "cqa"
    _write_tree(split / "x", _files())
    enc = _bow_encoder()
    with pytest.raises(DataError, match="'cqa'.*sub-datasets.*shared_corpora"):
        evaluate_shared({"a": a, "cqa": split}, lambda n, t: enc(t), enc)
    with pytest.raises(DataError, match=r"corpus.jsonl is missing \(dataset 'gone'\)"):
        evaluate_shared({"gone": tmp_path / "gone"}, lambda n, t: enc(t), enc)


def test_prepare_beir_rejects_duplicate_corpus_ids(tmp_path):
    docs = CORPUS + [{"_id": "d2", "title": "", "text": "a second d2"}]
    local = _write_tree(tmp_path / "local" / "tiny", _files(corpus=docs))
    with pytest.raises(DataError, match="id 'd2' occurs twice"):
        prepare_beir("tiny", path=local, out_dir=tmp_path / "o", manifest=tmp_path / "m.json",
                     download_dir=tmp_path / "dl")


def test_id_table_round_trips():
    from cselab.evaluation.retrieval import IdTable

    t = IdTable()
    t.extend(["a", "", "dbpedia:Île-de-France", "42"])
    assert len(t) == 4 and [t[i] for i in range(4)] == ["a", "", "dbpedia:Île-de-France", "42"]


def test_shared_corpus_groups_reject_a_name_that_is_another_dataset():
    from cselab.data.beir import shared_corpus_groups

    beir = {"datasets": ["nq", "fever", "climate-fever"], "shared_corpora": {"fever": ["fever", "climate-fever"]}}
    assert shared_corpus_groups(beir) == {"fever": ["fever", "climate-fever"], "nq": ["nq"]}
    with pytest.raises(ValueError, match=r"shared_corpora\.nq': the group's name is the dataset 'nq'"):
        shared_corpus_groups({**beir, "shared_corpora": {"nq": ["fever", "climate-fever"]}})
    with pytest.raises(ValueError, match="'fever' is already in group"):
        shared_corpus_groups({**beir, "shared_corpora": {"fever": ["fever", "climate-fever"], "x": ["fever", "nq"]}})


def test_a_corpus_gone_after_preparation_names_the_file_and_the_prepare_step(tmp_path):
    """Not the split-dataset message: a dataset folder that still holds its queries is one dataset."""
    from cselab.data.beir import corpus_chunks, load_beir

    root = make_beir(tmp_path / "synth")
    (root / "corpus.jsonl").unlink()
    for read in (lambda: load_beir(root), lambda: list(corpus_chunks(root, 10))):
        with pytest.raises(DataError) as e:
            read()
        message = str(e.value)
        assert f"BEIR file {root / 'corpus.jsonl'} is missing" in message and "rule prepare_beir" in message
        assert "sub-datasets" not in message


def test_a_corpus_cut_at_a_line_boundary_after_preparation_is_refused(tmp_path):
    """A corpus cut after a whole line still parses (an evaluation would score fewer documents):
    checked against the manifest's sizes and sha256s, it is refused naming the file and the
    command; a same-size edit by its sha256; the intact dataset is hashed once, then trusted by
    size and mtime."""
    import os

    from cselab.data.beir import load_beir
    from cselab.data.integrity import verify_retrieval_dataset

    root = make_beir(tmp_path / "synth")
    manifest = tmp_path / "beir/synth/manifest.json"
    manifest.parent.mkdir(parents=True)
    prepare_beir("synth", path=str(root), out_dir=tmp_path / "tree", manifest=manifest, download_dir=tmp_path / "dl")
    assert Path(verify_retrieval_dataset(manifest)["root"]) == root.resolve()
    assert (manifest.parent / ".verified.json").is_file()
    corpus = root / "corpus.jsonl"
    whole = corpus.read_bytes()
    lines = whole.splitlines(keepends=True)
    corpus.write_bytes(b"".join(lines[:-5]))
    assert len(load_beir(root).qrels) > 0  # still reads: only the check finds it
    with pytest.raises(DataError) as cut:
        verify_retrieval_dataset(manifest)
    assert str(cut.value).startswith(f"{root.resolve() / 'corpus.jsonl'} changed after rule prepare_beir prepared it: "
                                     f"expected {len(whole)} bytes, found {len(whole) - len(b''.join(lines[-5:]))} bytes")
    assert f"snakemake --forcerun {manifest} <your target>" in str(cut.value)
    corpus.write_bytes(whole.replace(b"a", b"e", 1))
    with pytest.raises(DataError, match="expected sha256"):
        verify_retrieval_dataset(manifest)
    corpus.write_bytes(whole)
    os.utime(corpus, ns=(1, 1))  # an intact file under a new mtime: hashed again, then trusted
    verify_retrieval_dataset(manifest)
