"""The papers' numbers (cselab/reporting/published/*.yaml): every file parses, every printed
average is the mean of its row, and each comparison table has SimCSE and the paper's method."""

from pathlib import Path

import numpy as np
import pytest

from cselab.data.senteval import TRANSFER_TASKS
from cselab.evaluation.sts import STS_COLUMNS
from cselab.reporting.published import SETTING_KEYS, columns, lookup, published
from tests.helpers import read_yaml

TABLES = published()
# InfoCSE Table 12's Avg is the STS test average beside an STS-B dev column: not a row mean
WITH_AVERAGE = [key for key in sorted(TABLES) if columns(*key)[-1] == "Avg" and key != ("infocse", "table12")]


def test_every_paper_and_table_is_there():
    assert {("compcse", f"table{i}") for i in range(1, 7)} <= set(TABLES)
    assert {("diffcse", "table2"), ("diffcse", "table10"), ("diffcse", "table11"), ("infocse", "table3"),
            ("infocse", "table10"), ("infocse", "table11"), ("paradigm", "table3"), ("paradigm", "table4"),
            ("paradigm", "table5")} <= set(TABLES)
    for entries in TABLES.values():
        for e in entries:
            assert set(e) == {"model", "objective", "options", "row", "scores", "setting", "record_only"}
            assert set(e["setting"]) <= set(SETTING_KEYS), e["row"]
            assert e["model"] in {"bert-base-uncased", "bert-large-uncased", "roberta-base", "roberta-large"}


@pytest.mark.parametrize("key", WITH_AVERAGE)
def test_printed_average_is_the_mean_of_the_row(key):
    cols = columns(*key)
    tol = 6e-5 if key == ("infocse", "table3") else 0.01  # BEIR fractions, 4 digits
    for e in TABLES[key]:
        values = [e["scores"][c] for c in cols[:-1]]
        if None in values:  # an average-only row (the paradigm's MPT and MET, its Table 5)
            assert all(v is None for v in values) and e["scores"]["Avg"] is not None, e["row"]
            continue
        assert np.mean(values) == pytest.approx(e["scores"]["Avg"], abs=tol), e["row"]


def test_column_sets():
    assert columns("compcse", "table1") == STS_COLUMNS + ["Avg"]
    for key in (("diffcse", "table2"), ("infocse", "table10"), ("paradigm", "table4")):
        assert columns(*key) == TRANSFER_TASKS + ["Avg"]
    assert len(columns("infocse", "table3")) == 15 and columns("diffcse", "table10") == ["R@1", "R@5", "R@10"]


def test_known_values():
    info = next(e for e in TABLES[("infocse", "table3")]
                if e["objective"] == "simcse+infocse_mlm" and e["model"] == "bert-base-uncased")
    assert info["scores"]["Avg"] == 0.2509 and info["scores"]["trec-covid"] == 0.3937
    assert TABLES[("infocse", "table11")][-1]["scores"] == {"R@1": 80.41, "R@5": 100.0, "R@10": 100.0}
    assert TABLES[("diffcse", "table11")][0]["scores"] == {"alignment": 0.177, "uniformity": -2.313}
    comp = {"partitions": 2, "aggregation": "avg", "compose": "z+", "d0": 256, "subsampling": "none"}
    assert lookup("compcse", "table1", "bert-base-uncased", "compcse", comp)[0]["scores"]["Avg"] == 78.18


def test_transfer_tables_have_simcse_and_the_papers_method_per_plm():
    for key in (("diffcse", "table2"), ("infocse", "table10"), ("paradigm", "table4")):
        by_model = {}
        for e in TABLES[key]:
            by_model.setdefault(e["model"], set()).add(e["objective"])
        for objectives in by_model.values():
            assert "simcse" in objectives and len(objectives) >= 2


def test_paradigm_rows_match_experiments_by_loss_and_terms():
    modified = {"loss": "mhe", "gd": True, "w": True, "r": True, "m": 0.3, "subsampling": "none"}
    entry, note = lookup("paradigm", "table3", "bert-base-uncased", "paradigm", modified)
    assert entry["scores"]["Avg"] == 78.40 and "MHE" in note
    entry, _ = lookup("paradigm", "table5", "bert-base-uncased", "paradigm", {**modified, "r": False})
    assert entry["scores"]["Avg"] == 77.39 and entry["scores"]["STS12"] is None
    mhs = {"loss": "mhs", "gd": True, "w": False, "r": True}
    assert lookup("paradigm", "table5", "bert-base-uncased", "paradigm", mhs)[0]["scores"]["Avg"] == 78.27
    entry, _ = lookup("paradigm", "table5", "bert-base-uncased", "paradigm", {**mhs, "w": True})
    assert entry["scores"]["Avg"] == 78.27
    assert lookup("paradigm", "table3", "bert-base-uncased", "simcse", {})[0]["scores"]["Avg"] == 76.25


def _paper_config():
    from cselab.pipeline import config as cc

    return cc.validate(read_yaml(Path(__file__).resolve().parents[1] / "config.yaml"))


def test_every_published_row_with_an_experiment_stands_beside_one():
    """Each published row that one of the paper config's experiments matches (model, objective,
    every listed option) is shown beside some experiment in some table, and no table puts two
    experiments beside the same row."""
    from cselab.pipeline import config as cc
    from cselab.pipeline import targets as ct
    from cselab.reporting.published import lookup_any

    cfg = _paper_config()
    shown = set()
    for name, table in cfg["tables"].items():
        sources = [tuple(x) for x in table.get("sources", [])]
        beside = {}
        for row in ct.table_rows(cfg, name):
            entry, note = lookup_any(sources, row["model"], row["objective"], row["options"], row["setting"])
            if entry is None:
                assert note in ("no published row", ""), (name, row["id"], note)
                continue
            assert beside.setdefault(id(entry), row["name"]) == row["name"], (name, entry["row"], row["name"])
            shown.add(id(entry))
    experiments = []
    for name in cfg["experiments"]:
        exp_id = cc.experiment_ids(cfg, [name])[0]
        spec = cc.experiment_spec(cfg, exp_id)
        if spec["seed"] is not None:
            options = {**cc.full_options(spec), "subsampling": spec["training"].get("subsampling", "none")}
            experiments.append((spec["model"], spec["signature"], options))
    missing = []
    for (paper, tname), entries in TABLES.items():
        for e in entries:
            if e["record_only"] or id(e) in shown:
                continue
            if any(lookup(paper, tname, *exp)[0] is e for exp in experiments):
                missing.append(f"{paper} {tname}: {e['row']} ({e['model']})")
    assert not missing, missing


def test_record_only_rows_never_stand_beside_ours():
    entry, note = lookup("diffcse", "table1", "bert-base-uncased", "simcse", {})
    assert entry["row"] == "SimCSE-BERT_base (diamond)"
    assert all(e["record_only"] for e in TABLES[("diffcse", "table1")] if "reproduce" in e["row"])
