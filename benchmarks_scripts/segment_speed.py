"""Segmentation throughput: one process against N shard processes (cselab.data.span_shards).

Takes the first --lines lines of a corpus (the corpus repeated when it is shorter, and said so)
and, for each process count P of --processes, segments them as the pipeline's jobs do: P fresh
processes (spawned: each imports spaCy and loads the model, as a Snakemake job does), each
running ``segment_shard`` on its shard, then ``gather_spans``. Prints the command, a table (wall
seconds from the first start to the gathered file, lines/s, speedup over the first count, the
per-process segmentation rate, the slowest model load, the gather), whether every count gathered
the same bytes, and a projection for --project-lines lines on --project-cores cores from the
per-process rate at the largest count (so with its contention). No Snakemake needed:

    python benchmarks_scripts/segment_speed.py CORPUS [--lines 100000] [--processes 1,2]
        [--project-lines 1000000] [--project-cores 8] [--batch-size 512] [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shlex
import sys
import tempfile
import time
from itertools import cycle, islice
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # cselab from this checkout, installed or not

from cselab.data.span_shards import gather_spans, segment_shard, shard_names  # noqa: E402
from cselab.io import markdown_table, sha256_file  # noqa: E402


def take_lines(src: Path, n: int, dst: Path) -> dict:
    """Write the first ``n`` non-blank lines of ``src`` to ``dst``, cycling ``src`` if it has fewer."""
    with open(src, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in islice((x for x in f if x.strip()), n)]
    if not lines:
        raise SystemExit(f"{src} has no non-blank line")
    dst.write_text("".join(line + "\n" for line in islice(cycle(lines), n)), encoding="utf-8")
    return {"lines": n, "distinct_lines": len(lines), "repeats": round(n / len(lines), 2)}


def run_count(corpus: Path, processes: int, settings: dict, folder: Path) -> dict:
    """Segment ``corpus`` in ``processes`` spawned shard processes, then gather; the timings."""
    folder.mkdir(parents=True)
    names = shard_names(processes)
    spans = [folder / f"{name}.jsonl" for name in names]
    records = [folder / f"{name}.json" for name in names]
    ctx = multiprocessing.get_context("spawn")
    t0 = time.perf_counter()
    jobs = [ctx.Process(target=segment_shard, args=(corpus, name, s, r, settings))
            for name, s, r in zip(names, spans, records)]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join()
    if any(job.exitcode for job in jobs):
        raise SystemExit(f"a shard process failed (exit codes {[job.exitcode for job in jobs]})")
    t1 = time.perf_counter()
    stats = gather_spans(corpus, spans, records, folder / "spans.jsonl")
    t2 = time.perf_counter()
    recs = [json.loads(r.read_text()) for r in records]
    rates = [(r["stop"] - r["first"]) / r["seconds"] for r in recs if r["seconds"] > 0]
    cpu_rates = [(r["stop"] - r["first"]) / r["cpu_seconds"] for r in recs if r["cpu_seconds"] > 0]
    return {"processes": processes, "wall_s": t2 - t0, "shards_s": t1 - t0, "gather_s": t2 - t1,
            "lines_per_s": stats["n_sentences"] / (t2 - t0), "per_process_lines_per_s": sum(rates) / len(rates),
            "per_process_lines_per_cpu_s": sum(cpu_rates) / len(cpu_rates),
            "max_load_s": max(r["load_seconds"] for r in recs),
            "overhead_s": (t1 - t0) - max(r["seconds"] for r in recs),  # start, imports, model, corpus read
            "sha256": sha256_file(folder / "spans.jsonl"), "segmenter": recs[0]["segmenter"]}


def project(run: dict, measured_lines: int, lines: int, cores: int, rate_key: str) -> dict:
    """Wall time for ``lines`` on ``cores`` processes and on one, from ``run``'s per-process rate
    ``rate_key`` (per wall second: with this machine's contention; per CPU second: as if each
    process had a core of its own), its fixed overhead and its gather rate (linear in lines)."""
    rate, gather = run[rate_key], run["gather_s"] * lines / measured_lines
    at_cores = run["overhead_s"] + lines / (cores * rate) + gather
    one = run["overhead_s"] + lines / rate + gather
    return {"lines": lines, "cores": cores, "from_processes": run["processes"], "rate": rate_key,
            "seconds": at_cores, "one_core_seconds": one, "speedup": one / at_cores}


def report(args, corpus_info: dict, runs: list[dict], projections: list[dict]) -> str:
    """The printed summary: command, corpus, table, identity check and projections."""
    base = runs[0]["lines_per_s"]
    rows = [[r["processes"], f"{r['wall_s']:.1f}", f"{r['lines_per_s']:.0f}", f"{r['lines_per_s'] / base:.2f}x",
             f"{r['per_process_lines_per_s']:.0f}", f"{r['per_process_lines_per_cpu_s']:.0f}",
             f"{r['max_load_s']:.1f}", f"{r['gather_s']:.1f}"] for r in runs]
    seg = runs[0]["segmenter"]
    same = len({r["sha256"] for r in runs}) == 1
    return "\n".join([
        "command: " + shlex.join([sys.executable, *sys.argv]),
        f"corpus: first {corpus_info['lines']} lines of {args.corpus} ({corpus_info['distinct_lines']} distinct, "
        f"x{corpus_info['repeats']}); {os.cpu_count()} CPUs here; spaCy {seg.get('spacy_version')}, "
        f"{seg.get('model_loaded')} {seg.get('model_version')}, batch {seg.get('batch_size')}",
        "",
        markdown_table(["processes", "wall s", "lines/s", "speedup", "per-process lines/s",
                        "per-process lines/CPU-s", "model load s", "gather s"], rows),
        f"gathered spans identical for every process count: {'yes' if same else 'NO'} "
        f"(sha256 {runs[0]['sha256'][:16]})",
        *[f"projection ({p['rate'].replace('per_process_', '').replace('_', ' ')} at {p['from_processes']} "
          f"processes): {p['lines']:,} lines on {p['cores']} cores {p['seconds'] / 60:.1f} min, one core "
          f"{p['one_core_seconds'] / 60:.1f} min ({p['speedup']:.1f}x)" for p in projections],
    ])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--processes", default="1,2", help="comma-separated process (shard) counts")
    ap.add_argument("--batch-size", type=int, help="spans.batch_size (default: config.yaml's)")
    ap.add_argument("--model", help="spans.model (default: config.yaml's)")
    ap.add_argument("--project-lines", type=int, default=1_000_000)
    ap.add_argument("--project-cores", type=int, default=8)
    ap.add_argument("--out", type=Path, help="also write the results here as JSON")
    args = ap.parse_args()
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):  # as a 1-thread job (set_threads)
        os.environ.setdefault(name, "1")
    settings = {**yaml.safe_load((ROOT / "config.yaml").read_text())["spans"], "n_process": 1}
    settings.update({k: v for k, v in (("batch_size", args.batch_size), ("model", args.model)) if v is not None})
    with tempfile.TemporaryDirectory(prefix="segment_speed-") as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus_info = take_lines(args.corpus, args.lines, corpus)
        runs = [run_count(corpus, p, settings, Path(tmp) / f"p{p}") for p in map(int, args.processes.split(","))]
    projections = [project(runs[-1], args.lines, args.project_lines, args.project_cores, key)
                   for key in ("per_process_lines_per_s", "per_process_lines_per_cpu_s")]
    print(report(args, corpus_info, runs, projections))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"command": shlex.join([sys.executable, *sys.argv]), "cpus": os.cpu_count(),
                                        "settings": settings, "corpus": {"path": str(args.corpus), **corpus_info},
                                        "runs": runs, "projections": projections}, indent=2) + "\n")


if __name__ == "__main__":
    main()
