"""Tables: mean and std over seeds, the paper's number only where the setting matches."""

import pandas as pd
import pytest

from cselab.evaluation.sts import STS_COLUMNS
from cselab.reporting.published import lookup
from cselab.reporting.tables import score_table, to_markdown


def row(name, method, objective, options, seed, base, model="bert-base-uncased"):
    return {"name": name, "plm": "bert-base", "model": model, "method": method, "objective": objective,
            "options": options, "seed": seed, "scores": {c: base + i for i, c in enumerate(STS_COLUMNS)}}


COMP = {"partitions": 2, "aggregation": "avg", "compose": "z+", "d0": None, "subsampling": "none"}


def test_lookup_matches_only_the_same_setting():
    entry, note = lookup("compcse", "table1", "bert-base-uncased", "compcse", {**COMP, "d0": 256})
    assert entry["scores"]["Avg"] == 78.18 and "w/ comp." in note
    entry, note = lookup("compcse", "table1", "bert-base-uncased", "compcse", {**COMP, "d0": 256, "aggregation": "sum"})
    assert entry is None and "not comparable" in note
    entry, note = lookup("compcse", "table1", "bert-large-uncased", "compcse", COMP)
    assert entry is None and "subsuming" in note
    entry, _ = lookup("compcse", "table1", "bert-large-uncased", "compcse", {**COMP, "subsampling": "subsuming"})
    assert entry["scores"]["Avg"] == 79.67


@pytest.mark.parametrize("table,options,value", [
    ("table2", {**COMP, "subsampling": "overlapping"}, 83.18),
    ("table3", {**COMP, "aggregation": "concat_project"}, 69.24),
    ("table4", {**COMP, "compose": "both"}, 83.81),
    ("table5", {**COMP, "partitions": 3}, 83.48),
    ("table6", {**COMP, "d0": 192}, 83.88),
    ("table6", COMP, 83.97),
])
def test_ablation_tables_published_dev_numbers(table, options, value):
    entry, _ = lookup("compcse", table, "bert-base-uncased", "compcse", options)
    assert entry["scores"]["STS-B dev"] == value
    assert lookup("compcse", "table1", "all-MiniLM-L6-v2", "simcse", {}) == (None, "")


def test_sts_table_mean_std_and_gap():
    rows = [row("untrained-bert-base", "untrained", "untrained", {}, None, 50.0),
            row("simcse-bert-base", "simcse", "simcse", {}, 1, 70.0),
            row("simcse-bert-base", "simcse", "simcse", {}, 2, 72.0)]
    df = score_table(rows, STS_COLUMNS, [("compcse", "table1")])
    assert list(df["experiment"]) == ["untrained-bert-base", "simcse-bert-base"]
    simcse = df.iloc[1]
    assert simcse["STS12"] == 71.0 and simcse["STS12_paper"] == 68.40
    assert simcse["Avg"] == 74.0 and simcse["Avg_std"] == pytest.approx(1.41, abs=0.01)
    assert simcse["Avg_gap"] == pytest.approx(74.0 - 76.25)
    assert simcse["seeds"] == "1 2"
    assert pd.isna(df.iloc[0]["Avg_paper"])
    md = to_markdown(df, STS_COLUMNS, "T1")
    assert "[compcse table1]" in simcse["note"]
    assert "| 71.00 ± 1.41 (68.40) |" in md and "74.00 ± 1.41 (76.25)" in md
