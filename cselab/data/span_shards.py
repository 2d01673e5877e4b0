"""The corpus segmented in shards (:mod:`.spans`), one process each, then gathered.

One spaCy process segments ~570 sentences/s and spaCy's own ``n_process`` barely helps (its main
process rebuilds every doc), so the pipeline splits the corpus's sentences into ``spans.shards``
contiguous ranges of near-equal size (:func:`shard_range`), segments each in a job of its own
(:func:`segment_shard`) and concatenates the results in corpus order (:func:`gather_spans`).
The gathered file is byte for byte :func:`.spans.segment_corpus`'s, whatever the shard count;
its statistics too, except the timings, which are summed over the shards.

A shard writes its spans file, then a record (JSON: its range, the corpus's sentence count and
sha256, the spans file's size and sha256, its histogram, timings (wall and CPU: their ratio
shows how busy the machine was) and segmenter), each
atomically. The gather checks every record against the corpus and its spans file before its
own output appears, so a missing, half-written or stale shard is one error naming the file,
never a short spans file. Imports no torch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections import Counter
from pathlib import Path
from typing import IO

from cselab.data.corpus import read_sentences
from cselab.data.spans import corpus_stats, make_segmenter, segmenter_info, write_records
from cselab.errors import ConfigError, DataError
from cselab.io import lines_sha256, open_atomic, sha256_file, write_json

log = logging.getLogger(__name__)

_NAME = re.compile(r"^([0-9]+)-of-([0-9]+)$")
_CHUNK = 1 << 20
_FIX = "delete it and run snakemake again (its segment_shard job reruns)"


def shard_names(n: int) -> list[str]:
    """The names of ``n`` shards in corpus order, ``"<k>-of-<n>"`` (``k`` zero-padded to the
    width of ``n``: ``"03-of-16"``): the ``{shard}`` wildcard of the segmentation jobs."""
    if not isinstance(n, int) or n < 1:
        raise ConfigError(f"config key 'spans.shards': expected a positive integer, got {n!r}")
    width = len(str(n))
    return [f"{k:0{width}d}-of-{n}" for k in range(n)]


def parse_shard(name: str) -> tuple[int, int]:
    """``(k, n)`` of a shard name from :func:`shard_names`."""
    m = _NAME.match(name)
    if not m or not int(m[1]) < int(m[2]):
        raise ConfigError(f"spans shard {name!r}: expected '<k>-of-<n>' with 0 <= k < n")
    return int(m[1]), int(m[2])


def shard_range(n_sentences: int, k: int, n: int) -> tuple[int, int]:
    """Sentences ``[first, stop)`` of shard ``k`` of ``n``: the shards are contiguous, in order,
    cover every sentence once and differ in size by at most one (some are empty if ``n`` is
    larger than ``n_sentences``)."""
    return k * n_sentences // n, (k + 1) * n_sentences // n


def segment_shard(corpus: Path, shard: str, out_jsonl: Path, record_path: Path, settings: dict) -> dict:
    """Segment shard ``shard`` (``"<k>-of-<n>"``) of the sentences of ``corpus`` into
    ``out_jsonl`` (the records :func:`.spans.segment_corpus` writes for them, ``i`` counting the
    whole corpus), then write its record to ``record_path``; return the record. ``settings``: the
    ``spans`` config section (:func:`.spans.make_segmenter`)."""
    k, n = parse_shard(shard)
    sentences = read_sentences(Path(corpus))
    first, stop = shard_range(len(sentences), k, n)
    t0 = time.perf_counter()
    segmenter = make_segmenter(settings)
    load_seconds = time.perf_counter() - t0
    t0, cpu0 = time.perf_counter(), time.process_time()
    with open_atomic(out_jsonl) as f:
        hist = write_records(f, sentences[first:stop], segmenter, first)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - cpu0
    record = {
        "shard": shard, "index": k, "shards": n, "first": first, "stop": stop,
        "corpus_sentences": len(sentences), "corpus_sha256": lines_sha256(sentences),
        "spans_bytes": Path(out_jsonl).stat().st_size, "spans_sha256": sha256_file(out_jsonl),
        "units_per_sentence": {str(c): hist[c] for c in sorted(hist)},
        "seconds": seconds, "cpu_seconds": cpu_seconds, "load_seconds": load_seconds,
        "segmenter": segmenter_info(segmenter),
    }
    write_json(record_path, record)
    log.info("shard %s: sentences [%d, %d) of %d in %.1f s (%.0f/s; model load %.1f s)", shard, first, stop,
             len(sentences), seconds, (stop - first) / seconds if seconds > 0 else 0.0, load_seconds)
    return record


_RECORD_KEYS = {"shard": str, "index": int, "shards": int, "first": int, "stop": int, "corpus_sentences": int,
                "corpus_sha256": str, "spans_bytes": int, "spans_sha256": str, "units_per_sentence": dict,
                "seconds": (int, float), "load_seconds": (int, float), "segmenter": dict}


def read_record(path: Path) -> dict:
    """A shard's record (:func:`segment_shard`); :class:`DataError` naming the file if it is
    missing, not JSON or lacks a key."""
    path = Path(path)
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"spans shard record {path} does not exist; run its segment_shard job") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"spans shard record {path} is not valid JSON ({e}): it is incomplete; {_FIX}") from None
    bad = [k for k, t in _RECORD_KEYS.items() if not isinstance(rec, dict) or not isinstance(rec.get(k), t)]
    if bad:
        raise DataError(f"spans shard record {path} lacks {', '.join(bad)} (or has the wrong type): "
                        f"it is incomplete; {_FIX}")
    return rec


def check_records(records: list[dict], paths: list[Path], corpus: Path, sentences: list[str]) -> None:
    """Check that ``records`` are shards 0..n-1 of n, in order, each cut from ``sentences`` (the
    corpus's, by count and sha256) over its :func:`shard_range` and with one segmenter; raise
    :class:`DataError` naming the first record that is not."""
    n, key = len(records), lines_sha256(sentences)
    for k, (rec, path) in enumerate(zip(records, paths, strict=True)):
        def bad(why: str) -> DataError:
            return DataError(f"spans shard record {path}: {why}; {_FIX}")

        if (rec["index"], rec["shards"]) != (k, n):
            raise bad(f"it is shard {rec['index']} of {rec['shards']}, expected shard {k} of {n}")
        if (rec["corpus_sentences"], rec["corpus_sha256"]) != (len(sentences), key):
            raise bad(f"it was cut from a corpus of {rec['corpus_sentences']} sentences (sha256 "
                      f"{rec['corpus_sha256'][:12]}), not from {corpus} ({len(sentences)}, sha256 {key[:12]})")
        if (rec["first"], rec["stop"]) != shard_range(len(sentences), k, n):
            raise bad(f"it covers sentences [{rec['first']}, {rec['stop']}), expected "
                      f"{list(shard_range(len(sentences), k, n))}")
        if sum(rec["units_per_sentence"].values()) != rec["stop"] - rec["first"]:
            raise bad(f"its histogram counts {sum(rec['units_per_sentence'].values())} sentences, "
                      f"its range {rec['stop'] - rec['first']}")
        if rec["segmenter"] != records[0]["segmenter"]:
            raise bad(f"its segmenter {rec['segmenter']} differs from shard 0's {records[0]['segmenter']} "
                      "(another model or spaCy version?)")


def copy_shard(path: Path, rec: dict, record_path: Path, out: IO[bytes]) -> None:
    """Append the spans file ``path`` to ``out`` if it is the file its record describes (size
    and sha256); else :class:`DataError` naming it (a half-written or changed shard)."""
    digest, size = hashlib.sha256(), 0
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise DataError(f"spans shard {path} does not exist but its record {record_path} does; {_FIX}") from None
    with f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
    if (size, digest.hexdigest()) != (rec["spans_bytes"], rec["spans_sha256"]):
        raise DataError(f"spans shard {path} is incomplete or changed: {size} bytes (sha256 "
                        f"{digest.hexdigest()[:12]}) where its record {record_path} says {rec['spans_bytes']} "
                        f"(sha256 {rec['spans_sha256'][:12]}); {_FIX}")


def gather_spans(corpus: Path, spans_files: list[Path], record_files: list[Path], out_jsonl: Path,
                 stats_path: Path | None = None) -> dict:
    """Concatenate the shards' spans files (shard 0 first) into ``out_jsonl`` once every record
    checks out against ``corpus`` (:func:`check_records`) and every file against its record
    (:func:`copy_shard`); return the statistics of :func:`.spans.segment_corpus` (``seconds``
    and ``load_seconds`` summed over the shards, so ``sentences_per_s`` is one process's rate),
    also written to ``stats_path`` as JSON when given. On any error nothing appears at
    ``out_jsonl``."""
    spans_files, record_files = [Path(p) for p in spans_files], [Path(p) for p in record_files]
    if not spans_files or len(spans_files) != len(record_files):
        raise ValueError(f"gather_spans: {len(spans_files)} spans files for {len(record_files)} records")
    sentences = read_sentences(Path(corpus))  # an empty corpus stops here, naming the file
    records = [read_record(p) for p in record_files]
    check_records(records, record_files, Path(corpus), sentences)
    with open_atomic(out_jsonl, "wb") as out:
        for path, rec, rec_path in zip(spans_files, records, record_files):
            copy_shard(path, rec, rec_path, out)
    hist: Counter[int] = Counter()
    for rec in records:
        hist.update({int(c): v for c, v in rec["units_per_sentence"].items()})
    stats = corpus_stats(hist, sum(r["seconds"] for r in records), sum(r["load_seconds"] for r in records),
                         records[0]["segmenter"])
    log.info("gathered %d shards: %d sentences, %d units (%.2f per sentence); %.1f s of segmentation in all",
             len(records), stats["n_sentences"], stats["n_units"], stats["mean_units"], stats["seconds"])
    if stats_path is not None:
        write_json(stats_path, stats)
    return stats
