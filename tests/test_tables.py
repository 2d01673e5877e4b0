"""Tables: mean and std over seeds, the paper's number only where the setting matches."""

import pandas as pd
import pytest

from cselab.evaluation.sts import STS_COLUMNS
from cselab.reporting.published import lookup, lookup_any, setting_differences, setting_note
from cselab.reporting.tables import score_table, to_markdown


def row(name, method, objective, options, seed, base, model="bert-base-uncased"):
    return {"name": name, "plm": "bert-base", "model": model, "method": method, "objective": objective,
            "options": options, "seed": seed, "scores": {c: base + i for i, c in enumerate(STS_COLUMNS)}}


COMP = {"partitions": 2, "aggregation": "avg", "compose": "z+", "d0": None, "subsampling": "none"}


def test_lookup_matches_only_the_same_setting():
    entry, note = lookup("compcse", "table1", "bert-base-uncased", "compcse", {**COMP, "d0": 256})
    assert entry["scores"]["Avg"] == 78.18 and "w/ comp." in note
    entry, note = lookup("compcse", "table1", "bert-base-uncased", "compcse", {**COMP, "d0": 256, "aggregation": "sum"})
    assert entry is None and note == ""
    entry, note = lookup_any([("compcse", "table1")], "bert-large-uncased", "compcse", COMP)
    assert entry is None and note == "no published row"  # never the name of a row that is not beside ours
    entry, _ = lookup("compcse", "table1", "bert-large-uncased", "compcse", {**COMP, "subsampling": "subsuming"})
    assert entry["scores"]["Avg"] == 79.67


def test_note_says_where_our_setting_differs_from_the_papers():
    ours = {"precision": "fp32", "lr": 3e-5, "batch_size": 64, "epochs": 1, "max_steps": 50, "max_len": 32,
            "corpus": "wiki1m_head.txt, first 1,600 lines", "segmenter": "spacy_clauses"}
    options = {**COMP, "subsampling": "subsuming"}
    entry, note = lookup_any([("compcse", "table2")], "bert-base-uncased", "compcse", options, ours)
    assert note.startswith("paper row: + subsuming; ours differs: precision fp32 (paper fp16), max steps 50 "
                           "(paper none), corpus wiki1m_head.txt, first 1,600 lines (paper wiki1m_for_simcse.txt), "
                           "segmenter spacy_clauses (paper DMRST discourse parser)")
    same = {**ours, "precision": "fp16", "max_steps": None, "corpus": "wiki1m_for_simcse.txt"}
    del same["segmenter"]
    _, note = lookup_any([("compcse", "table6")], "bert-base-uncased", "compcse", COMP, same)
    assert "same training setting as the paper's" in note
    # a setting the paper does not state is not compared; SimCSE rows carry SimCSE's own
    assert setting_differences({"lr": "not stated", "batch_size": 64}, {"lr": 1e-5, "batch_size": 64}) == []
    entry, note = lookup_any([("compcse", "table1")], "roberta-base", "simcse", {}, {**same, "lr": 1e-5,
                                                                                       "batch_size": 512})
    assert entry["row"] == "SimCSE (Gao et al., 2021)" and "same training setting" in note
    # "same" only for what the paper states: none of it, or part of it, is said so
    ours = {"precision": "fp16", "lr": 1e-5, "batch_size": 128, "epochs": 1, "max_len": 32}
    assert setting_note({"lr": "not stated", "batch_size": "not stated"}, ours) == "paper setting not stated"
    assert setting_note({"lr": 1e-5, "batch_size": "not stated", "epochs": 1}, ours) == (
        "same training setting as the paper's where it is stated (not stated: precision, batch size, max len)")
    assert setting_note({"lr": 2e-5, "batch_size": "not stated"}, ours) == "ours differs: lr 1e-05 (paper 2e-05)"
    _, note = lookup_any([("paradigm", "table3")], "bert-base-uncased", "paradigm", {"loss": "arccon"}, ours)
    assert "not stated: precision, lr, batch size, epochs" in note and "same training setting as the paper's;" not in note


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


def test_comparisons_count_seeds_when_there_are_several_and_say_so():
    """>= 2 seeds per method: the interval counts training randomness (paired seeds) and each
    method's seed spread is shown; one seed: items only, and the legend says what that leaves out."""
    import numpy as np

    from cselab.reporting.tables import Comparison, add_comparisons

    rng = np.random.default_rng(0)
    gold = rng.normal(size=200)

    def trained(name, objective, seed, noise):
        r = row(name, objective, objective, {}, seed, 70.0 + seed)
        r["pairs"] = {"STSBenchmark": (gold, gold + noise * rng.normal(size=200))}
        return r

    rows = [trained(n, o, s, noise) for n, o, noise in (("simcse-bert-base", "simcse", 1.0),
                                                       ("compcse-bert-base", "compcse", 0.9)) for s in (1, 2, 3)]
    comparisons = [Comparison("", ("STSBenchmark",))]
    df = add_comparisons(score_table(rows, STS_COLUMNS, []), rows, comparisons, n_boot=200)
    comp = df.set_index("experiment").loc["compcse-bert-base"]
    assert comp["ci_counts"] == "seeds+items" and comp["diff_ci_low"] < comp["diff"] < comp["diff_ci_high"]
    assert (comp["Avg_min"], comp["Avg_max"]) == (74.0, 76.0)
    md = to_markdown(df, STS_COLUMNS, "T", comparisons=comparisons)
    assert "Avg over seeds [min, max]" in md and "[74.00, 76.00]" in md
    assert "counts training randomness" in md and "one seed" not in md
    single = [r for r in rows if r["seed"] == 1]
    df = add_comparisons(score_table(single, STS_COLUMNS, []), single, comparisons, n_boot=200)
    assert df.set_index("experiment").loc["compcse-bert-base", "ci_counts"] == "items"
    md = to_markdown(df, STS_COLUMNS, "T", comparisons=comparisons)
    assert "over seeds [min, max]" not in md and "not training randomness" in md


def test_comparisons_share_each_baseline_and_equal_one_bootstrap_per_experiment(monkeypatch):
    """Two PLMs, each with its SimCSE: every seed of every experiment (its baseline's included) is
    scored once per task of a comparison, not once per comparison; every row's numbers are those
    of its own paired bootstrap against its baseline (the computation before the sharing)."""
    import numpy as np

    from cselab.reporting import stats
    from cselab.reporting.tables import Comparison, add_comparisons

    rng = np.random.default_rng(21)
    gold = {t: np.round(rng.uniform(0, 5, n) * 5) / 5 for t, n in (("STS12", 240), ("STS13", 150), ("STS-B", 90))}
    rows = []
    for plm, objective, seeds, noise in (("bert", "simcse", (1, 2, 3), 1.0), ("bert", "compcse", (1, 2, 3), 0.9),
                                         ("bert", "diffcse", (4, 5), 1.1), ("bert", "infocse", (1,), 0.8),
                                         ("roberta", "simcse", (1, 2), 1.0), ("roberta", "compcse", (1, 2), 1.2)):
        for s in seeds:
            r = {**row(f"{objective}-{plm}", objective, objective, {}, s, 70.0 + s), "plm": plm}
            r["pairs"] = {t: (g, g + noise * rng.normal(size=len(g))) for t, g in gold.items()}
            rows.append(r)
    scored, correlations = [], stats._SpearmanBlock.correlations

    def counted(self, pred):
        scored.append(pred)
        return correlations(self, pred)

    monkeypatch.setattr(stats._SpearmanBlock, "correlations", counted)
    comparisons = [Comparison("STS avg", tuple(gold), prefix="sts_"), Comparison("STS-B", ("STS-B",), prefix="b_")]
    df = add_comparisons(score_table(rows, STS_COLUMNS, []), rows, comparisons, n_boot=200).set_index("experiment")
    assert len(scored) == len(rows) * (len(gold) + 1) and len({id(p) for p in scored}) == len(scored)
    assert df["baseline"].dropna().to_dict() == {"compcse-bert": "simcse-bert", "diffcse-bert": "simcse-bert",
                                                 "infocse-bert": "simcse-bert", "compcse-roberta": "simcse-roberta"}
    for name, base in df["baseline"].dropna().items():
        group, baseline = ([r for r in rows if r["name"] == n] for n in (name, base))
        for c in comparisons:
            res = stats.paired_bootstrap({t: gold[t] for t in c.columns},
                                         [{t: r["pairs"][t][1] for t in c.columns} for r in group],
                                         [{t: r["pairs"][t][1] for t in c.columns} for r in baseline], n_boot=200,
                                         paired_seeds=[r["seed"] for r in group] == [r["seed"] for r in baseline])
            got = df.loc[name, [c.prefix + k for k in ("diff", "diff_ci_low", "diff_ci_high", "p_value", "ci_counts")]]
            assert list(got) == [round(res["diff"], 2), round(res["ci_low"], 2), round(res["ci_high"], 2),
                                 round(res["p_value"], 4), res["interval"]]


def test_subset_note_only_when_a_transfer_result_was_capped(tmp_path):
    import json

    from cselab.reporting.tables import read_results, subset_notes

    full, capped = tmp_path / "full.json", tmp_path / "capped.json"
    full.write_text(json.dumps({"scores": {"MR": 70.0}, "max_items": None}))
    capped.write_text(json.dumps({"scores": {"MR": 71.0}, "max_items": 1000}))
    sts = tmp_path / "sts.json"
    sts.write_text(json.dumps({"scores": {"STS12": 60.0}}))
    assert subset_notes(read_results([{"files": [full, sts]}])) == []
    notes = subset_notes(read_results([{"files": [full]}, {"files": [capped, sts]}]))
    assert len(notes) == 1 and "at most 1000 items" in notes[0] and "max_items" in notes[0]
