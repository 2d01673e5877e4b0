"""Zero-shot dense retrieval: BEIR (InfoCSE Table 3) and STS-B in-domain retrieval (DiffCSE
Table 10, InfoCSE Table 11), with one retrieval and one evaluation code path for both.

:func:`search` is exact dense retrieval with bounded memory (the corpus encoded chunk by chunk, a
running top-k per query); :func:`evaluate_run` computes nDCG/recall/MAP/P@k with ``pytrec_eval``
(the library BEIR uses). BEIR's conventions (Thakur et al., 2021) hold throughout: document text
is ``(title + " " + text).strip()``, identical query and document ids are never counted (ArguAna,
Quora), graded relevance is the qrel value (linear gain, ``log2(rank + 1)`` discount).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import torch

from cselab.data.beir import BeirData, beir_subsets, corpus_chunks, load_beir
from cselab.data.beir import doc_text  # noqa: F401  (BEIR's document text, where evaluators look for it)
from cselab.errors import DataError

log = logging.getLogger(__name__)

SCORES = ("cos", "dot")
EncodeIds = Callable[[list[str]], Any]



def _as_matrix(x: Any, n: int, what: str, dim: int | None = None) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x)
    t = t.detach().to(torch.float32)
    if t.ndim != 2 or t.shape[0] != n or (dim is not None and t.shape[1] != dim):
        want = f"({n}, {dim if dim is not None else 'dim'})"
        raise ValueError(f"{what} returned shape {tuple(t.shape)}, expected {want}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{what} returned NaN or infinite values")
    return t


#: Precisions of the score matrix: fp32 (exact; the CPU's default) or fp16 (GPU tensor cores:
#: each corpus chunk's 2k best by fp16 score are re-scored in fp32 and merged in fp32).
PRECISIONS = ("fp32", "fp16")

#: A bound on |fp16 score - fp32 score| for unit-norm vectors (scaled by ||q|| ||c|| for "dot"):
#: both inputs rounded to fp16 (2^-11 relative each), fp32 accumulation, the output rounded to
#: fp16 (2^-11), with a factor of 4/3 to spare.
FP16_SCORE_ERROR = 4 * 2.0 ** -11
FP16_MAX = 6.0e4  # a "dot" chunk whose scores could overflow fp16 is scored in fp32


class IdTable:
    """Corpus ids by stream position in one bytes blob (about len(id) + 8 bytes a document,
    against ~60 for a list of str): only the returned top-k are decoded."""

    def __init__(self) -> None:
        from array import array

        self._blob, self._ends = bytearray(), array("q")

    def __len__(self) -> int:
        return len(self._ends)

    def extend(self, ids: Iterable[str]) -> None:
        for i in ids:
            self._blob += i.encode()
            self._ends.append(len(self._blob))

    def __getitem__(self, pos: int) -> str:
        start = self._ends[pos - 1] if pos else 0
        return self._blob[start:self._ends[pos]].decode()


class RunningTopK:
    """The running top-``k`` of one query set over a corpus streamed chunk by chunk.

    :meth:`add` scores one chunk against every query, ``query_block`` queries at a time
    (``block x chunk`` scores in memory), masks the excluded documents (-inf) and merges the
    chunk's best with the running best. With ``precision="fp16"`` the scores are an fp16
    matrix product; the chunk's ``min(2k, chunk)`` best by fp16 score are re-scored in fp32
    (so every kept score is exact), and the largest fp16 score left out, plus
    :data:`FP16_SCORE_ERROR`, bounds what was missed: :meth:`uncertified` counts the queries
    whose k-th score does not clear that bound (0 means the top-k equals the fp32 search's, up
    to ties). The re-scoring gathers ``query_block x 2k x d`` fp32 embeddings (0.6 GB at 1024 x
    200 x 768), on top of the ``query_block x chunk`` fp16 scores.
    """

    def __init__(self, queries: torch.Tensor, k: int, *, precision: str = "fp32", query_block: int = 1024,
                 wanted: Mapping[str, list[int]] | None = None):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        self.q, self.k, self.block, self.precision = queries, k, query_block, precision
        self.q16 = queries.half() if precision == "fp16" else None
        self.qnorm = queries.norm(dim=1)
        self.wanted = wanted or {}
        n, dev = queries.shape[0], queries.device
        self.vals = torch.empty((n, 0), dtype=torch.float32, device=dev)
        self.idx = torch.empty((n, 0), dtype=torch.long, device=dev)
        self.bound = torch.full((n,), float("-inf"), device=dev)

    def add(self, c: torch.Tensor, ids: Sequence[str], start: int, member: torch.Tensor | None = None) -> None:
        """Merge one chunk ``c`` (its rows the documents ``ids`` at stream positions
        ``start + row``); ``member`` (bool per row) marks the rows in this query set's corpus,
        the others are never returned."""
        rows, cols = _chunk_exclusions(ids, self.wanted)
        c16 = None
        if self.q16 is not None:
            cnorm, qnorm = float(c.norm(dim=1).max()), float(self.qnorm.max())
            c16 = c.half() if max(cnorm, qnorm, cnorm * qnorm) < FP16_MAX else None
        vals, idx = [], []
        for qs in range(0, self.q.shape[0], self.block):
            qe = min(qs + self.block, self.q.shape[0])
            s = _fp16_scores(self.q16[qs:qe], c16) if c16 is not None else self.q[qs:qe] @ c.T
            if member is not None:
                s.masked_fill_(~member.view(1, -1), float("-inf"))
            sel = [(r - qs, col) for r, col in zip(rows, cols) if qs <= r < qe]
            if sel:
                s[torch.tensor([a for a, _ in sel]), torch.tensor([b for _, b in sel])] = float("-inf")
            v, i = self._chunk_best(s, c, qs, qe, c16 is not None)
            v = torch.cat([self.vals[qs:qe], v], dim=1)
            i = torch.cat([self.idx[qs:qe], i + start], dim=1)
            v, order = torch.topk(v, min(self.k, v.shape[1]), dim=1)
            vals.append(v)
            idx.append(torch.gather(i, 1, order))
        self.vals, self.idx = torch.cat(vals), torch.cat(idx)

    def _chunk_best(self, s: torch.Tensor, c: torch.Tensor, qs: int, qe: int, half: bool):
        """The chunk's best scores (fp32) and their rows for queries ``qs:qe``."""
        if not half:
            return torch.topk(s, min(self.k, c.shape[0]), dim=1)
        kk = min(2 * self.k, c.shape[0])
        v16, i = torch.topk(s, kk, dim=1)
        del s
        if kk < c.shape[0]:
            err = FP16_SCORE_ERROR * self.qnorm[qs:qe] * c.norm(dim=1).max()
            self.bound[qs:qe] = torch.maximum(self.bound[qs:qe], v16[:, -1].float() + err)
        exact = torch.bmm(c[i], self.q[qs:qe].unsqueeze(2)).squeeze(2)
        return torch.where(torch.isneginf(v16), float("-inf"), exact), i

    def uncertified(self) -> int:
        """Queries whose fp16 search may have missed a document of the exact top-k."""
        if self.vals.shape[1] < self.k:
            return 0
        return int((self.vals[:, -1] < self.bound).sum())

    def ranked(self, query_ids: Sequence[str], ids: IdTable | Sequence[str]) -> dict[str, dict[str, float]]:
        """``{query_id: {doc_id: score}}`` in descending score order, excluded documents left out."""
        vals, idxs = self.vals.cpu().numpy(), self.idx.cpu().numpy()
        return {qid: {ids[int(j)]: float(v) for v, j in zip(vals[row], idxs[row]) if v != float("-inf")}
                for row, qid in enumerate(query_ids)}


def _fp16_scores(q16: torch.Tensor, c16: torch.Tensor) -> torch.Tensor:
    """``q16 @ c16.T`` with fp32 accumulation throughout (cuBLAS may otherwise reduce split-K
    partial sums in fp16, which :data:`FP16_SCORE_ERROR` does not cover)."""
    flag = torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    try:
        return q16 @ c16.T
    finally:
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = flag


def _chunk_exclusions(ids: Sequence[str], wanted: Mapping[str, list[int]]) -> tuple[list[int], list[int]]:
    """The (query row, chunk row) pairs never to return: ``wanted`` maps a document id to the
    query rows that must not get it (identical ids, ``exclude``)."""
    rows: list[int] = []
    cols: list[int] = []
    if wanted:
        for col, cid in enumerate(ids):
            for row in wanted.get(cid, ()):
                rows.append(row)
                cols.append(col)
    return rows, cols


def excluded_ids(query_ids: list[str], exclude: Mapping[str, Iterable[str]] | None,
                 ignore_identical_ids: bool = True) -> dict[str, list[int]]:
    """Document id -> the query rows that must never get it: the query's own id (BEIR's
    ``ignore_identical_ids``) and its ``exclude`` list."""
    wanted: dict[str, list[int]] = {}
    row_of = {qid: i for i, qid in enumerate(query_ids)}
    if ignore_identical_ids:
        for qid, i in row_of.items():
            wanted.setdefault(qid, []).append(i)
    for qid, docs in (exclude or {}).items():
        if qid in row_of:
            for d in docs:
                wanted.setdefault(str(d), []).append(row_of[qid])
    return wanted


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
    precision: str = "fp32",
) -> dict[str, dict[str, float]]:
    """Exact top-``k`` dense retrieval over a corpus encoded chunk by chunk.

    ``encode_queries(query_ids)`` returns the ``(n_queries, d)`` query embeddings (called
    once); ``encode_corpus_chunk(ids)`` returns the ``(len(ids), d)`` embeddings of one slice of
    ``corpus_ids`` (called once per chunk of ``chunk_size`` ids, in order: the corpus is never
    encoded all at once). ``score`` is ``"cos"`` (both sides L2-normalised) or ``"dot"``.
    Scoring and merging are :class:`RunningTopK`'s (``precision`` fp16 is for GPUs).

    A document equal to the query id (``ignore_identical_ids``, BEIR's rule) or listed in
    ``exclude[query_id]`` gets score -inf before the top-k, so it is never returned and the
    query still gets ``min(k, n_docs - n_excluded)`` real results.

    Memory bound (float32), besides the encoder's own batch activations and the id lists:
    ``O(n_queries * (d + k) + chunk_size * d + min(n_queries, query_block) * chunk_size)``
    floats, independent of the corpus size.

    Returns ``{query_id: {doc_id: score}}``, each inner dict in descending score order.
    """
    corpus_ids = list(corpus_ids)
    chunks = ((corpus_ids[s:s + chunk_size],) * 2 + (None,) for s in range(0, len(corpus_ids), chunk_size))
    top, query_ids = _query_topk(encode_queries, query_ids, k, chunk_size, score, exclude, ignore_identical_ids,
                                 query_block, device, precision)
    if top is None:
        return {}
    _stream(chunks, encode_corpus_chunk, {"": top}, score, total=len(corpus_ids))
    return top.ranked(query_ids, corpus_ids)


def _query_topk(encode_queries, query_ids, k, chunk_size, score, exclude, ignore_identical_ids, query_block,
                device, precision):
    """The encoded queries of one query set as an empty :class:`RunningTopK` (None if there are
    no queries), after checking the search settings."""
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}")
    if k < 1 or chunk_size < 1 or query_block < 1:
        raise ValueError("k, chunk_size and query_block must be positive")
    query_ids = [str(q) for q in query_ids]
    if not query_ids:
        return None, query_ids
    dev = torch.device(device) if device is not None else torch.device("cpu")
    q = _as_matrix(encode_queries(list(query_ids)), len(query_ids), "encode_queries").to(dev)
    if score == "cos":
        q = torch.nn.functional.normalize(q, dim=1)
    wanted = excluded_ids(query_ids, exclude, ignore_identical_ids)
    return RunningTopK(q, k, precision=precision, query_block=query_block, wanted=wanted), query_ids


def _stream(chunks, encode_chunk: EncodeIds, tops: Mapping[str, RunningTopK], score: str,
            ids: IdTable | None = None, total: int | None = None) -> int:
    """Encode each ``(ids, what to encode, members)`` chunk once (``encode_chunk`` gets its ids,
    or its texts) and merge it into every query set's top-k (``members``: query set -> bool per
    document, None = every set); returns the documents encoded. ``ids`` records the stream's
    document ids by position; a stream past a minute logs its progress (``total`` documents, if known)."""
    from cselab.io import Progress

    start = 0
    dev = next(iter(tops.values())).q.device
    dim = next(iter(tops.values())).q.shape[1]
    progress = Progress(log, "searching the corpus", total, "documents", lazy=60.0)
    for chunk_ids, encoded, members in chunks:
        c = _as_matrix(encode_chunk(list(encoded)), len(chunk_ids), "encode_corpus_chunk", dim).to(dev)
        if score == "cos":
            c = torch.nn.functional.normalize(c, dim=1)
        for name, top in tops.items():
            m = None if members is None else members.get(name)
            if m is not None and not m.any():
                continue
            top.add(c, chunk_ids, start, None if m is None else torch.as_tensor(m, device=dev))
        if ids is not None:
            ids.extend(chunk_ids)
        start += len(chunk_ids)
        progress.update(start)
        del c
    progress.close()
    return start


def retrieve(
    encode: Callable[[list[str]], np.ndarray],
    data: BeirData,
    k: int = 100,
    chunk_size: int = 50_000,
    score: str = "cos",
    **kwargs: Any,
) -> dict[str, dict[str, float]]:
    """:func:`search` over ``data`` with a plain ``encode(list[str]) -> (n, d) array`` used for
    both queries (their text) and documents (BEIR's title + " " + text, streamed from disk).
    ``data.exclude`` is applied; extra keyword arguments go to :func:`search`."""
    runs = retrieve_shared({"": data}, lambda name, texts: encode(texts), encode, k=k, chunk_size=chunk_size,
                           score=score, **kwargs)
    return runs[""]["run"]


def retrieve_shared(
    datasets: Mapping[str, BeirData],
    encode_queries: Callable[[str, list[str]], Any],
    encode_docs: Callable[[list[str]], Any],
    k: int = 100,
    chunk_size: int = 50_000,
    score: str = "cos",
    *,
    query_block: int = 1024,
    device: str | torch.device | None = None,
    precision: str = "fp32",
    exclude: Mapping[str, Iterable[str]] | None = None,
) -> dict[str, dict]:
    """Retrieval for datasets that share a corpus (FEVER and Climate-FEVER), each document
    encoded once: the union of their corpora is streamed (:func:`shared_corpus_chunks`), and
    every chunk is merged into each dataset's top-k over the documents of its own corpus.

    ``encode_queries(name, texts)`` encodes one dataset's queries; ``encode_docs(texts)`` the
    corpus chunks. Returns ``{name: {"run", "n_docs", "uncertified"}}`` plus the stream's
    ``{"encoded_docs"}`` under each entry.
    """
    tops, qids = {}, {}
    for name, data in datasets.items():
        ex = exclude if exclude is not None else data.exclude
        top, qids[name] = _query_topk(lambda ids, n=name, d=data: encode_queries(n, [d.queries[i] for i in ids]),
                                      list(data.queries), k, chunk_size, score, ex, True, query_block, device,
                                      precision)
        if top is not None:
            tops[name] = top
    if not tops:
        return {name: {"run": {}, "n_docs": 0, "uncertified": 0, "encoded_docs": 0} for name in datasets}
    ids, sizes = IdTable(), {}
    chunks = shared_corpus_chunks({n: d.root for n, d in datasets.items()}, chunk_size, sizes)
    encoded = _stream(chunks, encode_docs, tops, score, ids)
    return {name: {"run": tops[name].ranked(qids[name], ids) if name in tops else {}, "n_docs": sizes[name],
                   "uncertified": tops[name].uncertified() if name in tops else 0, "encoded_docs": encoded}
            for name in datasets}


def shared_corpus_chunks(roots: Mapping[str, Path], chunk_size: int, sizes: dict | None = None):
    """Stream the union of several BEIR corpora as ``(ids, texts, members)`` chunks, each
    distinct document (same id and text) once: the first corpus whole, then each next one's
    documents absent from the ones before. ``members`` maps a dataset to a bool array over the
    chunk (which rows are in its corpus), or is None when there is a single corpus. ``sizes``,
    if given, receives each corpus's document count."""
    names = list(roots)
    if len(names) == 1:
        n = 0
        for ids, texts in corpus_chunks(roots[names[0]], chunk_size):
            n += len(ids)
            yield ids, texts, None
        if sizes is not None:
            sizes[names[0]] = n
        return
    digests = {name: np.sort(_doc_digests(roots[name])) for name in names}
    if sizes is not None:
        sizes.update({name: len(d) for name, d in digests.items()})
    for j, name in enumerate(names):
        for ids, texts in corpus_chunks(roots[name], chunk_size):
            h = _digests(ids, texts)
            keep = np.ones(len(ids), dtype=bool)
            for earlier in names[:j]:
                keep &= ~_isin_sorted(h, digests[earlier])
            if not keep.any():
                continue
            ids = [i for i, kept in zip(ids, keep) if kept]
            texts = [t for t, kept in zip(texts, keep) if kept]
            h = h[keep]
            # an earlier corpus holds none of these rows (they were kept for being absent from it)
            yield ids, texts, {other: _isin_sorted(h, digests[other]) if k >= j else np.zeros(len(h), dtype=bool)
                               for k, other in enumerate(names)}


def _digests(ids: Sequence[str], texts: Sequence[str]) -> np.ndarray:
    """An 8-byte digest of each (id, text): equal digests, the same document to encode."""
    import hashlib

    return np.array([int.from_bytes(hashlib.blake2b(f"{i}\0{t}".encode(), digest_size=8).digest(), "little")
                     for i, t in zip(ids, texts)], dtype=np.uint64)


def _doc_digests(root: Path) -> np.ndarray:
    return np.concatenate([_digests(ids, texts) for ids, texts in corpus_chunks(root, 100_000)] or
                          [np.empty(0, dtype=np.uint64)])


def _isin_sorted(values: np.ndarray, sorted_ref: np.ndarray) -> np.ndarray:
    pos = np.searchsorted(sorted_ref, values)
    pos[pos == len(sorted_ref)] = 0
    return sorted_ref[pos] == values if len(sorted_ref) else np.zeros(len(values), dtype=bool)


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
    **search_opts: Any,
) -> dict:
    """:func:`evaluate_shared` for one prepared dataset root, with one ``encode`` for queries
    and documents. Returns ``{"metrics": {...}, "n_queries", "n_docs", "subsets": {name:
    metrics}, "search": {...}}`` (``subsets`` empty for an ordinary dataset)."""
    return evaluate_shared({"": Path(root)}, lambda name, texts: encode(texts), encode, k=k, chunk_size=chunk_size,
                           score=score, k_values=k_values, split=split, **search_opts)[""]


def evaluate_shared(
    roots: Mapping[str, Path],
    encode_queries: Callable[[str, list[str]], Any],
    encode_docs: Callable[[list[str]], Any],
    k: int = 100,
    chunk_size: int = 50_000,
    score: str = "cos",
    k_values: Sequence[int] = (1, 5, 10, 100),
    split: str = "test",
    **search_opts: Any,
) -> dict[str, dict]:
    """:func:`load_beir` + :func:`retrieve_shared` + :func:`evaluate_run` for prepared dataset
    roots that share one corpus (each distinct document encoded once), or for one root alone,
    including split ones (cqadupstack: each sub-dataset is retrieved on its own corpus and the
    metrics are the unweighted mean over sub-datasets, as BEIR reports cqadupstack).

    Returns ``{name: {"metrics", "n_queries", "n_docs", "subsets", "search"}}``; ``search``
    says how the search ran: precision, documents encoded (once for the group), the queries
    whose fp16 top-k is not certified exact (:meth:`RunningTopK.uncertified`).
    """
    subsets = {name: beir_subsets(root) for name, root in roots.items()}
    for name, subs in subsets.items():
        if not subs:
            raise DataError(f"BEIR file {Path(roots[name]) / 'corpus.jsonl'} is missing (dataset {name!r}); "
                            "re-run the BEIR prepare step or fix the local path.")
        if len(roots) > 1 and subs != [Path(roots[name])]:
            raise DataError(f"BEIR dataset {name!r} at {roots[name]} is split into sub-datasets; it cannot "
                            "share a corpus with another dataset: remove it from evaluation.beir.shared_corpora.")
    if len(roots) > 1:
        data = {name: load_beir(root, split) for name, root in roots.items()}
        got = retrieve_shared(data, encode_queries, encode_docs, k=k, chunk_size=chunk_size, score=score,
                              **search_opts)
        return {name: {**_scored({name: (data[name], got[name])}, k_values, search_opts, list(roots)), "subsets": {}}
                for name in roots}
    (name, root), = roots.items()
    per = {}
    for sub in subsets[name]:
        data = load_beir(sub, split)
        per[sub.name] = (data, retrieve_shared({name: data}, encode_queries, encode_docs, k=k, chunk_size=chunk_size,
                                               score=score, **search_opts)[name])
    result = _scored(per, k_values, search_opts, [name])
    if len(per) == 1 and subsets[name][0] == Path(root):
        result["subsets"] = {}
    return {name: result}


def _scored(per: Mapping[str, tuple[BeirData, dict]], k_values, search_opts: Mapping, group: list[str]) -> dict:
    """The metrics of one dataset from its (sub-)datasets' runs: the unweighted mean over
    sub-datasets, their query and document counts summed, and how the search ran."""
    metrics_per = {sub: evaluate_run(data.qrels, got["run"], k_values) for sub, (data, got) in per.items()}
    first = next(iter(metrics_per.values()))
    return {"metrics": {m: float(np.mean([p[m] for p in metrics_per.values()])) for m in first},
            "n_queries": sum(len(d.qrels) for d, _ in per.values()),
            "n_docs": sum(g["n_docs"] for _, g in per.values()),
            "subsets": metrics_per,
            "search": {"precision": search_opts.get("precision") or "fp32", "shared_corpus": group,
                       "encoded_docs": sum(g["encoded_docs"] for _, g in per.values()),
                       "uncertified_queries": sum(g["uncertified"] for _, g in per.values())}}


def table_scores(dataset: str, metrics: dict[str, float], metric: str) -> dict[str, float]:
    """The numbers a table shows: ``ndcg@10`` as a fraction under the dataset's name (BEIR, as
    InfoCSE Table 3 prints it) or ``recall`` as ``R@1/5/10`` in percent (in-domain retrieval,
    DiffCSE Table 10 and InfoCSE Table 11)."""
    if metric == "ndcg@10":
        return {dataset: metrics["ndcg@10"]}
    return {f"R@{k}": 100 * metrics[f"recall@{k}"] for k in (1, 5, 10)}
