"""Results checked where they are used (:mod:`cselab.evaluation.records`): a result file cut short,
emptied, flipped, overwritten, hand-edited or whose average disagrees with its scores is found,
named, and handed to the workflow to build again; a reader meeting one names it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from cselab.errors import DataError
from cselab.evaluation.records import read_result, record_path, record_result, result_problem
from cselab.pipeline import invocation
from cselab.reporting.stats import load_pairs, save_pairs
from tests.test_caches import DAMAGES, damage

STS = {"scores": {"STS12": 60.0, "STS13": 70.0, "STS-B": 80.0}, "avg": 70.0, "tasks": {}}


def write_result(folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    sts, pairs = folder / "sts.json", folder / "sts_pairs.npz"
    sts.write_text(json.dumps(STS, indent=2))
    rng = np.random.default_rng(0)
    save_pairs(pairs, {c: (rng.normal(size=300), rng.normal(size=300)) for c in ("STS12", "STS13")})
    for p in (sts, pairs):
        record_result(p, "evaluate_sts")
    return sts, pairs


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("which", ["json", "npz"])
def test_a_damaged_result_is_found_and_named_by_its_reader(tmp_path, how, which):
    sts, pairs = write_result(tmp_path / "exp")
    path = sts if which == "json" else pairs
    assert result_problem(path) is None
    damage(path, how)
    problem = result_problem(path)
    assert problem and ("rule evaluate_sts" in problem or how == "flipped" and which == "json"), problem
    with pytest.raises(DataError) as err:
        read_result(sts) if which == "json" else load_pairs(pairs)
    assert f"the result {path} is damaged" in str(err.value) and "--forcerun" in str(err.value)


def test_a_hand_edited_score_is_damaged_by_its_sha256_and_by_its_average(tmp_path):
    sts, _ = write_result(tmp_path / "exp")
    edited = json.loads(sts.read_text())
    edited["scores"]["STS12"] = 66.0  # the same number of characters
    sts.write_text(json.dumps(edited, indent=2))
    assert "does not match the sha256 rule evaluate_sts recorded" in result_problem(sts)
    record_path(sts).unlink()  # no record (a result written before records): its average tells
    assert "its recorded avg 70 is not the mean of its scores (72)" in result_problem(sts)
    sts.write_text(json.dumps(STS))
    assert result_problem(sts) is None  # a whole result without a record is read as it is


def test_a_result_without_a_record_is_checked_by_what_it_holds(tmp_path):
    sts, pairs = write_result(tmp_path / "exp")
    for p in (sts, pairs):
        record_path(p).unlink()
    assert result_problem(sts) is None and result_problem(pairs) is None
    damage(pairs, "cut")
    assert "does not read back" in result_problem(pairs)
    assert result_problem(tmp_path / "exp" / "missing.json") is None  # missing: Snakemake builds it
    # a result without an average (geometry's) whose score is no number: a table would stop on it
    geometry = tmp_path / "exp" / "geometry.json"
    geometry.write_text('{"scores": {"alignment": 0.4, "uniformity": -2.1}}')
    assert result_problem(geometry) is None
    geometry.write_text('{"scores": {"alignment": "abc", "uniformity": -2.1}}')
    assert result_problem(geometry) == "its scores are not all numbers"
    geometry.write_text('{"scores": {"alignment": NaN, "uniformity": null}}')  # not measured: kept
    assert result_problem(geometry) is None


def test_planning_names_a_damaged_result_once_and_forces_its_evaluation(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    sts, pairs = write_result(Path("results/experiments/simcse-tiny-s42"))
    whole, _ = write_result(Path("results/experiments/compcse-tiny-s42"))
    damage(pairs, "cut")
    monkeypatch.setattr(invocation, "_CHECKED", {})
    run = invocation.Invocation.of(["--cores", "1", "results/table1.csv"], main=True)
    forced = []
    files = [str(sts), str(pairs), str(whole), "results/experiments/simcse-tiny-s42/train_summary.json"]
    assert invocation.checked_results(files, run, forced.append) == files
    assert invocation.checked_results({"a": str(pairs)}, run, forced.append) == {"a": str(pairs)}  # once
    assert forced == [str(pairs)]
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"cselab: the result {pairs} is damaged (it has ") and "rule evaluate_sts builds it " \
        "again in this run, before what reads it" in line
    dry = invocation.Invocation.of(["-n", "results/table1.csv"], main=True)
    monkeypatch.setattr(invocation, "_CHECKED", {})
    invocation.checked_results(files, dry, forced.append)
    assert "in a real run" in capsys.readouterr().err


def test_the_deleted_hint_names_only_a_folder_the_table_was_built_from(tmp_path, monkeypatch):
    """A seed added since the table was built never had a folder: no "was deleted" hint for it;
    a run the table shows whose folder is gone gets one."""
    from snakemake.utils import update_config

    from cselab.pipeline.config import validate
    from tests.helpers import ROOT, read_yaml
    from tests.test_faults import PREPARED_DATA

    monkeypatch.chdir(tmp_path)
    cfg = read_yaml(ROOT / "config.yaml")
    update_config(cfg, {**PREPARED_DATA, "seeds": [42, 43], "experiments": {"simcse-tiny": {"plm": "tiny",
                                                                                               "method": "simcse"}},
                        "tables": {"table1": {"experiments": ["simcse-tiny"]}}})
    cfg = validate(cfg)
    Path("results").mkdir()
    with open("results/table1.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, ["plm", "method", "experiment", "seeds"])
        w.writeheader()
        w.writerow({"plm": "tiny", "method": "simcse", "experiment": "simcse-tiny", "seeds": "42"})
    assert invocation.deleted_experiments(cfg) and all("s43" not in h for h in invocation.deleted_experiments(cfg))
    (hint,) = invocation.deleted_experiments(cfg)
    assert hint.startswith("results/experiments/simcse-tiny-s42/ was deleted, but results/table1.csv was built")
    Path("results/experiments/simcse-tiny-s42").mkdir(parents=True)
    assert invocation.deleted_experiments(cfg) == []


def test_a_lost_result_under_a_built_table_is_named_with_the_command_that_rebuilds_it(tmp_path, monkeypatch):
    """A result file gone while its record stays (a failed forced evaluation had it removed), read
    by a built table: one hint naming the file, the table and the command. No hint for a result
    that never was (no record), nor under a table not built, nor in a deleted folder (its own hint),
    nor for a file the command asks for (it is being rebuilt)."""
    from snakemake.utils import update_config

    from cselab.evaluation.records import record_result
    from cselab.pipeline.config import validate
    from tests.helpers import ROOT, read_yaml
    from tests.test_faults import PREPARED_DATA

    monkeypatch.chdir(tmp_path)
    cfg = read_yaml(ROOT / "config.yaml")
    update_config(cfg, {**PREPARED_DATA, "experiments": {"simcse-tiny": {"plm": "tiny", "method": "simcse"}},
                        "tables": {"table1": {"experiments": ["simcse-tiny"]},
                                   "table_transfer": {"experiments": ["simcse-tiny"]}}})
    cfg = validate(cfg)
    folder = Path("results/experiments/simcse-tiny-s42")
    folder.mkdir(parents=True)
    for name in ("sts.json", "sts_pairs.npz", "transfer.json"):
        (folder / name).write_text("{}")
        record_result(folder / name, "evaluate")
    Path("results/table1.csv").write_text("experiment,seeds\nsimcse-tiny,42\n")
    assert invocation.lost_results(cfg) == []
    (folder / "sts.json").unlink()
    (folder / "transfer.json").unlink()  # table_transfer is not built: no hint for it
    (hint,) = invocation.lost_results(cfg)
    assert hint == ("results/experiments/simcse-tiny-s42/sts.json is gone (its record sts.json.sha256 is there: a job "
                    "wrote it once), but results/table1.csv was built from it; Snakemake does not rebuild what is "
                    "missing under a result that exists. To build it again, add it to the targets: snakemake ... "
                    "results/experiments/simcse-tiny-s42/sts.json results/table1.csv")
    assert invocation.lost_results(cfg, asked=("--cores", "1", "./results/experiments/simcse-tiny-s42/sts.json")) == []
    folder.rename("results/experiments/moved")  # a deleted folder: its own hint
    assert invocation.lost_results(cfg) == []
    Path("results/experiments/moved").rename(folder)
    (folder / "sts.json.sha256").unlink()
    assert invocation.lost_results(cfg) == []
