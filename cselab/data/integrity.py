"""Prepared data checked where it is used: every job that reads a prepared file checks it
against the sha256 its preparation recorded, so a file truncated, edited or replaced after
preparation is caught before it is read, with one message naming the file, what was expected,
what was found and the rule that rebuilds it.

A check hashes a file only when its size or modification time differs from the last time it
was verified (a small JSON cache beside the manifests, keyed by path), so a job's checks cost
milliseconds; a file whose size changed fails at once, without hashing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from cselab.errors import DataError
from cselab.io import sha256_file

#: path -> [size, mtime_ns, sha256] of files verified before (written atomically; a lost update
#: only means one more hash)
CACHE_NAME = ".verified.json"


class Verifier:
    """Checks files against recorded sha256s, remembering what it verified in ``cache``."""

    def __init__(self, cache: Path):
        self.cache_path = Path(cache)
        try:
            self.cache = json.loads(self.cache_path.read_text())
        except (OSError, ValueError):
            self.cache = {}
        self.dirty = False

    def check(self, path: Path, sha256: str, rule: str, size: int | None = None, force: str | None = None) -> None:
        """Raise :class:`DataError` unless ``path`` holds the bytes recorded (``sha256``, and
        ``size`` when known) when rule ``rule`` prepared it (``force``: what to force to accept a
        new one, the rule by default)."""
        path = Path(path)
        force = force or rule
        try:
            st = path.stat()
        except OSError:
            raise DataError(f"{path} is missing (rule {rule} prepared it); rebuild it with "
                            f"snakemake --forcerun {force} <your target>") from None
        key = str(path.resolve())
        if self.cache.get(key) == [st.st_size, st.st_mtime_ns, sha256]:
            return
        if size is not None and st.st_size != size:
            raise self.changed(path, rule, f"{size} bytes", f"{st.st_size} bytes", force)
        found = sha256_file(path)
        if found != sha256:
            raise self.changed(path, rule, f"sha256 {sha256[:16]}...", f"sha256 {found[:16]}...", force)
        self.cache[key] = [st.st_size, st.st_mtime_ns, sha256]
        self.dirty = True

    @staticmethod
    def changed(path: Path, rule: str, expected: str, found: str, force: str | None = None) -> DataError:
        return DataError(f"{path} changed after rule {rule} prepared it: expected {expected}, found {found}. "
                         f"Restore the file, or accept the new one with snakemake --forcerun {force or rule} "
                         "<your target> (what read the old one is then rebuilt)")

    def save(self) -> None:
        if not self.dirty:
            return
        tmp = self.cache_path.with_name(f".{self.cache_path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(self.cache))
            os.replace(tmp, self.cache_path)
        except OSError:  # a read-only folder: the next check hashes again
            tmp.unlink(missing_ok=True)
        self.dirty = False


def verify_senteval(manifest: str | Path, tasks: list[str] | None = None) -> Path:
    """The SentEval root of a ``prepare_senteval`` manifest, or of a ``senteval_reads`` record
    (the files one name of :data:`cselab.data.senteval.READS` covers), every file of ``tasks``
    (default: all it lists) checked against the sha256 recorded at preparation."""
    manifest = Path(manifest)
    info = json.loads(manifest.read_text())
    root = Path(info["root"])
    rule, force = ("prepare_senteval", None) if "tasks" in info else ("senteval_reads", str(manifest))
    records = info["files"] if "files" in info else {
        rel: record for task, entry in info["tasks"].items() if tasks is None or task in tasks
        for rel, record in entry["files"].items()}
    verifier = Verifier(manifest.parent / CACHE_NAME)
    for rel, record in records.items():
        verifier.check(root / rel, record["sha256"], rule, force=force)
    verifier.save()
    return root


def verify_retrieval_dataset(manifest: str | Path) -> dict:
    """A prepared retrieval dataset's manifest (rule ``prepare_beir``'s, or
    ``prepare_stsb_retrieval``'s), every file it lists checked against the size and sha256
    recorded at preparation: a corpus cut at a line boundary still parses, and its evaluation
    would score fewer documents."""
    manifest = Path(manifest)
    info = json.loads(manifest.read_text())
    rule = "prepare_stsb_retrieval" if info.get("name") == "stsb_retrieval" else "prepare_beir"
    verifier = Verifier(manifest.parent / CACHE_NAME)
    for rel, record in info["files"].items():
        verifier.check(Path(info["root"]) / rel, record["sha256"], rule, size=record.get("bytes"), force=str(manifest))
    verifier.save()
    return info


def verify_senteval_inputs(inputs) -> Path:
    """The SentEval root of a job's ``senteval`` input (the whole tree's manifest, or the records
    of what it reads: rule senteval_reads), every file they list checked (:func:`verify_senteval`)."""
    records = [inputs.senteval] if isinstance(inputs.senteval, (str, Path)) else list(inputs.senteval)
    roots = {verify_senteval(record) for record in records}
    if len(roots) != 1:
        raise DataError(f"the SentEval records {', '.join(map(str, records))} name {len(roots)} trees; prepare "
                        "them again from one with snakemake --forcerun senteval_reads <your target>")
    return roots.pop()


def verify_corpus(manifest: str | Path, corpus: str | Path | None = None) -> Path:
    """The prepared corpus of a ``prepare_corpus`` manifest, checked against its recorded sha256."""
    manifest = Path(manifest)
    info = json.loads(manifest.read_text())
    corpus = Path(corpus or info["out"])
    verifier = Verifier(manifest.parent / CACHE_NAME)
    verifier.check(corpus, info["out_sha256"], "prepare_corpus", size=info.get("out_bytes"))
    verifier.save()
    return corpus


def corpus_source_changed(manifest: str | Path, source: str | Path | None) -> str | None:
    """Why the local corpus ``source`` differs from the one ``manifest`` was prepared from (its
    size, or its bytes when its modification time moved), or None when it is the same, is not a
    local file, or was never prepared. Planning asks this, so a corpus replaced in place
    re-prepares and retrains exactly what read it."""
    manifest = Path(manifest)
    if not source or not manifest.is_file() or not Path(source).is_file():
        return None
    try:
        info = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return None
    if Path(info.get("source_path") or info.get("source", "")).resolve() != Path(source).resolve():
        return None  # another file: the rule's params changed, Snakemake replans it already
    st = Path(source).stat()
    if info.get("source_bytes") is not None and st.st_size != info["source_bytes"]:
        return f"{info['source_bytes']} bytes when prepared, {st.st_size} now"
    if info.get("source_mtime_ns") == st.st_mtime_ns:
        return None
    verifier = Verifier(manifest.parent / CACHE_NAME)
    key = str(Path(source).resolve())
    if verifier.cache.get(key) == [st.st_size, st.st_mtime_ns, info["source_sha256"]]:
        return None
    found = sha256_file(source)
    if found != info["source_sha256"]:
        return f"sha256 {info['source_sha256'][:16]}... when prepared, {found[:16]}... now"
    verifier.cache[key] = [st.st_size, st.st_mtime_ns, found]
    verifier.dirty = True
    verifier.save()
    return None
