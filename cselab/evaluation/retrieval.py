"""Zero-shot dense retrieval: BEIR (InfoCSE Table 3) and STS-B in-domain retrieval (DiffCSE
Table 10, InfoCSE Table 11), with one retrieval and one evaluation code path for both.

:func:`search` is exact dense retrieval with bounded memory (the corpus encoded chunk by chunk, a
running top-k per query); :func:`evaluate_run` computes nDCG/recall/MAP/P@k with ``pytrec_eval``
(the library BEIR uses). BEIR's conventions (Thakur et al., 2021) hold throughout: document text
is ``(title + " " + text).strip()``, identical query and document ids are never counted (ArguAna,
Quora), graded relevance is the qrel value (linear gain, ``log2(rank + 1)`` discount).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import torch

from cselab.data.beir import BeirData, beir_subsets, load_beir, stsb_retrieval_dataset
from cselab.errors import DataError

SCORES = ("cos", "dot")
EncodeIds = Callable[[list[str]], Any]



def doc_text(doc: Mapping[str, Any]) -> str:
    """The text BEIR's sentence-transformers models encode for a document:
    ``(title + " " + text).strip()``."""
    return ((doc.get("title") or "") + " " + (doc.get("text") or "")).strip()



def _as_matrix(x: Any, n: int, what: str, dim: int | None = None) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x)
    t = t.detach().to(torch.float32)
    if t.ndim != 2 or t.shape[0] != n or (dim is not None and t.shape[1] != dim):
        want = f"({n}, {dim if dim is not None else 'dim'})"
        raise ValueError(f"{what} returned shape {tuple(t.shape)}, expected {want}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{what} returned NaN or infinite values")
    return t


def search(
    encode_queries: EncodeIds,
    encode_corpus_chunk: EncodeIds,
    corpus_ids: Sequence[str],
    query_ids: Sequence[str],
    k: int = 100,
    chunk_size: int = 50_000,
    score: str = "cos",
    *,
    exclude: Mapping[str, Iterable[str]] | None = None,
    ignore_identical_ids: bool = True,
    query_block: int = 1024,
    device: str | torch.device | None = None,
) -> dict[str, dict[str, float]]:
    """Exact top-``k`` dense retrieval over a corpus encoded chunk by chunk.

    ``encode_queries(query_ids)`` returns the ``(n_queries, d)`` query embeddings (called
    once); ``encode_corpus_chunk(ids)`` returns the ``(len(ids), d)`` embeddings of one slice of
    ``corpus_ids`` (called once per chunk of ``chunk_size`` ids, in order: the corpus is never
    encoded all at once). ``score`` is ``"cos"`` (both sides L2-normalised) or ``"dot"``.
    For each chunk the scores are a blockwise matrix product (``query_block`` queries x chunk);
    each block's top-k (``torch.topk``) is merged with the running top-k of those queries.

    A document equal to the query id (``ignore_identical_ids``, BEIR's rule) or listed in
    ``exclude[query_id]`` gets score -inf before the top-k, so it is never returned and the
    query still gets ``min(k, n_docs - n_excluded)`` real results.

    Memory bound (float32 unless the encoder differs), besides the encoder's own batch
    activations and the id lists: ``O(n_queries * (d + k) + chunk_size * d +
    min(n_queries, query_block) * chunk_size)`` floats, i.e. query embeddings + running top-k
    values and indices, one chunk of corpus embeddings, one block of scores; independent of the
    corpus size. (The chunk's texts, built by the caller's ``encode_corpus_chunk``, scale with
    ``chunk_size`` too.)

    Returns ``{query_id: {doc_id: score}}``, each inner dict in descending score order.
    """
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}")
    if k < 1 or chunk_size < 1 or query_block < 1:
        raise ValueError("k, chunk_size and query_block must be positive")
    query_ids = [str(q) for q in query_ids]
    corpus_ids = list(corpus_ids)
    n_q, n_docs = len(query_ids), len(corpus_ids)
    if n_q == 0:
        return {}
    dev = torch.device(device) if device is not None else torch.device("cpu")
    q = _as_matrix(encode_queries(list(query_ids)), n_q, "encode_queries").to(dev)
    if score == "cos":
        q = torch.nn.functional.normalize(q, dim=1)
    ex_rows, ex_pos = _excluded_pairs(query_ids, corpus_ids, exclude, ignore_identical_ids)
    top_vals = torch.empty((n_q, 0), dtype=torch.float32, device=dev)
    top_idx = torch.empty((n_q, 0), dtype=torch.long, device=dev)
    for start in range(0, n_docs, chunk_size):
        end = min(start + chunk_size, n_docs)
        c = _as_matrix(encode_corpus_chunk(list(corpus_ids[start:end])), end - start, "encode_corpus_chunk",
                       q.shape[1]).to(dev)
        if score == "cos":
            c = torch.nn.functional.normalize(c, dim=1)
        in_chunk = (ex_pos >= start) & (ex_pos < end)
        top_vals, top_idx = _merge_chunk(q, c, start, k, query_block, top_vals, top_idx,
                                         (ex_rows[in_chunk], ex_pos[in_chunk] - start))
        del c
    vals, idxs = top_vals.cpu().numpy(), top_idx.cpu().numpy()
    return {qid: {corpus_ids[j]: float(v) for v, j in zip(vals[row], idxs[row]) if v != float("-inf")}
            for row, qid in enumerate(query_ids)}


def _excluded_pairs(query_ids: list[str], corpus_ids: list, exclude, ignore_identical_ids: bool):
    """The (query row, corpus position) pairs never to return, found in one pass over the corpus
    ids without an id -> position map of the whole corpus."""
    wanted: dict[str, list[int]] = {}
    row_of = {qid: i for i, qid in enumerate(query_ids)}
    if ignore_identical_ids:
        for qid, i in row_of.items():
            wanted.setdefault(qid, []).append(i)
    for qid, docs in (exclude or {}).items():
        if qid in row_of:
            for d in docs:
                wanted.setdefault(str(d), []).append(row_of[qid])
    rows: list[int] = []
    positions: list[int] = []
    if wanted:
        for pos, cid in enumerate(corpus_ids):
            for row in wanted.get(cid, ()):
                rows.append(row)
                positions.append(pos)
    return torch.tensor(rows, dtype=torch.long), torch.tensor(positions, dtype=torch.long)


def _merge_chunk(q, c, start: int, k: int, query_block: int, top_vals, top_idx, excluded):
    """The running top-k merged with one corpus chunk's scores, ``query_block`` queries at a
    time; ``excluded`` (rows, columns of the chunk) score -inf."""
    c_rows, c_cols = excluded
    new_vals, new_idx = [], []
    for qs in range(0, q.shape[0], query_block):
        qe = min(qs + query_block, q.shape[0])
        s = q[qs:qe] @ c.T  # (block, chunk)
        if c_rows.numel():
            sel = (c_rows >= qs) & (c_rows < qe)
            if bool(sel.any()):
                s[(c_rows[sel] - qs).to(s.device), c_cols[sel].to(s.device)] = float("-inf")
        v, i = torch.topk(s, min(k, c.shape[0]), dim=1)
        del s
        v = torch.cat([top_vals[qs:qe], v], dim=1)
        i = torch.cat([top_idx[qs:qe], i + start], dim=1)
        v, order = torch.topk(v, min(k, v.shape[1]), dim=1)
        new_vals.append(v)
        new_idx.append(torch.gather(i, 1, order))
    return torch.cat(new_vals), torch.cat(new_idx)


def retrieve(
    encode: Callable[[list[str]], np.ndarray],
    data: BeirData,
    k: int = 100,
    chunk_size: int = 50_000,
    score: str = "cos",
    **kwargs: Any,
) -> dict[str, dict[str, float]]:
    """:func:`search` over ``data`` with a plain ``encode(list[str]) -> (n, d) array`` used for
    both queries (their text) and documents (:func:`doc_text`, BEIR's title + " " + text).
    ``data.exclude`` is applied; extra keyword arguments go to :func:`search`."""
    exclude = kwargs.pop("exclude", None) or data.exclude
    return search(
        lambda ids: encode([data.queries[i] for i in ids]),
        lambda ids: encode([doc_text(data.corpus[i]) for i in ids]),
        list(data.corpus), list(data.queries), k=k, chunk_size=chunk_size, score=score,
        exclude=exclude, **kwargs,
    )


# --------------------------------------------------------------------------- metrics


def evaluate_run(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    k_values: Sequence[int] = (1, 5, 10, 100),
    *,
    ignore_identical_ids: bool = True,
) -> dict[str, float]:
    """nDCG@k, recall@k, MAP@k and P@k of ``run`` against ``qrels`` with pytrec_eval (as BEIR's
    ``EvaluateRetrieval.evaluate``), as fractions in [0, 1] (not rounded).

    Documents whose id equals the query id are removed from the run first (BEIR's
    ``ignore_identical_ids=True``). Scores are averaged over every query in ``qrels``; a query
    the run lacks scores 0 (BEIR averages over the queries present in its results, which always
    hold every query, so the two agree). Returns ``{"ndcg@10": .., "recall@100": .., "map@10":
    .., "precision@10": .., ...}`` for each k in ``k_values``.
    """
    import pytrec_eval

    ks = sorted({int(k) for k in k_values})
    if not ks or ks[0] < 1:
        raise ValueError(f"k_values must be positive integers, got {k_values!r}")
    if not qrels:
        raise ValueError("qrels is empty: nothing to evaluate")
    q = {str(qid): {str(d): int(r) for d, r in rels.items()} for qid, rels in qrels.items()}
    r = {}
    for qid, docs in run.items():
        qid = str(qid)
        if qid in q:
            r[qid] = {str(d): float(s) for d, s in docs.items()
                      if not (ignore_identical_ids and str(d) == qid)}
    kstr = ",".join(map(str, ks))
    evaluator = pytrec_eval.RelevanceEvaluator(
        q, {f"ndcg_cut.{kstr}", f"recall.{kstr}", f"map_cut.{kstr}", f"P.{kstr}"})
    per_query = evaluator.evaluate(r)
    names = {"ndcg": "ndcg_cut", "recall": "recall", "map": "map_cut", "precision": "P"}
    out: dict[str, float] = {}
    for ours, theirs in names.items():
        for k in ks:
            total = sum(m[f"{theirs}_{k}"] for m in per_query.values())
            out[f"{ours}@{k}"] = total / len(q)
    return out


def evaluate_retrieval(
    encode: Callable[[list[str]], np.ndarray],
    root: str | Path,
    k: int = 100,
    chunk_size: int = 50_000,
    score: str = "cos",
    k_values: Sequence[int] = (1, 5, 10, 100),
    split: str = "test",
) -> dict:
    """:func:`load_beir` + :func:`retrieve` + :func:`evaluate_run` for one prepared dataset root,
    including split ones (cqadupstack): each sub-dataset is retrieved on its own corpus and
    the metrics are the unweighted mean over sub-datasets, as BEIR reports cqadupstack.

    Returns ``{"metrics": {...}, "n_queries", "n_docs", "subsets": {name: metrics}}``
    (``subsets`` empty for an ordinary dataset).
    """
    subsets = beir_subsets(root)
    if not subsets:
        raise DataError(f"BEIR file {Path(root) / 'corpus.jsonl'} is missing; re-run the BEIR prepare "
                        "step or fix the local path.")
    per: dict[str, dict[str, float]] = {}
    n_queries = n_docs = 0
    for sub in subsets:
        data = load_beir(sub, split)
        run = retrieve(encode, data, k=k, chunk_size=chunk_size, score=score)
        per[sub.name] = evaluate_run(data.qrels, run, k_values)
        n_queries += len(data.qrels)
        n_docs += len(data.corpus)
    metrics = {m: float(np.mean([p[m] for p in per.values()])) for m in next(iter(per.values()))}
    return {"metrics": metrics, "n_queries": n_queries, "n_docs": n_docs,
            "subsets": per if len(subsets) > 1 or subsets[0] != Path(root) else {}}


def table_scores(dataset: str, metrics: dict[str, float], metric: str) -> dict[str, float]:
    """The numbers a table shows: ``ndcg@10`` as a fraction under the dataset's name (BEIR, as
    InfoCSE Table 3 prints it) or ``recall`` as ``R@1/5/10`` in percent (in-domain retrieval,
    DiffCSE Table 10 and InfoCSE Table 11)."""
    if metric == "ndcg@10":
        return {dataset: metrics["ndcg@10"]}
    return {f"R@{k}": 100 * metrics[f"recall@{k}"] for k in (1, 5, 10)}
