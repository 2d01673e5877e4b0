"""SentEval (Conneau & Kiela, 2018) as the papers use it: located or downloaded, extracted once,
and verified file by file (expected files, published row counts, STS input/gold alignment)."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

from cselab.data import tasks as loaders
from cselab.data.download import extract_once, local_or_download, safe_extract
# the task names live with their readers (cselab.data.tasks); here too for the modules that name them
from cselab.data.tasks import STS_SUBSETS, STS_TASKS, TRANSFER_TASKS  # noqa: F401
from cselab.errors import DataError
from cselab.io import as_recorded, write_json

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


#: the SentEval sets a job can read: a task's files (STS12-16, a transfer task), or one split's
#: file of STS-B (``STSBenchmark/dev``) or SICK (``SICKRelatedness/test``); a job's data inputs are
#: the files of the sets it reads (:func:`set_files`), so a change to one reruns only its readers
SPLIT_TASKS = {"STSBenchmark": {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test.csv"},
               "SICKRelatedness": {"train": "SICK_train.txt", "trial": "SICK_trial.txt",
                                   "test": "SICK_test_annotated.txt"}}
#: what the STS evaluation reads: STS12-16 whole, STS-B's and SICK-R's test splits
STS_READS = (*STS_SUBSETS, "STSBenchmark/test", "SICKRelatedness/test")
#: STS-B dev, the checkpoint-selection set every training reads
STSB_DEV = "STSBenchmark/dev"


def set_files(sets) -> list[str]:
    """The files (relative to the SentEval root) of ``sets`` (:data:`STS_READS`, ``STSBenchmark/dev``,
    ``MR``, ...), in order, once each; ``None``: every file of every known task."""
    if sets is None:
        sets = [t for t in KNOWN_TASKS if t not in SPLIT_TASKS] + [f"{t}/{split}" for t in SPLIT_TASKS
                                                                     for split in SPLIT_TASKS[t]]
    out: list[str] = []
    for name in sets:
        task, _, split = name.partition("/")
        if task not in KNOWN_TASKS or (split and split not in SPLIT_TASKS.get(task, {})) or \
                (not split and task in SPLIT_TASKS):
            raise ValueError(f"unknown SentEval set {name!r}: a task of {KNOWN_TASKS}, or "
                             f"{', '.join(f'{t}/<{chr(124).join(s)}>' for t, s in SPLIT_TASKS.items())}")
        files = [rel for rel, _ in _task_files(task)]
        out += [rel for rel in files if not split or rel.endswith("/" + SPLIT_TASKS[task][split])]
    return list(dict.fromkeys(out))


#: the SentEval files jobs read, by name (rule ``senteval_reads`` prepares each, from the files
#: themselves, and its record is what reading jobs take as their data input): STS-B dev (every
#: training's checkpoint selection), STS (STS12-16 with STS-B's and SICK-R's test splits), each
#: STS-B split alone, and ``transfer`` (the configured transfer tasks, :func:`reads_sets`)
READS = {"sts": STS_READS, "stsb-dev": (STSB_DEV,), "stsb-test": ("STSBenchmark/test",),
         "stsb-train": ("STSBenchmark/train",), "transfer": None}


def reads_sets(reads: str, transfer_tasks=None) -> tuple[str, ...]:
    """The SentEval sets of the reads ``reads`` (:data:`READS`; ``transfer``: ``transfer_tasks``)."""
    if reads not in READS:
        raise ValueError(f"unknown SentEval reads {reads!r}: one of {sorted(READS)}")
    return tuple(transfer_tasks if reads == "transfer" else READS[reads])


def planned_files(path: str, sets) -> list[str]:
    """The files of ``sets`` (:func:`set_files`) under the local SentEval tree ``path``
    (``data.senteval.path``, as written: a relative one stays relative to the project folder,
    which may then move), as a job declares them: its data inputs. A file that is missing is one
    :class:`DataError` naming it and the setting."""
    local = Path(path).expanduser()
    root = local / "downstream" if (local / "downstream").is_dir() else local
    files = [root / rel for rel in set_files(sets)]
    missing = next((f for f in files if not f.is_file()), None)
    if missing is not None:
        raise DataError(f"SentEval file {missing} is missing (data.senteval.path: {path}), and a job reads it; "
                        f"{_SENTEVAL_FIX}.")
    return [str(f) for f in files]


def local_root(path: str | Path | None) -> Path | None:
    """The task folders' root of a local SentEval directory (``data.senteval.path``: the folder
    itself or its ``downstream/``), as :func:`prepare_senteval` uses it; None without a path."""
    if not path:
        return None
    local = Path(path).expanduser().resolve()
    return local / "downstream" if (local / "downstream").is_dir() else local


# Row counts of SentEval's release, per file: STS12-16 gold = scored pairs (non-blank gold
# lines; per year they sum to the published test sizes 3108, 1500, 3750, 3000, 1186), STS12-16
# input = all pairs (lines, equal to the gold files' line counts); STS-B, SST, TREC,
# MR/CR/SUBJ/MPQA = lines per file; SICK, MRPC = lines minus the header. CR (2407 + 1368) and
# MPQA (3312 + 7294) include the few blank lines those files contain (SentEval keeps them too).
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


def _extract_senteval(tar_path: Path, tar_sha: str, extract_dir: Path) -> Path:
    """Extract the SentEval tar into ``extract_dir`` (once per archive digest); return its root."""
    extract_once(tar_path, tar_sha, extract_dir, safe_extract)
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
    got = local_or_download("SentEval directory", "data.senteval", path=path, url=url, download_dir=download_dir,
                            local_kind="dir", local_fix="data.senteval.path=/path/to/unpacked/downstream")
    if got.archive is None:
        root = local_root(got.path)
    else:
        root = _extract_senteval(got.path, got.archive["sha256"], Path(extract_dir)).resolve()
    verified = verify_senteval(root, tasks, strict_counts)
    result = {
        "source": got.source,
        "archive": got.archive,
        "root": verified["root"],
        "strict_counts": strict_counts,
        "tasks": verified["tasks"],
    }
    write_json(manifest, result)
    return result


def _count_rows(path: Path, kind: str, data: bytes) -> int:
    """Rows of one SentEval file, counted as the README table does; checks the row format."""
    lines = data.splitlines()

    def bad(msg: str) -> DataError:
        return DataError(f"SentEval file {path} is malformed: {msg}; {_SENTEVAL_FIX}.")

    def check_float(i: int, fields: list[bytes], col: int) -> None:
        try:
            value = float(fields[col])
        except (ValueError, IndexError):
            raise bad(f"line {i}: column {col + 1} is not a score") from None
        if not math.isfinite(value):
            raise bad(f"line {i}: column {col + 1} is {fields[col].strip().decode(errors='replace')!r}, not a "
                      "finite score")

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

    Returns ``{"root", "tasks": {task: {"files": {relpath: {"sha256", "rows"}}}}}`` (``root``:
    relative to the working directory when it lies inside it, :func:`cselab.io.as_recorded`).
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
    out: dict[str, Any] = {"root": as_recorded(root), "tasks": {}}
    for task in tasks:
        out["tasks"][task] = {"files": _verify_files(root, task, None, strict_counts)}
    return out


def verify_sets(root: Path, sets, strict_counts: bool = True) -> dict:
    """:func:`verify_senteval` of the files of ``sets`` alone (:func:`set_files`: a task, or one
    split of STS-B or SICK): ``{"root", "sets", "files": {relpath: {"sha256", "rows"}}}``, what a
    job that reads them checks them against (rule senteval_reads)."""
    root = Path(root).expanduser().resolve()
    if not root.is_dir():
        raise DataError(f"SentEval directory {root} does not exist; {_SENTEVAL_FIX}.")
    files: dict[str, dict] = {}
    for name in sets:
        task, _, split = name.partition("/")
        files.update(_verify_files(root, task, set_files([name]), strict_counts, split or None))
    return {"root": as_recorded(root), "sets": list(sets), "files": files}


def _verify_files(root: Path, task: str, relpaths: list[str] | None, strict_counts: bool,
                  split: str | None = None) -> dict[str, dict]:
    """Check ``relpaths`` of ``task`` (None: all its files): each exists, is not empty, has the
    published rows (``strict_counts``) and reads as its evaluation reads it (:func:`check_readable`);
    an STS year's input and gold files have as many lines."""
    files: dict[str, dict] = {}
    line_counts: dict[str, int] = {}
    for relpath, kind in _task_files(task):
        if relpaths is not None and relpath not in relpaths:
            continue
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
            raise DataError(f"SentEval file {fpath} (task {task}) has {rows} rows, expected {expected}; "
                            f"{_STRICT_FIX}.")
        files[relpath] = {"sha256": hashlib.sha256(data).hexdigest(), "rows": rows}
    for relpath in list(line_counts):
        gold = relpath.replace("/STS.input.", "/STS.gs.")
        if gold != relpath and gold in line_counts and line_counts[relpath] != line_counts[gold]:
            raise DataError(f"SentEval files {root / relpath} ({line_counts[relpath]} lines) and "
                            f"{root / gold} ({line_counts[gold]} lines) are not row-aligned (task {task}); "
                            f"{_SENTEVAL_FIX}.")
    check_readable(root, task, split)
    return files


def check_readable(root: Path, task: str, split: str | None = None) -> None:
    """Read ``task`` (one ``split`` of STS-B or SICK) as its evaluation will (:mod:`cselab.data.tasks`):
    a line the evaluation would refuse (a score that is no finite number, a label that is not the
    task's) is refused now, at preparation, naming the file and the line."""
    if task == "STSBenchmark":
        for one in [split] if split else loaders.STSB_SPLITS:
            loaders.load_stsb(root, one)
    elif task == "SICKRelatedness":
        for one in [split] if split else loaders.SICK_SPLITS:
            loaders.load_sick(root, one)
    elif task in STS_SUBSETS:
        loaders.load_sts_year(root, task)
    else:
        loaders.load_transfer_task(root, task)


