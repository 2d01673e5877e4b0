"""The training corpus: downloaded or taken in place, cleaned to one sentence per line."""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

from cselab.data.download import local_or_download, url_basename
from cselab.errors import DataError
from cselab.io import as_recorded, open_atomic, write_json

log = logging.getLogger(__name__)

#: File name of the full SimCSE corpus and its published line count.
CORPUS_FILENAME = "wiki1m_for_simcse.txt"
CORPUS_FULL_LINES = 1_000_000
#: a line longer than this many characters is cut to it (the SimCSE corpus's longest line has
#: 2,919; training reads max_len tokens of a line anyway)
MAX_LINE_CHARS = 10_000
#: characters that drop a line: NUL and the other C0/C1 controls (tab excepted), binary debris
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def prepare_corpus(
    *,
    url: str | None,
    path: str | None,
    out_txt: Path,
    manifest: Path,
    max_lines: int | None = None,
    sha256: str | None = None,
    download_dir: Path,
) -> dict:
    """Write a clean one-sentence-per-line corpus to ``out_txt`` and a JSON ``manifest``.

    ``path`` (a local file) wins over ``url`` (downloaded into ``download_dir``; ``sha256``, if
    given, pins the download only). Lines lose their trailing newline; empty and whitespace-only
    lines are dropped, and so are lines holding NUL or other control characters (counted:
    ``dropped_control_lines``); a line over :data:`MAX_LINE_CHARS` characters is cut to it
    (``truncated_lines``); with ``max_lines`` only the first ``max_lines`` remaining lines are
    kept. The full SimCSE corpus (downloaded, uncapped) must have 1,000,000 lines.

    Returns the manifest: ``source, source_sha256, source_lines, out, out_lines, out_sha256,
    max_lines``.
    """
    if max_lines is not None and max_lines <= 0:
        raise DataError(f"data.corpus.max_lines must be a positive integer or null, got {max_lines!r}.")
    got = local_or_download("Corpus file", "data.corpus", path=path, url=url, download_dir=download_dir, sha256=sha256,
                            local_fix="data.corpus.path=/path/to/wiki1m_for_simcse.txt")
    if got.archive is None and got.path.stat().st_size == 0:
        raise DataError(f"Corpus file {got.path} is empty (data.corpus.path); point data.corpus.path at the real "
                        "corpus (one sentence per line).")
    full = got.archive is not None and max_lines is None and url_basename(url) == CORPUS_FILENAME
    st = got.path.stat()
    result = {"source": got.source, **_clean_corpus(got.path, Path(out_txt), max_lines, full),
              "max_lines": max_lines, "source_path": as_recorded(got.path), "source_bytes": st.st_size,
              "source_mtime_ns": st.st_mtime_ns, "out_bytes": Path(out_txt).stat().st_size}
    write_json(manifest, result)
    return result


def _clean_corpus(src: Path, out_txt: Path, max_lines: int | None, full: bool) -> dict:
    """Copy ``src`` to ``out_txt`` one sentence per line: trailing newlines off, blank lines out,
    at most ``max_lines``; ``full`` (the SimCSE corpus itself) must have 1,000,000 lines."""
    src_hash, out_hash = hashlib.sha256(), hashlib.sha256()
    source_lines = out_lines = dropped = truncated = 0
    with open(src, "rb") as f, open_atomic(out_txt, "wb") as out:
        for raw in f:
            src_hash.update(raw)
            source_lines += 1
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"Corpus file {src} is not valid UTF-8 (line {source_lines}: {e.reason}); "
                                "re-download it or convert it to UTF-8.") from e
            line = line.rstrip("\r\n")
            if not line.strip() or (max_lines is not None and out_lines >= max_lines):
                continue
            if _CONTROL.search(line):
                dropped += 1
                continue
            if len(line) > MAX_LINE_CHARS:
                line, truncated = line[:MAX_LINE_CHARS], truncated + 1
            data = (line + "\n").encode("utf-8")
            out.write(data)
            out_hash.update(data)
            out_lines += 1
        if out_lines == 0:
            raise DataError(f"Corpus file {src} has no non-empty lines; point data.corpus.path/url at the real corpus.")
        if full and source_lines != CORPUS_FULL_LINES:
            raise DataError(f"Corpus file {src} has {source_lines} lines, expected {CORPUS_FULL_LINES}: "
                            f"truncated or corrupt download, delete {src} and re-run.")
    if dropped or truncated:
        log.warning("corpus %s: %d line(s) with control characters dropped, %d line(s) over %d characters cut",
                    src, dropped, truncated, MAX_LINE_CHARS)
    return {"source_sha256": src_hash.hexdigest(), "source_lines": source_lines, "out": str(out_txt),
            "out_lines": out_lines, "out_sha256": out_hash.hexdigest(), "dropped_control_lines": dropped,
            "truncated_lines": truncated}


def read_sentences(path: Path, min_lines: int = 1) -> list[str]:
    """A corpus's sentences, one per line (newline stripped, blank lines skipped). Shared by the
    training loop and the segmenter; imports no torch (the spans environment has none).
    Fewer than ``min_lines`` sentences is a :class:`DataError` (contrastive training needs 2)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"training corpus {path} does not exist; run the prepare_corpus step first")
    with open(path, encoding="utf-8") as f:
        lines = [line for line in (raw.rstrip("\n") for raw in f) if line.strip()]
    if not lines:
        raise DataError(f"training corpus {path} has no non-empty line (check data.corpus.path / max_lines)")
    if len(lines) < min_lines:
        raise DataError(f"training corpus {path} has {len(lines)} non-empty line(s); contrastive training "
                        f"needs at least {min_lines} (check data.corpus.path / max_lines)")
    return lines


def split_corpus(corpus: Path, fraction: float, train_out: Path, heldout_out: Path, seed: int = 42) -> dict:
    """Hold out a random ``fraction`` of the corpus's distinct sentences (seeded): the gradient
    paradigm's statistics run on sentences its models never saw (Li et al., 2024, appendix A.2:
    10%). Every copy of a held-out sentence leaves the training file; the held-out file lists
    each once; both keep the corpus order."""
    import random

    if not 0 < fraction < 1:
        raise DataError(f"held-out fraction must be in (0, 1), got {fraction!r}")
    sentences = read_sentences(Path(corpus), min_lines=2)
    unique = list(dict.fromkeys(sentences))
    if len(unique) < 2:
        raise DataError(f"{corpus}: {len(unique)} distinct sentence(s); a held-out split needs at least 2")
    order = list(range(len(unique)))
    random.Random(seed).shuffle(order)
    held = {unique[i] for i in order[:max(1, int(fraction * len(unique)))]}
    train = [s for s in sentences if s not in held]
    with open_atomic(train_out) as out:
        out.writelines(s + "\n" for s in train)
    with open_atomic(heldout_out) as out:
        out.writelines(s + "\n" for s in unique if s in held)
    return {"sentences": len(sentences), "distinct": len(unique), "train": len(train), "heldout": len(held),
            "fraction": fraction, "seed": seed}
