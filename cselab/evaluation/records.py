"""Result files checked where they are used: an evaluation job records every result file it
writes (size, modification time and sha256, in ``<file>.sha256`` beside it, as a trained model
folder records its files in ``files.json``), and whatever reads a result (a table, a figure, a
sweep, an export, the planning of any of them) can tell a result damaged or edited since: another
size, another sha256 where its mtime moved, a file that no longer parses, or an average that
disagrees with the scores it averages.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from cselab.errors import DataError
from cselab.io import reason_of, sha256_file, unreadable_errors, write_json

#: the record beside a result file (not ``.json``: never matched by a result's file pattern)
RECORD_SUFFIX = ".sha256"


def record_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + RECORD_SUFFIX)


def record_result(path: str | Path, rule: str) -> None:
    """Record the result file ``path`` as rule ``rule`` wrote it (call once it is complete)."""
    path = Path(path)
    st = path.stat()
    write_json(record_path(path), {"rule": rule, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns,
                                   "sha256": sha256_file(path)})


def recorded_rule(path: str | Path) -> str | None:
    """The rule that wrote ``path``, as its record says (None without a readable record)."""
    try:
        return json.loads(record_path(path).read_text()).get("rule")
    except (OSError, ValueError, AttributeError):
        return None


def result_problem(path: str | Path) -> str | None:
    """Why the result file ``path`` is not what its evaluation wrote, or None (also for a file
    that does not exist: Snakemake builds a missing one). Checked: its record (size; sha256 when
    its mtime moved since), then what it holds (a JSON that parses and whose ``avg`` is the mean
    of its ``scores``; an ``.npz`` whose every array reads back, bad CRCs included; without a
    record, or a JSON always, as its average is cheap to check)."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    problem, trusted = _against_record(path, st)
    if problem:
        return problem
    if path.suffix == ".json":
        return _json_problem(path)
    if path.suffix == ".npz" and not trusted:
        return _npz_problem(path)
    return None


def record_problem(path: str | Path) -> str | None:
    """Why the file ``path`` is no longer what its rule wrote, by the record beside it alone, or
    None (also for a file that does not exist, or has no readable record)."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return _against_record(path, st)[0]


def check_recorded(path: str | Path) -> None:
    """Raise :class:`DataError` when the file ``path`` is no longer what its rule recorded beside
    it (:func:`record_problem`): a corpus derived from the prepared one (a split, the spans, a
    subsampled corpus), which planning checks and the training that reads it checks again."""
    problem = record_problem(path)
    if problem:
        raise DataError(f"{path} is damaged or edited ({problem}). Restore it, or build it again with snakemake "
                        f"--forcerun {path} <your target> (what read it is rebuilt with it: add -n to list that first)")


def report_problem(path: str | Path) -> str | None:
    """Why a built table's or figure's file ``path`` is not what its job wrote, by its record
    alone (it is read by people, not parsed back), or None; a missing file is a problem here, as
    the job writes its two files together."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        return f"{path} is missing"
    problem, _ = _against_record(path, st)
    return f"{path}: {problem}" if problem else None


def _against_record(path: Path, st) -> tuple[str | None, bool]:
    """(what the record says is wrong, whether the file is the recorded one by size and mtime)."""
    try:
        want = json.loads(record_path(path).read_text())
        size, mtime, digest = int(want["bytes"]), int(want["mtime_ns"]), str(want["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return None, False
    rule = want.get("rule") or "its evaluation"
    if st.st_size != size:
        return f"it has {st.st_size} bytes, rule {rule} wrote {size}", False
    if st.st_mtime_ns == mtime:
        return None, True
    if sha256_file(path) != digest:
        return f"it does not match the sha256 rule {rule} recorded (edited or damaged since it was written)", False
    return None, True


def _json_problem(path: Path) -> str | None:
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except unreadable_errors() as e:
        return f"it does not parse ({reason_of(e)})"
    if not isinstance(result, dict):
        return "it holds no result object"
    scores, avg = result.get("scores"), result.get("avg")
    if not isinstance(scores, dict) or not scores:
        return None
    if not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in scores.values()):
        return "its scores are not all numbers"
    if avg is None:
        return None
    try:
        values = [float(v) for v in scores.values()]
        mean = sum(values) / len(values)
        if math.isnan(float(avg)) and any(math.isnan(v) for v in values):
            return None
        if not math.isclose(float(avg), mean, rel_tol=1e-9, abs_tol=1e-9):
            return f"its recorded avg {float(avg):.6g} is not the mean of its scores ({mean:.6g})"
    except (TypeError, ValueError):
        return "its scores or avg are not numbers"
    return None


def _npz_problem(path: Path) -> str | None:
    import zipfile

    import numpy as np

    try:
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()
        if bad:
            return f"its member {bad} has a bad CRC"
        with np.load(path) as z:
            for key in z.files:
                z[key]
    except unreadable_errors() as e:
        return f"it does not read back ({reason_of(e)})"
    return None


def read_result(path: str | Path) -> dict[str, Any]:
    """A result JSON as a table, figure or export reads it; a damaged or edited one is one
    :class:`DataError` naming it and the way out."""
    problem = result_problem(path)
    if problem is None:
        try:
            return json.loads(Path(path).read_text(encoding="utf-8"))
        except unreadable_errors() as e:
            problem = reason_of(e)
    raise damaged_error(path, problem)


def damaged_error(path: str | Path, problem: str) -> DataError:
    return DataError(f"the result {path} is damaged ({problem}). Rerun the same command: planning finds it and "
                     f"rebuilds it first (or snakemake --forcerun {path} <your target>)")
