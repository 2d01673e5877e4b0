"""Zero-shot dense retrieval: BEIR (InfoCSE Table 3) and STS-B in-domain retrieval (DiffCSE
Table 10, InfoCSE Table 11), with one retrieval and one evaluation code path for both.

* :func:`prepare_beir` locates (a local directory, used in place) or downloads and safely
  extracts (the BEIR zip) one BEIR dataset, verifies it and writes a JSON manifest.
* :func:`load_beir` reads ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv`` as BEIR's
  ``GenericDataLoader`` does (only queries that have qrels are kept).
* :func:`search` is exact dense retrieval with bounded memory: the corpus is encoded chunk by
  chunk and only a running top-k per query is kept; :func:`retrieve` wraps it for a plain
  ``encode(list[str]) -> np.ndarray``.
* :func:`evaluate_run` computes nDCG@k / recall@k / MAP@k / P@k with ``pytrec_eval`` (the
  library BEIR itself uses), as fractions in [0, 1], averaged over the queries of the qrels.
* :func:`stsb_retrieval_dataset` writes the STS-B test in-domain retrieval task as a BEIR-format
  dataset, so the same :func:`retrieve` + :func:`evaluate_run` give recall@1/5/10.

Conventions taken from BEIR (``beir.retrieval``), so numbers are comparable with papers that
used it:

* Document text is ``(title + " " + text).strip()`` (``models.SentenceBERT.encode_corpus`` with
  its default ``sep=" "``; a missing title is ""); query text is used as is.
* Identical query and document ids are never counted: BEIR's dense exact search drops
  ``corpus_id == query_id`` from its results and ``EvaluateRetrieval.evaluate`` pops them again
  (``ignore_identical_ids=True``, which matters for ArguAna and Quora, whose queries are also
  corpus documents). :func:`search` masks them before the top-k (so each query still gets k
  real results) and :func:`evaluate_run` removes any that remain.
* Graded relevance is used as is: pytrec_eval's nDCG uses the qrel value as the gain
  (linear, not ``2^rel - 1``) and a discount of ``log2(rank + 1)``; recall counts qrels with
  score > 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch

from cselab.data import extract_once, fetch, write_json_atomic
from cselab.errors import DataError

BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"
QRELS_HEADER = ["query-id", "corpus-id", "score"]
SCORES = ("cos", "dot")

#: Qrels that point at a document or query absent from the dataset, in the official zips
#: (upstream defects, not download errors). ArguAna's test qrels name one argument that is not
#: in its corpus (beir-cellar/beir issues #101, #172); pytrec_eval still counts it as relevant,
#: exactly as in BEIR. Other datasets must be consistent unless ``max_dangling_qrels`` says so.
KNOWN_DANGLING_QRELS = {"arguana": 1}

_CHUNK = 1 << 20
_DRIVE = re.compile(r"^[A-Za-z]:")

EncodeIds = Callable[[list[str]], Any]


# --------------------------------------------------------------------------- small helpers


def _write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def doc_text(doc: Mapping[str, Any]) -> str:
    """The text BEIR's sentence-transformers models encode for a document:
    ``(title + " " + text).strip()``."""
    return ((doc.get("title") or "") + " " + (doc.get("text") or "")).strip()


# --------------------------------------------------------------------------- safe zip extraction


def _safe_extract_zip(zip_path: Path, dest: Path) -> None:
    """Extract ``zip_path`` into ``dest``; reject absolute, ``..``, drive-letter and symlink
    members, and turn a corrupt or truncated archive (bad header, bad CRC) into DataError."""
    fix = "delete it and re-run to download it again, or set the local path to an unpacked copy"
    dest = Path(dest)
    root = dest.resolve()
    try:
        with zipfile.ZipFile(zip_path) as zf:
            infos = zf.infolist()
            for info in infos:
                name = info.filename
                parts = [p for p in re.split(r"[\\/]", name) if p]
                if (name.startswith(("/", "\\")) or _DRIVE.match(name) or ".." in parts
                        or not parts):
                    raise DataError(
                        f"{zip_path} contains an unsafe member {name!r} (absolute path or '..'); "
                        f"refusing to extract it. Delete {zip_path} and re-download it from a "
                        "trusted source."
                    )
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    raise DataError(
                        f"{zip_path} contains a symbolic link {name!r}; refusing to extract it. "
                        f"Delete {zip_path} and re-download it from a trusted source."
                    )
            for info in infos:
                target = dest.joinpath(*[p for p in re.split(r"[\\/]", info.filename) if p])
                if root not in target.resolve().parents and target.resolve() != root:
                    raise DataError(f"{zip_path} member {info.filename!r} escapes {dest}; {fix}.")
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out, _CHUNK)
    except DataError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as e:
        raise DataError(f"{zip_path} is corrupt or not a zip archive ({e}); {fix}.") from e
    except OSError as e:
        raise DataError(
            f"Cannot extract {zip_path} into {dest}: {e}; free disk space or fix permissions, "
            "then re-run."
        ) from e


# --------------------------------------------------------------------------- BEIR layout


def _is_dataset_dir(d: Path) -> bool:
    return (d / "corpus.jsonl").is_file() or (d / "queries.jsonl").is_file()


def beir_subsets(root: str | Path) -> list[Path]:
    """The BEIR dataset folders under ``root``: ``[root]`` for an ordinary dataset, or the
    sub-datasets of a split one (cqadupstack: one folder per StackExchange forum, each a full
    BEIR dataset whose nDCG@10 is averaged). Empty if ``root`` holds neither."""
    root = Path(root)
    if _is_dataset_dir(root):
        return [root]
    return sorted(d for d in root.iterdir() if d.is_dir() and _is_dataset_dir(d)) if root.is_dir() else []


def _find_root(base: Path, name: str) -> Path | None:
    """The dataset root under an extracted or local tree: ``base``, ``base/<name>`` or the only
    sub-folder, whichever holds corpus.jsonl; failing that, the first of them holding
    sub-datasets (cqadupstack)."""
    candidates = [base, base / name]
    if base.is_dir():
        subdirs = [d for d in base.iterdir() if d.is_dir() and not d.name.startswith(("_", "."))]
        if len(subdirs) == 1:
            candidates.append(subdirs[0])
    for c in candidates:
        if c.is_dir() and _is_dataset_dir(c):
            return c
    for c in candidates[1:] + candidates[:1]:
        if c.is_dir() and beir_subsets(c):
            return c
    return None


def _iter_jsonl(path: Path, kind: str, fix: str, hasher=None) -> Iterator[dict]:
    """Yield validated records ``{"_id", "text", "title"}`` of a corpus or queries file."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if hasher is not None:
                hasher.update(raw)
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise DataError(f"BEIR {kind} file {path}, line {lineno}: not valid JSON ({e}); "
                                f"the file is corrupt or truncated: {fix}.") from None
            if not isinstance(obj, dict) or "_id" not in obj:
                raise DataError(f"BEIR {kind} file {path}, line {lineno}: no \"_id\" field; "
                                f"not a BEIR {kind} file: {fix}.")
            text, title = obj.get("text"), obj.get("title", "")
            if not isinstance(text, str) or not isinstance(title, (str, type(None))):
                raise DataError(f"BEIR {kind} file {path}, line {lineno}: \"text\" (and \"title\") "
                                f"must be strings; not a BEIR {kind} file: {fix}.")
            yield {"_id": str(obj["_id"]), "text": text, "title": title or "",
                   "metadata": obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}}


def _iter_qrels(path: Path, fix: str, hasher=None) -> Iterator[tuple[int, str, str, int]]:
    """Yield ``(lineno, query_id, corpus_id, score)`` of a qrels TSV after checking its header."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if hasher is not None:
                hasher.update(raw)
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise DataError(f"BEIR qrels file {path}, line {lineno}: not UTF-8; {fix}.") from None
            if lineno == 1:
                if line.split("\t") != QRELS_HEADER:
                    raise DataError(f"BEIR qrels file {path}: line 1 must be the header "
                                    f"{chr(9).join(QRELS_HEADER)!r}, got {line[:80]!r}; {fix}.")
                continue
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 3:
                raise DataError(f"BEIR qrels file {path}, line {lineno}: expected 3 tab-separated "
                                f"fields (query-id, corpus-id, score), found {len(fields)}; {fix}.")
            try:
                score = int(fields[2])
            except ValueError:
                raise DataError(f"BEIR qrels file {path}, line {lineno}: score {fields[2]!r} is not "
                                f"an integer; {fix}.") from None
            yield lineno, fields[0], fields[1], score


def _verify_dataset(root: Path, split: str, fix: str, rel_prefix: str) -> dict:
    """Check one BEIR dataset folder; return its files' digests, counts and dangling qrels."""
    paths = {"corpus.jsonl": root / "corpus.jsonl", "queries.jsonl": root / "queries.jsonl",
             f"qrels/{split}.tsv": root / "qrels" / f"{split}.tsv"}
    for rel, p in paths.items():
        if not p.is_file():
            raise DataError(f"BEIR file {p} is missing; {fix}.")
        if p.stat().st_size == 0:
            raise DataError(f"BEIR file {p} is empty; {fix}.")
    files: dict[str, dict] = {}
    ids: dict[str, set[str]] = {}
    for rel, kind in (("corpus.jsonl", "corpus"), ("queries.jsonl", "queries")):
        h = hashlib.sha256()
        ids[kind] = {rec["_id"] for rec in _iter_jsonl(paths[rel], kind, fix, h)}
        if not ids[kind]:
            raise DataError(f"BEIR {kind} file {paths[rel]} has no records; {fix}.")
        files[rel_prefix + rel] = {"sha256": h.hexdigest(), "bytes": paths[rel].stat().st_size}
    qrels_path = paths[f"qrels/{split}.tsv"]
    h = hashlib.sha256()
    n_qrels, qrel_queries, dangling = 0, set(), []
    for lineno, qid, did, _ in _iter_qrels(qrels_path, fix, h):
        n_qrels += 1
        if qid not in ids["queries"]:
            dangling.append(f"{qrels_path.name}:{lineno}: query {qid!r} not in {paths['queries.jsonl']}")
        elif did not in ids["corpus"]:
            dangling.append(f"{qrels_path.name}:{lineno}: document {did!r} not in {paths['corpus.jsonl']}")
        if qid in ids["queries"]:
            qrel_queries.add(qid)
    if n_qrels == 0:
        raise DataError(f"BEIR qrels file {qrels_path} has a header but no judgements; {fix}.")
    files[rel_prefix + f"qrels/{split}.tsv"] = {"sha256": h.hexdigest(), "bytes": qrels_path.stat().st_size}
    counts = {"docs": len(ids["corpus"]), "queries": len(ids["queries"]), "qrels": n_qrels,
              "queries_with_qrels": len(qrel_queries)}
    return {"files": files, "counts": counts, "dangling": dangling, "qrels_path": qrels_path}


def prepare_beir(
    name: str,
    *,
    url: str | None = None,
    path: str | Path | None = None,
    out_dir: Path,
    manifest: Path,
    download_dir: Path,
    split: str = "test",
    sha256: str | None = None,
    max_dangling_qrels: int | None = None,
) -> dict:
    """Locate or download one BEIR dataset, verify it, and write a JSON ``manifest``.

    ``path`` (a local directory holding ``corpus.jsonl``, ``queries.jsonl`` and
    ``qrels/<split>.tsv``, or their parent folder ``<name>/``) wins and is used in place, never
    copied. Otherwise the zip (``url``, default :data:`BEIR_URL` for ``name``) is fetched into
    ``download_dir`` (optionally pinned by ``sha256``) and safely extracted into ``out_dir``
    (re-extracted only when the archive changes). cqadupstack's zip holds one BEIR dataset per
    forum: each is verified and listed under ``subsets``.

    Checks: the three files exist and are non-empty; every corpus/query line is JSON with
    ``_id`` and a string ``text`` (``title`` optional); the qrels start with the header
    ``query-id corpus-id score`` and have integer scores; every qrel's query and document exist.
    At most ``max_dangling_qrels`` qrels may point at a missing id (default: 0, or the known
    upstream count in :data:`KNOWN_DANGLING_QRELS`); they are listed in the manifest.

    Returns (and writes atomically) the manifest::

        {"name", "source", "archive": {"path", "bytes", "sha256"} | None, "root", "split",
         "files": {relpath: {"sha256", "bytes"}},
         "counts": {"docs", "queries", "qrels", "queries_with_qrels"},   # summed over subsets
         "subsets": {forum: counts} (cqadupstack only, else {}),
         "dangling_qrels": [..]}
    """
    archive = None
    if path:
        base = Path(path).expanduser().resolve()
        if not base.is_dir():
            raise DataError(f"BEIR directory {base} (local path for {name!r}) does not exist; fix the "
                            "local path or unset it to download the dataset.")
        root = _find_root(base, name)
        fix = (f"fix the local copy at {base} (a complete unpacked BEIR {name!r} dataset) or unset "
               "the local path to download it")
        if root is None:
            raise DataError(f"BEIR file {base / 'corpus.jsonl'} is missing (local path for {name!r}); "
                            f"{fix}.")
        source = str(base)
    else:
        url = url or BEIR_URL.format(name=name)
        zip_path = Path(download_dir) / f"{name}.zip"
        manual = (f"or download {url} manually, unzip it and set the local path to the folder "
                  "holding corpus.jsonl")
        try:
            got = fetch(url, zip_path, sha256=sha256)
        except DataError as e:
            raise DataError(f"{e} Or: {manual}.") from e
        archive = {"path": got["path"], "bytes": got["bytes"], "sha256": got["sha256"]}
        out_dir = Path(out_dir)
        if out_dir.resolve() in zip_path.resolve().parents:
            raise DataError(f"download_dir {download_dir} is inside out_dir {out_dir}, whose content is "
                            "replaced on re-extraction; choose separate directories.")
        extract_once(zip_path, got["sha256"], out_dir, _safe_extract_zip)
        fix = f"delete {zip_path} and {out_dir} and re-run, {manual}"
        root = _find_root(out_dir, name)
        if root is None:
            raise DataError(f"{zip_path} holds no BEIR dataset (expected {name}/corpus.jsonl, "
                            f"queries.jsonl, qrels/{split}.tsv); {fix}.")
        source = url
    root = root.resolve()

    subsets = beir_subsets(root)
    multi = subsets != [root]
    files: dict[str, dict] = {}
    counts = {"docs": 0, "queries": 0, "qrels": 0, "queries_with_qrels": 0}
    per_subset: dict[str, dict] = {}
    dangling: list[str] = []
    for sub in subsets:
        prefix = f"{sub.name}/" if multi else ""
        got_sub = _verify_dataset(sub, split, fix, prefix)
        files.update(got_sub["files"])
        for key in counts:
            counts[key] += got_sub["counts"][key]
        if multi:
            per_subset[sub.name] = got_sub["counts"]
        dangling.extend(prefix + d for d in got_sub["dangling"])
    allowed = KNOWN_DANGLING_QRELS.get(name, 0) if max_dangling_qrels is None else max_dangling_qrels
    if len(dangling) > allowed:
        shown = "; ".join(dangling[:3]) + ("; ..." if len(dangling) > 3 else "")
        where = f"{root}/*/qrels/{split}.tsv" if multi else str(root / "qrels" / f"{split}.tsv")
        raise DataError(
            f"BEIR qrels file {where} has {len(dangling)} judgement(s) whose query or document "
            f"does not exist ({shown}): the dataset is truncated or inconsistent; {fix}. (If this "
            f"is a known upstream defect of the official release, pass "
            f"max_dangling_qrels={len(dangling)}.)"
        )
    result = {
        "name": name,
        "source": source,
        "archive": archive,
        "root": str(root),
        "split": split,
        "files": files,
        "counts": counts,
        "subsets": per_subset,
        "dangling_qrels": dangling,
    }
    write_json_atomic(Path(manifest), result)
    return result


# --------------------------------------------------------------------------- loading


@dataclass
class BeirData:
    """One BEIR dataset in memory (BEIR's ``GenericDataLoader`` layout).

    ``exclude`` maps a query id to document ids that must never be returned for it, beyond the
    identical-id rule (read from ``queries.jsonl`` ``metadata.exclude_ids``; used by the STS-B
    in-domain task, whose queries are corpus sentences too). Empty for the official datasets.
    """

    corpus: dict[str, dict[str, str]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    exclude: dict[str, list[str]] = field(default_factory=dict)


def load_beir(root: str | Path, split: str = "test") -> BeirData:
    """Read a BEIR dataset folder as BEIR's ``GenericDataLoader.load(split)`` does.

    ``corpus``: id -> ``{"title", "text"}`` (missing title -> ""); ``queries``: id -> text, only
    queries that have qrels in ``split``; ``qrels``: query id -> {doc id: int score}, all rows
    (score-0 rows included, as in BEIR; pytrec_eval treats them as non-relevant). Qrels of a
    query absent from queries.jsonl are dropped (BEIR would fail on them). A doc id absent from
    the corpus is kept in the qrels, so it still counts as a relevant document (as in BEIR).
    For cqadupstack call this on each folder of :func:`beir_subsets`.
    """
    root = Path(root)
    fix = "re-run the BEIR prepare step (delete its output first) or fix the local copy"
    if not (root / "corpus.jsonl").is_file() and beir_subsets(root):
        raise DataError(f"{root} holds several BEIR sub-datasets ({[p.name for p in beir_subsets(root)]}); "
                        "load each one (cselab.retrieval.beir_subsets) and average their scores.")
    for rel in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"):
        if not (root / rel).is_file():
            raise DataError(f"BEIR file {root / rel} is missing; {fix}.")
    corpus = {r["_id"]: {"title": r["title"], "text": r["text"]}
              for r in _iter_jsonl(root / "corpus.jsonl", "corpus", fix)}
    all_queries: dict[str, str] = {}
    exclude: dict[str, list[str]] = {}
    for r in _iter_jsonl(root / "queries.jsonl", "queries", fix):
        all_queries[r["_id"]] = r["text"]
        ex = r["metadata"].get("exclude_ids")
        if ex:
            exclude[r["_id"]] = [str(x) for x in ex]
    qrels: dict[str, dict[str, int]] = {}
    for _, qid, did, score in _iter_qrels(root / "qrels" / f"{split}.tsv", fix):
        if qid in all_queries:
            qrels.setdefault(qid, {})[did] = score
    queries = {qid: all_queries[qid] for qid in qrels}
    exclude = {qid: ex for qid, ex in exclude.items() if qid in queries}
    return BeirData(corpus, queries, qrels, exclude)


# --------------------------------------------------------------------------- retrieval


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
    dim = q.shape[1]

    # Excluded (query row, corpus position) pairs, found in one pass over corpus_ids without
    # building an id -> position map of the whole corpus.
    wanted: dict[str, list[int]] = {}
    row_of = {qid: i for i, qid in enumerate(query_ids)}
    if ignore_identical_ids:
        for qid, i in row_of.items():
            wanted.setdefault(qid, []).append(i)
    for qid, docs in (exclude or {}).items():
        if qid in row_of:
            for d in docs:
                wanted.setdefault(str(d), []).append(row_of[qid])
    ex_rows: list[int] = []
    ex_pos: list[int] = []
    if wanted:
        for pos, cid in enumerate(corpus_ids):
            rows = wanted.get(cid)
            if rows:
                ex_rows.extend(rows)
                ex_pos.extend([pos] * len(rows))
    ex_rows_t = torch.tensor(ex_rows, dtype=torch.long)
    ex_pos_t = torch.tensor(ex_pos, dtype=torch.long)

    top_vals = torch.empty((n_q, 0), dtype=torch.float32, device=dev)
    top_idx = torch.empty((n_q, 0), dtype=torch.long, device=dev)
    neg_inf = float("-inf")
    for start in range(0, n_docs, chunk_size):
        end = min(start + chunk_size, n_docs)
        ids = corpus_ids[start:end]
        c = _as_matrix(encode_corpus_chunk(list(ids)), end - start, "encode_corpus_chunk", dim).to(dev)
        if score == "cos":
            c = torch.nn.functional.normalize(c, dim=1)
        in_chunk = (ex_pos_t >= start) & (ex_pos_t < end)
        c_rows, c_cols = ex_rows_t[in_chunk], ex_pos_t[in_chunk] - start
        new_vals, new_idx = [], []
        for qs in range(0, n_q, query_block):
            qe = min(qs + query_block, n_q)
            s = q[qs:qe] @ c.T  # (block, chunk)
            if c_rows.numel():
                sel = (c_rows >= qs) & (c_rows < qe)
                if bool(sel.any()):
                    s[(c_rows[sel] - qs).to(dev), c_cols[sel].to(dev)] = neg_inf
            kk = min(k, end - start)
            v, i = torch.topk(s, kk, dim=1)
            del s
            v = torch.cat([top_vals[qs:qe], v], dim=1)
            i = torch.cat([top_idx[qs:qe], i + start], dim=1)
            kk = min(k, v.shape[1])
            v, order = torch.topk(v, kk, dim=1)
            new_vals.append(v)
            new_idx.append(torch.gather(i, 1, order))
        top_vals, top_idx = torch.cat(new_vals), torch.cat(new_idx)
        del c

    vals, idxs = top_vals.cpu().numpy(), top_idx.cpu().numpy()
    run: dict[str, dict[str, float]] = {}
    for row, qid in enumerate(query_ids):
        run[qid] = {corpus_ids[j]: float(v) for v, j in zip(vals[row], idxs[row]) if v != neg_inf}
    return run


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


def evaluate_beir(
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


# --------------------------------------------------------------------------- STS-B in-domain retrieval


def stsb_retrieval_dataset(senteval_root: str | Path, out_dir: str | Path) -> Path:
    """Write the STS-B test in-domain retrieval task (DiffCSE Sec. 6.2 / InfoCSE Sec. 6.2) as a
    BEIR-format dataset under ``out_dir`` and return ``out_dir``.

    * corpus: the unique sentences of ``sts-test.csv`` (both columns, first-seen order, text as
      :func:`cselab.sts.load_stsb` normalises it), ids ``s00000``..., empty titles. The real file
      has 2,758 sentence slots but 2,551 distinct sentences; the papers say "2758 sentences",
      i.e. they may have kept duplicates, which we cannot (one id per text).
    * queries: one per pair whose gold score is exactly 5.0 (97 in the real file), id
      ``q<row>`` (0-based row of sts-test.csv), text = the first sentence. Pairs with the same
      first sentence stay separate queries (in the real file 9 first sentences occur in two
      score-5 pairs and 1 in three: 97 queries, 86 distinct texts), as in the papers' 97.
      Such queries share one ranking, so R@1 cannot exceed 86/97 = 88.66%.
    * qrels: each query's own second sentence, relevance 1 (only its own pair; the other pair's
      second sentence is not counted relevant, matching "whether its corresponding s2 is in the
      top-k").
    * the query sentence is itself in the corpus: its corpus id is written to the query's
      ``metadata.exclude_ids``, which :func:`load_beir` reads and :func:`search` masks (score
      -inf before the top-k), so it is never retrieved and never takes a top-k slot. A pair
      whose two sentences are identical (none in the real file) is not excluded.
    """
    from cselab.sts import load_stsb

    stsb = load_stsb(senteval_root, "test")
    doc_id: dict[str, str] = {}
    for a, b in zip(stsb.sent1, stsb.sent2):
        for s in (a, b):
            if s not in doc_id:
                doc_id[s] = f"s{len(doc_id):05d}"
    queries, qrels = [], []
    for row, (a, b, g) in enumerate(zip(stsb.sent1, stsb.sent2, stsb.gold)):
        if float(g) != 5.0:
            continue
        qid = f"q{row:04d}"
        meta = {"exclude_ids": [doc_id[a]] if a != b else [], "pair_row": row}
        queries.append(json.dumps({"_id": qid, "text": a, "metadata": meta}, ensure_ascii=False))
        qrels.append(f"{qid}\t{doc_id[b]}\t1")
    if not queries:
        raise DataError(f"{Path(senteval_root) / 'STS/STSBenchmark/sts-test.csv'} has no pair with "
                        "gold score 5.0; it is not the STS-B test file: re-run the SentEval download.")
    out = Path(out_dir)
    corpus = "".join(json.dumps({"_id": i, "title": "", "text": s}, ensure_ascii=False) + "\n"
                     for s, i in doc_id.items())
    _write_text_atomic(out / "corpus.jsonl", corpus)
    _write_text_atomic(out / "queries.jsonl", "\n".join(queries) + "\n")
    _write_text_atomic(out / "qrels" / "test.tsv", "\t".join(QRELS_HEADER) + "\n" + "\n".join(qrels) + "\n")
    return out


def evaluate_stsb_retrieval(
    encode: Callable[[list[str]], np.ndarray],
    senteval_root: str | Path,
    out_dir: str | Path,
    k_values: Sequence[int] = (1, 5, 10),
) -> dict[str, float]:
    """Recall@k (fractions) of ``encode`` on the STS-B in-domain task (cosine), built by
    :func:`stsb_retrieval_dataset` and scored by :func:`retrieve` + :func:`evaluate_run`."""
    data = load_beir(stsb_retrieval_dataset(senteval_root, out_dir))
    run = retrieve(encode, data, k=max(k_values), score="cos")
    metrics = evaluate_run(data.qrels, run, k_values)
    return {f"recall@{k}": metrics[f"recall@{k}"] for k in k_values}
