"""Download and verify the pipeline's two datasets: the training corpus and SentEval.

Every function either returns a small JSON-able manifest or raises :class:`DataError`
with one message that names the URL or file at fault and says how to fix it.

* :func:`fetch` streams an ``http(s)://`` or ``file://`` URL to disk (``dest.part`` then an
  atomic rename), checking Content-Length, emptiness and an optional sha256.
* :func:`prepare_corpus` turns the corpus (a URL or a local file) into a clean one-sentence-
  per-line text file, optionally capped to the first ``max_lines`` sentences.
* :func:`prepare_senteval` locates (a local directory) or downloads and safely extracts (a URL)
  the SentEval ``downstream/`` tree, then :func:`verify_senteval` checks the files, their row
  counts and the STS input/gold alignment.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable

from cselab.errors import DataError
from cselab.sts import STS_SUBSETS, STS_TASKS

CORPUS_URL = (
    "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/"
    "wiki1m_for_simcse.txt"
)
SENTEVAL_URL = (
    "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/senteval.tar"
)
#: File name of the full SimCSE corpus and its published line count.
CORPUS_FILENAME = "wiki1m_for_simcse.txt"
CORPUS_FULL_LINES = 1_000_000

_CHUNK = 1 << 20
_EXTRACT_MARKER = ".cselab_extracted"

TRANSFER_TASKS = ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"]
KNOWN_TASKS = STS_TASKS + TRANSFER_TASKS


def _task_files(task: str) -> list[tuple[str, str]]:
    """The ``(relpath, kind)`` pairs a task needs; ``kind`` says how its rows are counted."""
    if task in STS_SUBSETS:
        folder, subsets = f"STS/{task}-en-test", STS_SUBSETS[task]
        files = []
        for s in subsets:
            files.append((f"{folder}/STS.input.{s}.txt", "sts_input"))
            files.append((f"{folder}/STS.gs.{s}.txt", "sts_gold"))
        return files
    simple: dict[str, tuple[str, list[str], str]] = {
        "STSBenchmark": ("STS/STSBenchmark", ["sts-train.csv", "sts-dev.csv", "sts-test.csv"], "stsb"),
        "SICKRelatedness": ("SICK", ["SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt"], "sick"),
        "MR": ("MR", ["rt-polarity.pos", "rt-polarity.neg"], "lines"),
        "CR": ("CR", ["custrev.pos", "custrev.neg"], "lines"),
        "SUBJ": ("SUBJ", ["subj.subjective", "subj.objective"], "lines"),
        "MPQA": ("MPQA", ["mpqa.pos", "mpqa.neg"], "lines"),
        "SST2": ("SST/binary", ["sentiment-train", "sentiment-dev", "sentiment-test"], "lines"),
        "TREC": ("TREC", ["train_5500.label", "TREC_10.label"], "lines"),
        "MRPC": ("MRPC", ["msr_paraphrase_train.txt", "msr_paraphrase_test.txt"], "header"),
    }
    folder, names, kind = simple[task]
    return [(f"{folder}/{n}", kind) for n in names]


# Published row counts (shared/data/README.md), per file, counted as the README does:
# STS12-16 gold = scored pairs (non-blank gold lines); STS12-16 input = all pairs (lines, which
# the README does not list: taken from the files, they equal the gold files' line counts);
# STS-B, SST, TREC, MR/CR/SUBJ/MPQA = lines per file; SICK, MRPC = lines minus the header.
# The README gives STS12-16 as per-year totals only; the per-subset numbers below are what the
# files contain and sum to them (3108, 1500, 3750, 3000, 1186). CR (2407 + 1368) and MPQA
# (3312 + 7294) match the raw line counts, i.e. they include the few blank lines those files
# contain (SentEval keeps them too), so blank lines are counted for those tasks.
EXPECTED_COUNTS: dict[str, dict[str, int]] = {
    "STS12": {
        "STS/STS12-en-test/STS.input.MSRpar.txt": 750, "STS/STS12-en-test/STS.gs.MSRpar.txt": 750,
        "STS/STS12-en-test/STS.input.MSRvid.txt": 750, "STS/STS12-en-test/STS.gs.MSRvid.txt": 750,
        "STS/STS12-en-test/STS.input.SMTeuroparl.txt": 459, "STS/STS12-en-test/STS.gs.SMTeuroparl.txt": 459,
        "STS/STS12-en-test/STS.input.surprise.OnWN.txt": 750, "STS/STS12-en-test/STS.gs.surprise.OnWN.txt": 750,
        "STS/STS12-en-test/STS.input.surprise.SMTnews.txt": 399, "STS/STS12-en-test/STS.gs.surprise.SMTnews.txt": 399,
    },
    "STS13": {
        "STS/STS13-en-test/STS.input.FNWN.txt": 189, "STS/STS13-en-test/STS.gs.FNWN.txt": 189,
        "STS/STS13-en-test/STS.input.headlines.txt": 750, "STS/STS13-en-test/STS.gs.headlines.txt": 750,
        "STS/STS13-en-test/STS.input.OnWN.txt": 561, "STS/STS13-en-test/STS.gs.OnWN.txt": 561,
    },
    "STS14": {
        "STS/STS14-en-test/STS.input.deft-forum.txt": 450, "STS/STS14-en-test/STS.gs.deft-forum.txt": 450,
        "STS/STS14-en-test/STS.input.deft-news.txt": 300, "STS/STS14-en-test/STS.gs.deft-news.txt": 300,
        "STS/STS14-en-test/STS.input.headlines.txt": 750, "STS/STS14-en-test/STS.gs.headlines.txt": 750,
        "STS/STS14-en-test/STS.input.images.txt": 750, "STS/STS14-en-test/STS.gs.images.txt": 750,
        "STS/STS14-en-test/STS.input.OnWN.txt": 750, "STS/STS14-en-test/STS.gs.OnWN.txt": 750,
        "STS/STS14-en-test/STS.input.tweet-news.txt": 750, "STS/STS14-en-test/STS.gs.tweet-news.txt": 750,
    },
    "STS15": {
        "STS/STS15-en-test/STS.input.answers-forums.txt": 2000, "STS/STS15-en-test/STS.gs.answers-forums.txt": 375,
        "STS/STS15-en-test/STS.input.answers-students.txt": 1500, "STS/STS15-en-test/STS.gs.answers-students.txt": 750,
        "STS/STS15-en-test/STS.input.belief.txt": 2000, "STS/STS15-en-test/STS.gs.belief.txt": 375,
        "STS/STS15-en-test/STS.input.headlines.txt": 1500, "STS/STS15-en-test/STS.gs.headlines.txt": 750,
        "STS/STS15-en-test/STS.input.images.txt": 1500, "STS/STS15-en-test/STS.gs.images.txt": 750,
    },
    "STS16": {
        "STS/STS16-en-test/STS.input.answer-answer.txt": 1572, "STS/STS16-en-test/STS.gs.answer-answer.txt": 254,
        "STS/STS16-en-test/STS.input.headlines.txt": 1498, "STS/STS16-en-test/STS.gs.headlines.txt": 249,
        "STS/STS16-en-test/STS.input.plagiarism.txt": 1271, "STS/STS16-en-test/STS.gs.plagiarism.txt": 230,
        "STS/STS16-en-test/STS.input.postediting.txt": 3287, "STS/STS16-en-test/STS.gs.postediting.txt": 244,
        "STS/STS16-en-test/STS.input.question-question.txt": 1555, "STS/STS16-en-test/STS.gs.question-question.txt": 209,
    },
    "STSBenchmark": {
        "STS/STSBenchmark/sts-train.csv": 5749,
        "STS/STSBenchmark/sts-dev.csv": 1500,
        "STS/STSBenchmark/sts-test.csv": 1379,
    },
    "SICKRelatedness": {
        "SICK/SICK_train.txt": 4500,
        "SICK/SICK_trial.txt": 500,
        "SICK/SICK_test_annotated.txt": 4927,
    },
    "MR": {"MR/rt-polarity.pos": 5331, "MR/rt-polarity.neg": 5331},
    "CR": {"CR/custrev.pos": 2407, "CR/custrev.neg": 1368},
    "SUBJ": {"SUBJ/subj.subjective": 5000, "SUBJ/subj.objective": 5000},
    "MPQA": {"MPQA/mpqa.pos": 3312, "MPQA/mpqa.neg": 7294},
    "SST2": {
        "SST/binary/sentiment-train": 67349,
        "SST/binary/sentiment-dev": 872,
        "SST/binary/sentiment-test": 1821,
    },
    "TREC": {"TREC/train_5500.label": 5452, "TREC/TREC_10.label": 500},
    "MRPC": {"MRPC/msr_paraphrase_train.txt": 4076, "MRPC/msr_paraphrase_test.txt": 1725},
}

_SENTEVAL_FIX = "re-download SentEval (delete it and re-run) or point data.senteval.path at a complete tree"
_STRICT_FIX = "re-download, or set data.senteval.strict_counts: false for a trimmed tree"


# --------------------------------------------------------------------------- helpers


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` via a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=False, default=str)
        f.write("\n")
    os.replace(tmp, path)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _manual_fix(source: str) -> str:
    """The generic fix :func:`fetch` suggests for ``source``."""
    return f"download {source} manually and use the local copy"


def _with_fix(err: DataError, source: str, setting: str) -> DataError:
    """A copy of ``err`` whose generic manual-download fix names the config key to set."""
    specific = f"download {source} manually and pass {setting}"
    msg = str(err)
    return DataError(msg.replace(_manual_fix(source), specific) if _manual_fix(source) in msg
                     else f"{msg} Or {specific}.")


# --------------------------------------------------------------------------- fetch


def fetch(source: str, dest: Path, *, sha256: str | None = None, timeout: float = 60.0) -> dict:
    """Download ``source`` (``http(s)://`` or ``file://``) to ``dest`` and verify it.

    The body is streamed to ``dest.part`` and renamed to ``dest`` only once complete and
    verified. If ``dest`` already exists and matches ``sha256`` (or, without ``sha256``, is
    non-empty) nothing is downloaded. Raises :class:`DataError` on an HTTP error or unreachable
    host, a body shorter than its Content-Length, an empty body, or a sha256 mismatch.

    Returns ``{"source", "path", "bytes", "sha256"}``.
    """
    dest = Path(dest)
    scheme = urllib.parse.urlsplit(source).scheme.lower()
    if scheme not in ("http", "https", "file"):
        raise DataError(
            f"Cannot fetch {source!r}: only http://, https:// and file:// URLs are supported; "
            "fix the URL or give a local path instead."
        )
    expected = sha256.lower() if sha256 else None

    if dest.is_file() and dest.stat().st_size > 0:
        digest = sha256_file(dest)
        if expected is None or digest == expected:
            return {"source": source, "path": str(dest), "bytes": dest.stat().st_size, "sha256": digest}
        # Stale or corrupt copy: download again.

    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    manual = f"check the URL and your network, or {_manual_fix(source)}"
    h = hashlib.sha256()
    written = 0
    try:
        with urllib.request.urlopen(source, timeout=timeout) as resp, open(part, "wb") as out:
            length = resp.headers.get("Content-Length")
            expected_len = int(length) if length and length.strip().isdigit() else None
            while chunk := resp.read(_CHUNK):
                out.write(chunk)
                h.update(chunk)
                written += len(chunk)
    except urllib.error.HTTPError as e:
        _unlink(part)
        raise DataError(f"Download of {source} failed: HTTP {e.code} {e.reason}; {manual}.") from e
    except urllib.error.URLError as e:
        _unlink(part)
        raise DataError(f"Cannot reach {source}: {e.reason}; {manual}.") from e
    except (http.client.IncompleteRead, ConnectionError, TimeoutError) as e:
        _unlink(part)
        raise DataError(
            f"Download of {source} was truncated or interrupted after {written} bytes ({e!r}); "
            f"re-run, or {manual}."
        ) from e
    except http.client.HTTPException as e:
        _unlink(part)
        raise DataError(f"Download of {source} failed: {e!r}; {manual}.") from e

    if expected_len is not None and written < expected_len:
        _unlink(part)
        raise DataError(
            f"Download of {source} was truncated: got {written} of {expected_len} bytes "
            f"(Content-Length); re-run, or {manual}."
        )
    if written == 0:
        _unlink(part)
        raise DataError(f"Download of {source} is empty (0 bytes); {manual}.")
    digest = h.hexdigest()
    if expected is not None and digest != expected:
        _unlink(part)
        raise DataError(
            f"sha256 mismatch for {source}: expected {expected}, got {digest} "
            f"(corrupt or changed file; the partial download was deleted); re-run, or {manual}."
        )
    os.replace(part, dest)
    return {"source": source, "path": str(dest), "bytes": written, "sha256": digest}


# --------------------------------------------------------------------------- corpus


def _url_basename(url: str) -> str:
    name = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path)).name
    return name or "download"


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
    lines are dropped; with ``max_lines`` only the first ``max_lines`` remaining lines are kept.
    The full SimCSE corpus (downloaded, uncapped) must have 1,000,000 lines.

    Returns the manifest: ``source, source_sha256, source_lines, out, out_lines, out_sha256,
    max_lines``.
    """
    if max_lines is not None and max_lines <= 0:
        raise DataError(f"data.corpus.max_lines must be a positive integer or null, got {max_lines!r}.")
    if path:
        src = Path(path).expanduser().resolve()
        if not src.is_file():
            raise DataError(
                f"Corpus file {src} does not exist (data.corpus.path); fix data.corpus.path or "
                "unset it to download data.corpus.url."
            )
        if src.stat().st_size == 0:
            raise DataError(
                f"Corpus file {src} is empty (data.corpus.path); point data.corpus.path at the real "
                "corpus (one sentence per line)."
            )
        source = str(src)
    elif url:
        try:
            got = fetch(url, Path(download_dir) / _url_basename(url), sha256=sha256)
        except DataError as e:
            raise _with_fix(e, url, "data.corpus.path=/path/to/wiki1m_for_simcse.txt") from e
        src = Path(got["path"])
        source = url
    else:
        raise DataError("No corpus given: set data.corpus.url or data.corpus.path.")

    out_txt = Path(out_txt)
    out_txt.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_txt.with_name(out_txt.name + ".tmp")
    src_hash, out_hash = hashlib.sha256(), hashlib.sha256()
    source_lines = out_lines = 0
    with open(src, "rb") as f, open(tmp, "wb") as out:
        for raw in f:
            src_hash.update(raw)
            source_lines += 1
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                out.close()
                _unlink(tmp)
                raise DataError(
                    f"Corpus file {src} is not valid UTF-8 (line {source_lines}: {e.reason}); "
                    "re-download it or convert it to UTF-8."
                ) from e
            line = line.rstrip("\r\n")
            if not line.strip() or (max_lines is not None and out_lines >= max_lines):
                continue
            data = (line + "\n").encode("utf-8")
            out.write(data)
            out_hash.update(data)
            out_lines += 1
    if out_lines == 0:
        _unlink(tmp)
        raise DataError(
            f"Corpus file {src} has no non-empty lines; point data.corpus.path/url at the real corpus."
        )
    if url and not path and max_lines is None and _url_basename(url) == CORPUS_FILENAME:
        if source_lines != CORPUS_FULL_LINES:
            _unlink(tmp)
            raise DataError(
                f"Corpus file {src} has {source_lines} lines, expected {CORPUS_FULL_LINES}: "
                f"truncated or corrupt download, delete {src} and re-run."
            )
    os.replace(tmp, out_txt)
    result = {
        "source": source,
        "source_sha256": src_hash.hexdigest(),
        "source_lines": source_lines,
        "out": str(out_txt),
        "out_lines": out_lines,
        "out_sha256": out_hash.hexdigest(),
        "max_lines": max_lines,
    }
    write_json_atomic(Path(manifest), result)
    return result


# --------------------------------------------------------------------------- SentEval


def _safe_extract(tar_path: Path, extract_dir: Path) -> None:
    """Extract ``tar_path`` into ``extract_dir``, rejecting absolute, ``..`` and link members."""
    bad = f"{tar_path} is corrupt or not a tar archive; delete it and re-run"
    try:
        with tarfile.open(tar_path, "r:*") as tar:
            members = tar.getmembers()
            for m in members:
                name = m.name
                parts = Path(name).parts
                if name.startswith(("/", "\\")) or Path(name).is_absolute() or ".." in parts:
                    raise DataError(
                        f"{tar_path} contains an unsafe member {name!r} (absolute path or '..'); "
                        "refusing to extract it. Delete it and re-download from a trusted source."
                    )
                if m.issym() or m.islnk() or not (m.isfile() or m.isdir()):
                    raise DataError(
                        f"{tar_path} contains a link or special file {name!r}; refusing to extract it. "
                        "Delete it and re-download from a trusted source."
                    )
            for m in members:
                if hasattr(tarfile, "data_filter"):
                    tar.extract(m, extract_dir, filter="data")
                else:  # pragma: no cover - Python without extraction filters
                    tar.extract(m, extract_dir)
    except (tarfile.TarError, EOFError) as e:
        raise DataError(f"{bad} ({e}).") from e
    except OSError as e:
        raise DataError(
            f"Cannot extract {tar_path} into {extract_dir}: {e}; free disk space or fix "
            "permissions, then re-run."
        ) from e


def _find_downstream(base: Path) -> Path | None:
    """The shallowest directory called ``downstream`` under ``base`` (``base`` itself included)."""
    if base.name == "downstream" and base.is_dir():
        return base
    for depth in range(4):
        pattern = "/".join(["*"] * depth + ["downstream"])
        hits = sorted(p for p in base.glob(pattern) if p.is_dir())
        if hits:
            return hits[0]
    return None


def extract_once(archive: Path, archive_sha: str, extract_dir: Path,
                 extract: Callable[[Path, Path], None]) -> None:
    """Extract ``archive`` into ``extract_dir`` unless it already holds it (marker = its sha256).

    Extraction goes to a ``.part`` folder renamed at the end, so an interrupted run leaves no
    half-extracted tree; a non-empty folder that cselab did not extract is never deleted.
    """
    marker = extract_dir / _EXTRACT_MARKER
    if marker.is_file() and marker.read_text().strip() == archive_sha:
        return
    if extract_dir.exists():
        if not marker.is_file() and any(extract_dir.iterdir()):
            raise DataError(f"{extract_dir} exists and was not extracted by cselab; delete it or choose "
                            "another extract directory, then re-run.")
        shutil.rmtree(extract_dir)
    tmp = extract_dir.with_name(extract_dir.name + ".part")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        extract(archive, tmp)
    except DataError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    (tmp / _EXTRACT_MARKER).write_text(archive_sha + "\n")
    os.replace(tmp, extract_dir)


def _extract_senteval(tar_path: Path, tar_sha: str, extract_dir: Path) -> Path:
    """Extract the SentEval tar into ``extract_dir`` (once per archive digest); return its root."""
    extract_once(tar_path, tar_sha, extract_dir, _safe_extract)
    root = _find_downstream(extract_dir)
    if root is None:
        raise DataError(
            f"{tar_path} has no 'downstream' folder (expected the SentEval layout downstream/<TASK>/); "
            "delete it and re-run, or point data.senteval.path at a SentEval directory."
        )
    return root


def prepare_senteval(
    *,
    url: str | None,
    path: str | None,
    extract_dir: Path,
    manifest: Path,
    tasks: list[str] | None = None,
    strict_counts: bool = True,
    download_dir: Path,
) -> dict:
    """Locate or download SentEval, verify it, and write a JSON ``manifest``.

    ``path`` (a local directory, either holding the task folders or a ``downstream/`` folder)
    wins over ``url`` and is used in place (never copied). A ``url`` is a tar with the layout
    ``downstream/<TASK>/...``: it is fetched into ``download_dir`` and safely extracted into
    ``extract_dir``. The tree is then checked by :func:`verify_senteval`.

    Returns the manifest: ``{"source", "archive", "root", "strict_counts", "tasks"}`` where
    ``root`` is the absolute path of the task folders and ``tasks`` is as in
    :func:`verify_senteval`.
    """
    archive = None
    if path:
        base = Path(path).expanduser().resolve()
        if not base.is_dir():
            raise DataError(
                f"SentEval directory {base} does not exist (data.senteval.path); fix "
                "data.senteval.path or unset it to download data.senteval.url."
            )
        root = base / "downstream" if (base / "downstream").is_dir() else base
        source = str(base)
    elif url:
        try:
            got = fetch(url, Path(download_dir) / _url_basename(url))
        except DataError as e:
            raise _with_fix(e, url, "data.senteval.path=/path/to/unpacked/downstream") from e
        archive = {"path": got["path"], "bytes": got["bytes"], "sha256": got["sha256"]}
        root = _extract_senteval(Path(got["path"]), got["sha256"], Path(extract_dir)).resolve()
        source = url
    else:
        raise DataError("No SentEval source given: set data.senteval.url or data.senteval.path.")

    verified = verify_senteval(root, tasks, strict_counts)
    result = {
        "source": source,
        "archive": archive,
        "root": verified["root"],
        "strict_counts": strict_counts,
        "tasks": verified["tasks"],
    }
    write_json_atomic(Path(manifest), result)
    return result


def _count_rows(path: Path, kind: str, data: bytes) -> int:
    """Rows of one SentEval file, counted as the README table does; checks the row format."""
    lines = data.splitlines()

    def bad(msg: str) -> DataError:
        return DataError(f"SentEval file {path} is malformed: {msg}; {_SENTEVAL_FIX}.")

    def check_float(i: int, fields: list[bytes], col: int) -> None:
        try:
            float(fields[col])
        except (ValueError, IndexError):
            raise bad(f"line {i}: column {col + 1} is not a score") from None

    if kind == "sts_input":
        for i, line in enumerate(lines, 1):
            n_fields = len(line.split(b"\t"))
            if n_fields != 2:
                raise bad(f"line {i} has {n_fields} tab-separated fields, expected 2 (sentence pair)")
        return len(lines)
    if kind == "sts_gold":
        rows = 0
        for i, line in enumerate(lines, 1):
            if line.strip():
                check_float(i, [line.strip()], 0)
                rows += 1
        return rows
    if kind == "stsb":
        for i, line in enumerate(lines, 1):
            fields = line.split(b"\t")
            if len(fields) < 7:
                raise bad(f"line {i} has {len(fields)} tab-separated fields, expected at least 7")
            check_float(i, fields, 4)
        return len(lines)
    if kind == "sick":
        if not lines or not lines[0].lstrip(b"\xef\xbb\xbf").startswith(b"pair_ID"):
            raise bad("missing the 'pair_ID ...' header line")
        for i, line in enumerate(lines[1:], 2):
            fields = line.split(b"\t")
            if len(fields) < 4:
                raise bad(f"line {i} has {len(fields)} tab-separated fields, expected at least 4")
            check_float(i, fields, 3)
        return len(lines) - 1
    if kind == "header":
        return max(len(lines) - 1, 0)
    return len(lines)


def verify_senteval(root: Path, tasks: list[str] | None = None, strict_counts: bool = True) -> dict:
    """Check the SentEval task folders under ``root`` and return their file digests and rows.

    ``tasks`` defaults to the seven STS tasks (:data:`STS_TASKS`). Every expected file must exist
    and be non-empty; each STS12-16 input file must have as many lines as its gold file and two
    tab-separated sentences per line. With ``strict_counts`` the row counts must equal
    :data:`EXPECTED_COUNTS`.

    Returns ``{"root": abs path, "tasks": {task: {"files": {relpath: {"sha256", "rows"}}}}}``.
    """
    root = Path(root).expanduser().resolve()
    if not root.is_dir():
        raise DataError(f"SentEval directory {root} does not exist; {_SENTEVAL_FIX}.")
    tasks = list(STS_TASKS if tasks is None else tasks)
    unknown = [t for t in tasks if t not in KNOWN_TASKS]
    if unknown:
        raise DataError(
            f"Unknown SentEval task(s) {unknown} in data.senteval.tasks; known: {KNOWN_TASKS}."
        )
    out: dict[str, Any] = {"root": str(root), "tasks": {}}
    for task in tasks:
        files: dict[str, dict] = {}
        line_counts: dict[str, int] = {}
        for relpath, kind in _task_files(task):
            fpath = root / relpath
            if not fpath.is_file():
                raise DataError(f"SentEval file {fpath} is missing (task {task}); {_SENTEVAL_FIX}.")
            data = fpath.read_bytes()
            if not data.strip():
                raise DataError(f"SentEval file {fpath} is empty (task {task}); {_SENTEVAL_FIX}.")
            rows = _count_rows(fpath, kind, data)
            line_counts[relpath] = len(data.splitlines())
            expected = EXPECTED_COUNTS[task].get(relpath)
            if strict_counts and expected is not None and rows != expected:
                raise DataError(
                    f"SentEval file {fpath} (task {task}) has {rows} rows, expected {expected}; "
                    f"{_STRICT_FIX}."
                )
            files[relpath] = {"sha256": hashlib.sha256(data).hexdigest(), "rows": rows}
        for relpath, kind in _task_files(task):
            if kind != "sts_input":
                continue
            gold = relpath.replace("/STS.input.", "/STS.gs.")
            if line_counts[relpath] != line_counts[gold]:
                raise DataError(
                    f"SentEval files {root / relpath} ({line_counts[relpath]} lines) and "
                    f"{root / gold} ({line_counts[gold]} lines) are not row-aligned (task {task}); "
                    f"{_SENTEVAL_FIX}."
                )
        out["tasks"][task] = {"files": files}
    return out


def read_sentences(path: Path) -> list[str]:
    """A corpus's sentences, one per line (newline stripped, blank lines skipped). Shared by the
    training loop and the segmenter; imports no torch (the spans environment has none)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"training corpus {path} does not exist; run the prepare_corpus step first")
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise DataError(f"training corpus {path} has no non-empty line (check data.corpus.path / max_lines)")
    return lines
