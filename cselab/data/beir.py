"""BEIR datasets (Thakur et al., 2021) and the STS-B in-domain retrieval task in BEIR's layout.

:func:`prepare_beir` locates (a local directory, used in place) or downloads and safely
extracts (the BEIR zip) one dataset, verifies it and writes a manifest; :func:`load_beir` reads
``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv`` as BEIR's ``GenericDataLoader``
does (only queries that have qrels are kept); :func:`stsb_retrieval_dataset` writes the STS-B
test retrieval task of DiffCSE and InfoCSE (section 6.2 of each) in the same layout.
"""

from __future__ import annotations

import hashlib
import json
import math
import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from cselab.data.download import extract_once, local_or_download, safe_extract
from cselab.errors import DataError
from cselab.io import as_recorded, write_json, write_text
from cselab.settings import from_dict
from cselab.settings.evaluation import Beir

QRELS_HEADER = ["query-id", "corpus-id", "score"]

#: Qrels that point at a document or query absent from the dataset, in the official zips
#: (upstream defects, not download errors). ArguAna's test qrels name one argument that is not
#: in its corpus (beir-cellar/beir issues #101, #172); pytrec_eval still counts it as relevant,
#: exactly as in BEIR. Other datasets must be consistent unless ``max_dangling_qrels`` says so.
KNOWN_DANGLING_QRELS = {"arguana": 1}

#: Published sizes of the BEIR datasets (Thakur et al., 2021, Table 1: the evaluated split's
#: queries, the corpus documents and their mean length in words), used to size jobs
#: (``disk_mb`` / ``mem_mb``) and to price targets before anything is downloaded. MS MARCO is
#: evaluated on its dev split. ``corpus_mb`` is an estimate (documents x (6 bytes a word + 60
#: bytes of JSON and ids)); the prepared manifest's ``counts`` are the measured values.
BEIR_SIZES = {
    name: {"queries": q, "docs": d, "words_per_doc": w, "corpus_mb": round(d * (6 * w + 60) / 1e6, 1)}
    for name, q, d, w in (
        ("msmarco", 6980, 8_841_823, 55.98), ("trec-covid", 50, 171_332, 160.77),
        ("nfcorpus", 323, 3_633, 232.26), ("nq", 3452, 2_681_468, 78.88),
        ("hotpotqa", 7405, 5_233_329, 46.30), ("fiqa", 648, 57_638, 132.32),
        ("arguana", 1406, 8_674, 166.80), ("webis-touche2020", 49, 382_545, 292.37),
        ("cqadupstack", 13_145, 457_199, 129.09), ("quora", 10_000, 522_931, 11.44),
        ("dbpedia-entity", 400, 4_635_922, 49.68), ("scidocs", 1000, 25_657, 176.19),
        ("fever", 6666, 5_416_568, 84.76), ("climate-fever", 1535, 5_416_593, 84.76),
        ("scifact", 300, 5_183, 213.63),
    )
}



#: The ``evaluation.beir`` settings that can change a result (a BEIR job's params; the fp16 corpus
#: cache rounds the embeddings it keeps); the others (precision, query_block, shared_corpora,
#: resources) change how it runs.
RETRIEVAL_SCORED = ("k", "chunk_size", "score", "max_len", "corpus_cache")

def retrieval_params(beir: dict) -> dict:
    """The settings a retrieval job's result depends on (its params): :data:`RETRIEVAL_SCORED`,
    with ``corpus_cache`` only when on; the job's own datasets are its spec's, never the list."""
    return {k: v for k, v in beir.items() if k in RETRIEVAL_SCORED and (k != "corpus_cache" or v)}


def beir_settings(beir: dict | Beir) -> Beir:
    """The ``evaluation.beir`` settings, typed (a plain dict from the config converted; missing
    keys: their defaults)."""
    if isinstance(beir, Beir):
        return beir
    try:
        plain = json.dumps(beir, sort_keys=True)
    except (TypeError, ValueError):  # no JSON (no valid config either): typed as it is, for from_dict's message
        return from_dict(Beir, beir, where="evaluation.beir")
    return _beir_settings(plain)


@functools.lru_cache(maxsize=64)
def _beir_settings(plain: str) -> Beir:
    """Typed settings, cached by value (frozen, so shared: planning sizes every BEIR job from them)."""
    return from_dict(Beir, json.loads(plain), where="evaluation.beir")


#: A dataset not in :data:`BEIR_SIZES` (a local one) is sized as this many documents and queries.
UNKNOWN_SIZE = {"queries": 10_000, "docs": 1_000_000, "words_per_doc": 100.0, "corpus_mb": 660.0}


def shared_corpus_groups(beir: dict | Beir) -> dict[str, list[str]]:
    """The evaluation jobs of the configured BEIR datasets (``evaluation.beir``): a name ->
    the datasets one job evaluates. Datasets in ``shared_corpora`` (FEVER and Climate-FEVER)
    share a job that encodes their corpus once; every other dataset is its own group. Raises
    ValueError naming the key when a group lists an unconfigured or already grouped dataset."""
    settings = beir_settings(beir)
    datasets = list(settings.datasets)
    groups: dict[str, list[str]] = {}
    seen: dict[str, str] = {}
    for name, members in (settings.shared_corpora or {}).items():
        if name in datasets and name not in members:
            raise ValueError(f"config key 'evaluation.beir.shared_corpora.{name}': the group's name is the dataset "
                             f"{name!r}, which is not in the group; name the group after one of its datasets")
        members = [m for m in members if m in datasets]
        for m in members:
            if m in seen:
                raise ValueError(f"config key 'evaluation.beir.shared_corpora.{name}': dataset {m!r} is already "
                                 f"in group {seen[m]!r}; a dataset shares one corpus")
            seen[m] = name
        if len(members) > 1:
            groups[name] = members
    for d in datasets:
        if not any(d in g for g in groups.values()):
            groups[d] = [d]
    return groups


def retrieval_resources(members: list[str], beir: dict | Beir, dim: int = 1024) -> dict[str, int]:
    """``mem_mb`` and ``disk_mb`` of the job evaluating ``members`` (one corpus) on a model of
    embedding size ``dim`` (1024 covers BERT-large), from the published sizes
    (:data:`BEIR_SIZES`) unless ``evaluation.beir.resources.<dataset>`` overrides them.

    Memory: the model and runtime (6 GB), one chunk of corpus texts (1.2 KB each) and
    embeddings (fp32, twice), the queries with their running top-k, and per document its id
    (about 24 bytes) plus, for a shared corpus, two 8-byte digests. Disk: the query embeddings
    plus, with ``corpus_cache``, each document's fp16 embedding."""
    settings = beir_settings(beir)
    sizes = [BEIR_SIZES.get(m, UNKNOWN_SIZE) for m in members]
    docs = max(s["docs"] for s in sizes) * (1 + 0.01 * (len(members) - 1))
    queries = sum(s["queries"] for s in sizes)
    chunk = min(settings.chunk_size, docs)
    per_doc = 24 + (16 * len(members) if len(members) > 1 else 0)
    mem = 6000 + (chunk * (1200 + 8 * dim) + queries * (4 * dim + 12 * settings.k) + docs * per_doc) / 1e6
    disk = 100 + (queries * 4 * dim + (docs * 2 * dim if settings.corpus_cache else 0)) / 1e6
    got = {"mem_mb": int(math.ceil(mem / 1000) * 1000), "disk_mb": int(math.ceil(disk / 100) * 100)}
    for m in members:
        got.update(_resource_overrides(settings, m))
    return got


def _resource_overrides(settings: Beir, name: str) -> dict[str, int]:
    """``evaluation.beir.resources.<name>``: the keys it sets."""
    given = (settings.resources or {}).get(name)
    if given is None:
        return {}
    return {k: v for k, v in dataclasses.asdict(given).items() if v is not None}


def prepare_disk_mb(name: str, beir: dict | Beir) -> int:
    """``disk_mb`` of preparing one dataset: its zip (about 40% of the corpus) and the unpacked
    files (1.1x the corpus, queries and qrels included), unless overridden in
    ``evaluation.beir.resources.<dataset>.disk_mb``."""
    override = _resource_overrides(beir_settings(beir), name).get("prepare_disk_mb")
    return int(override) if override else int(math.ceil(BEIR_SIZES.get(name, UNKNOWN_SIZE)["corpus_mb"] * 1.5 + 100))


def _is_dataset_dir(d: Path) -> bool:
    return (d / "corpus.jsonl").is_file() or (d / "queries.jsonl").is_file()


#: what to do about a prepared BEIR file that is missing or damaged
PREPARE_FIX = ("prepare the dataset again: snakemake --forcerun prepare_beir <target> (rule prepare_beir), "
               "or fix the local copy under data.beir.path")
#: the same for the STS-B retrieval dataset, prepared in BEIR's layout by its own rule
RETRIEVAL_FIX = ("prepare it again: snakemake --forcerun prepare_stsb_retrieval <target> "
                 "(rule prepare_stsb_retrieval)")


def prepare_fix(path: str | Path) -> str:
    """What to do about a missing or damaged file of the dataset folder ``path``: force the rule
    that prepared it (prepare_stsb_retrieval for STS-B's retrieval set, else prepare_beir)."""
    return RETRIEVAL_FIX if "stsb_retrieval" in Path(path).parts else PREPARE_FIX


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
        ids[kind] = set()
        for rec in _iter_jsonl(paths[rel], kind, fix, h):
            if rec["_id"] in ids[kind]:
                raise DataError(f"BEIR {kind} file {paths[rel]}: id {rec['_id']!r} occurs twice; an id must "
                                f"name one record: {fix}.")
            ids[kind].add(rec["_id"])
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
    disk_mb: int | None = None,
) -> dict:
    """Locate or download one BEIR dataset, verify it, and write a JSON ``manifest``.

    ``path`` (a local directory holding ``corpus.jsonl``, ``queries.jsonl`` and
    ``qrels/<split>.tsv``, or their parent folder ``<name>/``) wins and is used in place, never
    copied. Otherwise the zip (``url``, the config's ``data.beir.url`` for ``name``) is fetched into
    ``download_dir`` (optionally pinned by ``sha256``) and safely extracted into ``out_dir``
    (re-extracted only when the archive changes). cqadupstack's zip holds one BEIR dataset per
    forum: each is verified and listed under ``subsets``.

    Checks: the three files exist and are non-empty; every corpus/query line is JSON with
    ``_id`` and a string ``text`` (``title`` optional); the qrels start with the header
    ``query-id corpus-id score`` and have integer scores; every qrel's query and document exist.
    At most ``max_dangling_qrels`` qrels may point at a missing id (default: 0, or the known
    upstream count in :data:`KNOWN_DANGLING_QRELS`); they are listed in the manifest. A zip
    that unpacks to more than ``disk_mb`` (the job's declared disk) is refused before unpacking.

    Returns (and writes atomically) the manifest::

        {"name", "source", "archive": {"path", "bytes", "sha256"} | None, "root", "split",
         "files": {relpath: {"sha256", "bytes"}},
         "counts": {"docs", "queries", "qrels", "queries_with_qrels"},   # summed over subsets
         "subsets": {forum: counts} (cqadupstack only, else {}),
         "dangling_qrels": [..]}
    """
    root, source, archive, fix = _locate_beir(name, url, path, Path(out_dir), Path(download_dir), split, sha256,
                                              disk_mb)
    verified = _verify_subsets(name, root, split, fix, max_dangling_qrels)
    result = {"name": name, "source": source, "archive": archive, "root": as_recorded(root), "split": split,
              **verified}
    write_json(Path(manifest), result)
    return result


def _locate_beir(name: str, url: str | None, path, out_dir: Path, download_dir: Path, split: str,
                 sha256: str | None, disk_mb: int | None = None) -> tuple[Path, str, dict | None, str]:
    """(dataset root, source, archive, the fix a verification error suggests): the local folder
    in place, or the zip downloaded and safely extracted (once per archive)."""
    manual = (f"or download {url} manually, unzip it and set the local path to the folder holding "
              "corpus.jsonl")
    got = local_or_download(f"BEIR directory for {name!r}", "data.beir", path=path, url=url,
                            download_dir=download_dir, dest_name=f"{name}.zip", sha256=sha256, local_kind="dir",
                            local_fix=f"set the local path (data.beir.path) to the folder holding {name}/")
    if got.archive is None:
        fix = (f"fix the local copy at {got.path} (a complete unpacked BEIR {name!r} dataset) or unset "
               "the local path to download it")
        root = _find_root(got.path, name)
        if root is None:
            raise DataError(f"BEIR file {got.path / 'corpus.jsonl'} is missing (local path for {name!r}); {fix}.")
        return root.resolve(), got.source, None, fix
    zip_path = got.path
    if out_dir.resolve() in zip_path.resolve().parents:
        raise DataError(f"download_dir {download_dir} is inside out_dir {out_dir}, whose content is "
                        "replaced on re-extraction; choose separate directories.")
    _check_unpacked_size(name, zip_path, disk_mb)
    extract_once(zip_path, got.archive["sha256"], out_dir, safe_extract)
    fix = f"delete {zip_path} and {out_dir} and re-run, {manual}"
    root = _find_root(out_dir, name)
    if root is None:
        raise DataError(f"{zip_path} holds no BEIR dataset (expected {name}/corpus.jsonl, queries.jsonl, "
                        f"qrels/{split}.tsv); {fix}.")
    return root.resolve(), got.source, got.archive, fix


def _check_unpacked_size(name: str, zip_path: Path, disk_mb: int | None) -> None:
    """Refuse a zip that unpacks to more than the job's declared ``disk_mb``, before unpacking."""
    import zipfile

    if not disk_mb:
        return
    try:
        with zipfile.ZipFile(zip_path) as zf:
            unpacked = sum(i.file_size for i in zf.infolist()) / 1e6
    except zipfile.BadZipFile:
        return  # extract_once names the corrupt archive
    if unpacked > disk_mb:
        raise DataError(f"BEIR dataset {name!r}: {zip_path} unpacks to {unpacked:,.0f} MB, more than the "
                        f"{disk_mb:,} MB of disk its prepare job declares; set "
                        f"evaluation.beir.resources.{name}.prepare_disk_mb to at least {unpacked * 1.1:,.0f} "
                        "(and free that much space), or point data.beir.path at an unpacked copy.")


def _verify_subsets(name: str, root: Path, split: str, fix: str, max_dangling_qrels: int | None) -> dict:
    """Verify every (sub-)dataset under ``root``: the manifest's files, counts, subsets and the
    dangling qrels (at most ``max_dangling_qrels``, default the known upstream count)."""
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
    return {"files": files, "counts": counts, "subsets": per_subset, "dangling_qrels": dangling}


@dataclass
class BeirData:
    """One BEIR dataset (BEIR's ``GenericDataLoader`` layout) with its corpus left on disk.

    ``queries`` and ``qrels`` are in memory (small); the corpus is streamed from ``root /
    "corpus.jsonl"`` by :meth:`corpus_chunks`, never held whole (FEVER's 5.4M documents would
    take about 6.5 GB as a dict). ``exclude`` maps a query id to document ids that must never be
    returned for it, beyond the identical-id rule (read from ``queries.jsonl``
    ``metadata.exclude_ids``; used by the STS-B in-domain task, whose queries are corpus sentences
    too). Empty for the official datasets.
    """

    root: Path
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    exclude: dict[str, list[str]] = field(default_factory=dict)

    def corpus_chunks(self, chunk_size: int) -> Iterator[tuple[list[str], list[str]]]:
        """``(ids, texts)`` of consecutive slices of at most ``chunk_size`` documents, in file
        order; the text is BEIR's ``(title + " " + text).strip()``."""
        yield from corpus_chunks(self.root, chunk_size)


def doc_text(doc: dict) -> str:
    """The text BEIR's sentence-transformers models encode for a document:
    ``(title + " " + text).strip()``."""
    return ((doc.get("title") or "") + " " + (doc.get("text") or "")).strip()


def corpus_chunks(root: str | Path, chunk_size: int) -> Iterator[tuple[list[str], list[str]]]:
    """Stream ``root/corpus.jsonl`` as ``(ids, texts)`` slices of at most ``chunk_size``
    documents, texts as BEIR encodes them: ``(title + " " + text).strip()``."""
    path = Path(root) / "corpus.jsonl"
    if not path.is_file():
        raise DataError(f"BEIR file {path} is missing; {prepare_fix(path)}.")
    ids: list[str] = []
    texts: list[str] = []
    for r in _iter_jsonl(path, "corpus", prepare_fix(path)):
        ids.append(r["_id"])
        texts.append(doc_text(r))
        if len(ids) == chunk_size:
            yield ids, texts
            ids, texts = [], []
    if ids:
        yield ids, texts


def load_beir(root: str | Path, split: str = "test") -> BeirData:
    """Read a BEIR dataset folder as BEIR's ``GenericDataLoader.load(split)`` does, except that
    the corpus stays on disk (:meth:`BeirData.corpus_chunks` streams it).

    ``queries``: id -> text, only queries that have qrels in ``split``; ``qrels``: query id ->
    {doc id: int score}, all rows (score-0 rows included, as in BEIR; pytrec_eval treats them as
    non-relevant). Qrels of a query absent from queries.jsonl are dropped (BEIR would fail on
    them). A doc id absent from the corpus is kept in the qrels, so it still counts as a
    relevant document (as in BEIR). For cqadupstack call this on each folder of
    :func:`beir_subsets`.
    """
    root = Path(root)
    subsets = beir_subsets(root)
    if subsets and subsets != [root]:
        raise DataError(f"{root} holds several BEIR sub-datasets ({[p.name for p in subsets]}); "
                        "load each one (cselab.data.beir.beir_subsets) and average their scores.")
    for rel in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"):
        if not (root / rel).is_file():
            raise DataError(f"BEIR file {root / rel} is missing; {prepare_fix(root)}.")
    all_queries: dict[str, str] = {}
    exclude: dict[str, list[str]] = {}
    for r in _iter_jsonl(root / "queries.jsonl", "queries", prepare_fix(root)):
        all_queries[r["_id"]] = r["text"]
        ex = r["metadata"].get("exclude_ids")
        if ex:
            exclude[r["_id"]] = [str(x) for x in ex]
    qrels: dict[str, dict[str, int]] = {}
    for _, qid, did, score in _iter_qrels(root / "qrels" / f"{split}.tsv", prepare_fix(root)):
        if qid in all_queries:
            qrels.setdefault(qid, {})[did] = score
    queries = {qid: all_queries[qid] for qid in qrels}
    exclude = {qid: ex for qid, ex in exclude.items() if qid in queries}
    return BeirData(root, queries, qrels, exclude)



def stsb_retrieval_dataset(senteval_root: str | Path, out_dir: str | Path) -> Path:
    """Write the STS-B test in-domain retrieval task (DiffCSE Sec. 6.2 / InfoCSE Sec. 6.2) as a
    BEIR-format dataset under ``out_dir`` and return ``out_dir``.

    * corpus: the unique sentences of ``sts-test.csv`` (both columns, first-seen order, text as
      :func:`cselab.data.tasks.load_stsb` normalises it), ids ``s00000``..., empty titles. The real file
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
    from cselab.data.tasks import load_stsb

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
    write_text(out / "corpus.jsonl", corpus)
    write_text(out / "queries.jsonl", "\n".join(queries) + "\n")
    write_text(out / "qrels" / "test.tsv", "\t".join(QRELS_HEADER) + "\n" + "\n".join(qrels) + "\n")
    return out


