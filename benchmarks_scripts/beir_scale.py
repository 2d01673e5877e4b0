"""BEIR at paper scale, measured: the exact top-k search on its own (``search``) and a generated
corpus streamed through the real retrieval path (``corpus``).

    # search at MS MARCO size (8.8M documents x 6,980 queries) on a GPU, fp16 and fp32
    python benchmarks_scripts/beir_scale.py search --docs 8841823 --queries 6980 --device cuda
    # the CPU figure at 1M documents
    python benchmarks_scripts/beir_scale.py search --docs 1000000 --queries 6980 --precision fp32
    # a generated 1M-document corpus: memory and cache bytes a document
    python benchmarks_scripts/beir_scale.py corpus --docs 1000000 --out /tmp/beir_corpus

``search`` feeds :class:`cselab.evaluation.retrieval.RunningTopK` with random unit vectors
already on the device (no encoder), so it times the score matrix, the top-k and the merge;
``--check-docs`` first compares the fp16 search with the fp32 one on a prefix of the corpus.
``corpus`` writes a BEIR dataset of ``--docs`` documents (about 85 words each, FEVER's mean) and
runs :func:`cselab.evaluation.retrieval.evaluate_retrieval` with a stand-in encoder, reporting
the peak resident memory above the start per document and the embedding cache's bytes per
document with the corpus cache off (the default) and in fp16. Each prints one JSON line at the
end (``search`` also one per measured part, as it goes).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _unit(n: int, dim: int, gen, device):
    import torch

    return torch.nn.functional.normalize(torch.randn(n, dim, generator=gen, device=device), dim=1)


def _search(q, docs: int, chunk: int, k: int, precision: str, block: int, pool: list) -> tuple[float, object]:
    """Seconds to search ``docs`` documents (the chunks of ``pool`` in turn) and the top-k."""
    import torch

    from cselab.evaluation.retrieval import RunningTopK

    top = RunningTopK(q, k, precision=precision, query_block=block)
    sync = torch.cuda.synchronize if q.is_cuda else (lambda: None)
    sync()
    tic = time.perf_counter()
    for n, start in enumerate(range(0, docs, chunk)):
        c = pool[n % len(pool)][: min(chunk, docs - start)]
        top.add(c, (), start)
    sync()
    return time.perf_counter() - tic, top


def search_benchmark(args) -> dict:
    """Time the fp16 and fp32 searches at ``--docs`` x ``--queries``; check fp16 against fp32."""
    import torch

    dev = torch.device(args.device)
    gen = torch.Generator(device=dev).manual_seed(0)
    q = _unit(args.queries, args.dim, gen, dev)
    pool = [_unit(args.chunk, args.dim, gen, dev) for _ in range(args.pool)]
    out = {"device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", "docs": args.docs,
           "queries": args.queries, "dim": args.dim, "k": args.k, "chunk": args.chunk, "query_block": args.block}
    if args.check_docs:
        _, exact = _search(q, args.check_docs, args.chunk, args.k, "fp32", args.block, pool)
        _, half = _search(q, args.check_docs, args.chunk, args.k, "fp16", args.block, pool)
        same = (exact.idx.sort(dim=1).values == half.idx.sort(dim=1).values).all(dim=1).float().mean().item()
        out["check"] = {"docs": args.check_docs, "queries_same_topk_set": same,
                        "max_score_diff": (exact.vals - half.vals).abs().max().item(),
                        "uncertified_queries": half.uncertified()}
        print(json.dumps({"part": "check", **out["check"]}), flush=True)  # a run cut short keeps it
    for precision in args.precision.split(","):
        if dev.type == "cuda":
            _search(q, min(args.docs, 4 * args.chunk), args.chunk, args.k, precision, args.block, pool)  # warm-up
        seconds, top = _search(q, args.docs, args.chunk, args.k, precision, args.block, pool)
        out[precision] = {"seconds": round(seconds, 3), "uncertified_queries": top.uncertified(),
                          "doc_queries_per_s": args.docs * args.queries / seconds}
        if dev.type == "cuda":
            out[precision]["peak_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
        print(json.dumps({"part": precision, **out[precision]}), flush=True)
    return out


def _write_corpus(root: Path, docs: int, queries: int) -> None:
    """A BEIR dataset of ``docs`` generated documents (about 85 words each) and ``queries``."""
    import random

    rng = random.Random(0)
    words = [f"w{i}" for i in range(5000)]
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    with open(root / "corpus.jsonl", "w") as fh:
        for i in range(docs):
            text = " ".join(rng.choices(words, k=85))
            fh.write(json.dumps({"_id": f"doc{i}", "title": f"Title {i}", "text": text}) + "\n")
    with open(root / "queries.jsonl", "w") as fq, open(root / "qrels" / "test.tsv", "w") as fr:
        fr.write("query-id\tcorpus-id\tscore\n")
        for i in range(queries):
            fq.write(json.dumps({"_id": f"q{i}", "text": " ".join(rng.choices(words, k=8))}) + "\n")
            fr.write(f"q{i}\tdoc{rng.randrange(docs)}\t1\n")


def corpus_benchmark(args) -> dict:
    """Peak memory a document while streaming a generated corpus, and the cache's bytes a document."""
    import numpy as np

    from cselab.evaluation.encoding import EmbeddingCache
    from cselab.evaluation.retrieval import evaluate_retrieval

    root = Path(args.out)
    if not (root / "corpus.jsonl").is_file():
        _write_corpus(root, args.docs, args.queries)
    rng = np.random.default_rng(0)

    def encode(texts):  # a stand-in encoder: the search path's memory, not a model's
        return rng.standard_normal((len(texts), args.dim), dtype=np.float32)

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tic = time.perf_counter()
    res = evaluate_retrieval(encode, root, k=args.k, chunk_size=args.chunk, k_values=(10,))
    seconds = time.perf_counter() - tic
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    cache = EmbeddingCache.__new__(EmbeddingCache)
    cache.dir, cache.hits, cache.misses = root / "cache", 0, 0
    ids = [f"doc{i}" for i in range(min(args.chunk, args.docs))]
    cache.get("fp16", ids, lambda t: encode(t), "float16")
    fp16_bytes = (root / "cache" / "fp16.npy").stat().st_size / len(ids)
    return {"docs": res["n_docs"], "seconds": round(seconds, 1), "corpus_bytes_per_doc":
            round((root / "corpus.jsonl").stat().st_size / args.docs), "peak_rss_gb": round(peak / 1e9, 2),
            "rss_growth_bytes_per_doc": round((peak - rss0) / args.docs), "dim": args.dim,
            "cache_bytes_per_doc": {"corpus_cache false (default)": 0, "corpus_cache true (fp16)": round(fp16_bytes)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["search", "corpus"])
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=6980)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--chunk", type=int, default=50_000)
    ap.add_argument("--block", type=int, default=1024, help="queries scored at once")
    ap.add_argument("--pool", type=int, default=8, help="distinct random chunks cycled through (search)")
    ap.add_argument("--precision", default="fp16,fp32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--check-docs", type=int, default=0, help="compare fp16 with fp32 on this many documents")
    ap.add_argument("--out", default="/tmp/beir_corpus", help="the generated corpus's folder (corpus)")
    args = ap.parse_args()
    result = search_benchmark(args) if args.mode == "search" else corpus_benchmark(args)
    print(json.dumps({"command": " ".join(sys.argv), **result}), flush=True)


if __name__ == "__main__":
    main()
