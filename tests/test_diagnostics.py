"""Training diagnostics: the statistics against brute force, the curve's columns, the collapse
alarm (a warning, the curve, the result; the run goes on), and that none of it changes training."""

import logging

import numpy as np
import pytest
import torch

from cselab.evaluation.geometry import anisotropy, effective_rank
from cselab.training import diagnostics
from cselab.training.loop import train
from tests.helpers import make_corpus
from tests.test_train import spec_for


def test_anisotropy_is_the_mean_pairwise_cosine():
    x = np.random.default_rng(0).normal(size=(30, 8)) + 0.5
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    cos = unit @ unit.T
    brute = cos[~np.eye(30, dtype=bool)].mean()
    assert anisotropy(x) == pytest.approx(brute, abs=1e-12)
    assert anisotropy(np.tile(x[:1], (5, 1))) == pytest.approx(1.0)


def test_effective_rank_counts_the_directions_used():
    rng = np.random.default_rng(1)
    assert effective_rank(rng.normal(size=(20000, 6))) == pytest.approx(6, rel=0.01)  # isotropic: the size
    line = rng.normal(size=(100, 1)) * rng.normal(size=(1, 6))  # one direction: a dimensional collapse
    assert effective_rank(line) == pytest.approx(1.0, abs=1e-6)
    two = np.c_[rng.normal(size=(20000, 2)), np.zeros((20000, 4))]
    assert effective_rank(two) == pytest.approx(2, rel=0.01)
    assert np.isnan(effective_rank(np.ones((5, 3))))  # constant embeddings


def test_duplicate_rate_counts_rows_with_a_twin():
    ids = torch.tensor([[1, 2, 0], [1, 2, 0], [3, 4, 5], [1, 2, 0], [6, 0, 0]])
    assert float(diagnostics.duplicate_rate(ids)) == pytest.approx(3 / 5)
    assert diagnostics.duplicate_rate(ids[2:3]) == 0.0


def test_duplicate_rate_equals_the_unique_count():
    """The sort-based count (no data-dependent sizes) against torch.unique's, on batches full of twins."""
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        ids = torch.randint(0, 3, (64, 4), generator=gen)
        _, inverse, counts = torch.unique(ids, dim=0, return_inverse=True, return_counts=True)
        assert float(diagnostics.duplicate_rate(ids)) == pytest.approx(float((counts[inverse] > 1).float().mean()))


def test_collapse_alarm_thresholds():
    limits = {"min_effective_rank": 2.0, "max_uniformity": -0.1}
    assert diagnostics.collapse_alarm({"effective_rank": 40.0, "uniformity": -2.0}, limits) is None
    assert "effective rank" in diagnostics.collapse_alarm({"effective_rank": 1.2, "uniformity": -2.0}, limits)
    assert "uniformity" in diagnostics.collapse_alarm({"effective_rank": 40.0, "uniformity": -0.01}, limits)
    assert diagnostics.collapse_alarm({"effective_rank": float("nan")}, limits)  # NaN embeddings alarm too
    assert diagnostics.collapse_alarm({"effective_rank": 1.0, "uniformity": 0.0},
                                      {"min_effective_rank": None, "max_uniformity": None}) is None


def test_mfu_and_peak():
    assert diagnostics.peak_flops(torch.device("cpu")) is None
    assert diagnostics.peak_flops(torch.device("cpu"), 100.0) == 1e14
    # 6 FLOPs per parameter and token: 1e8 parameters at 1e5 tokens/s on a 1e15 peak -> 6%
    assert diagnostics.mfu(10 ** 8, 1e5, 1e15) == pytest.approx(0.06)
    assert diagnostics.mfu(10 ** 8, 1e5, None) is None


def dev_with(**metrics):
    return lambda encoder: {"stsb_dev_spearman": 1.0, "effective_rank": 30.0, "uniformity": -2.0, **metrics}


@pytest.mark.parametrize("objective,options", [("simcse", {}), ("compcse", {"partitions": 2})])
def test_curve_records_the_diagnostics(tiny_bert, tmp_path, objective, options):
    corpus = make_corpus(tmp_path / "corpus.txt", 60)
    res = train(spec_for(tiny_bert, objective, options), corpus, dev_with(), tmp_path / "out")
    logged = [r for r in res.curve if "loss" in r]
    for row in logged:
        assert -1 <= row["view_cosine"] <= 1
        assert row["duplicate_rate"] == 0.0  # distinct random sentences
        assert row["tokens_per_s"] > row["sentences_per_s"] > 0
        assert "mfu" not in row  # CPU: no peak to compare with
    assert res.tokens_per_s > 0 and res.alarms == []


def test_duplicates_in_the_corpus_show_in_the_rate(tiny_bert, tmp_path):
    corpus = tmp_path / "dup.txt"
    corpus.write_text("one sentence, many times\n" * 48)
    res = train(spec_for(tiny_bert), corpus, dev_with(), tmp_path / "out")
    assert [r["duplicate_rate"] for r in res.curve if "loss" in r] == [1.0, 1.0, 1.0]  # every row a twin


def test_collapse_alarm_warns_records_and_goes_on(tiny_bert, tmp_path, caplog):
    corpus = make_corpus(tmp_path / "corpus.txt", 60)
    spec = spec_for(tiny_bert)
    with caplog.at_level(logging.INFO, logger="cselab.training.loop"):
        res = train(spec, corpus, dev_with(effective_rank=1.1), tmp_path / "out",
                    operational={"collapse": {"min_effective_rank": 2.0, "max_uniformity": None}})
    assert res.steps == 6  # never stops a run
    assert [a["step"] for a in res.alarms] == [3, 6]  # not the untrained model at step 0
    assert "effective rank 1.1 < 2" in res.alarms[0]["reason"]
    assert [r["step"] for r in res.curve if r.get("collapse_alarm")] == [3, 6]
    alarms = [r for r in caplog.records if "collapse alarm at step" in r.getMessage()]
    assert [r.levelno for r in alarms] == [logging.WARNING, logging.INFO]  # the console warns once a run


def test_a_training_job_alarms_on_its_operational_thresholds(tiny_bert, tmp_path):
    """A job's spec holds no operational setting (experiments.experiment_spec leaves them out): the
    thresholds come with the job's operational settings, and alarm as set there."""
    corpus = make_corpus(tmp_path / "corpus.txt", 60)
    spec = spec_for(tiny_bert)
    del spec["training"]["collapse"]  # as the workflow's spec of the experiment
    res = train(spec, corpus, dev_with(effective_rank=1.1), tmp_path / "out",
                operational={"collapse": {"min_effective_rank": 2.0, "max_uniformity": None}})
    assert [a["step"] for a in res.alarms] == [3, 6]
    off = train(spec, corpus, dev_with(effective_rank=1.1), tmp_path / "off",
                operational={"collapse": {"min_effective_rank": None, "max_uniformity": None}})
    assert off.alarms == []


def test_diagnostics_change_no_number(tiny_bert, tmp_path):
    """The thresholds and the diagnostics are operational: the losses do not move."""
    corpus = make_corpus(tmp_path / "corpus.txt", 40)
    runs = [train(spec_for(tiny_bert), corpus, dev_with(), tmp_path / f"o{i}",
                  operational={"collapse": collapse}).curve
            for i, collapse in enumerate(({"min_effective_rank": 1e9, "max_uniformity": -5.0},
                                          {"min_effective_rank": None, "max_uniformity": None}))]
    assert [r["loss"] for r in runs[0] if "loss" in r] == [r["loss"] for r in runs[1] if "loss" in r]


def test_figure_marks_the_alarms(tmp_path):
    import pandas as pd

    from cselab.reporting.figures.diagnostics import figure_diagnostics

    curve = pd.DataFrame({"step": [0, 2, 3, 4], "loss": [None, 1.0, None, 0.5], "view_cosine": [None, 0.9, None, 0.8],
                          "effective_rank": [30.0, None, 1.5, None], "collapse_alarm": [None, None, 1.0, None]})
    df = figure_diagnostics({"run": curve}, tmp_path / "f.png", tmp_path / "f.csv")
    assert (tmp_path / "f.png").stat().st_size > 1000
    rank = df[df["metric"] == "effective_rank"]
    assert list(rank["step"]) == [0, 3] and list(rank["alarm"]) == [False, True]
    assert list(df[df["metric"] == "view_cosine"]["value"]) == [0.9, 0.8]


def test_tables_note_the_alarms(tmp_path):
    import json

    from cselab.reporting.tables import collapse_notes

    bad, good = tmp_path / "bad.json", tmp_path / "good.json"
    bad.write_text(json.dumps({"collapse_alarms": [{"step": 250, "reason": "effective rank 1.2 < 2"}]}))
    good.write_text(json.dumps({"collapse_alarms": []}))
    notes = collapse_notes([{"id": "x-s1", "summary": str(bad)}, {"id": "y-s1", "summary": str(good)},
                            {"id": "untrained", "summary": None}])
    assert len(notes) == 1 and "x-s1" in notes[0] and "step 250: effective rank 1.2 < 2" in notes[0]


def test_the_job_tags_its_run_and_writes_the_summary():
    from cselab.pipeline.jobs.train import COLLAPSE_TAG, _summary
    from cselab.training.loop import TrainResult

    class FakeRun:
        run_id, tags, metrics = "r1", {}, {}

        def set_tags(self, tags):
            self.tags.update(tags)

        def log_metrics(self, metrics):
            self.metrics.update(metrics)

    curve = [{"step": 0, "effective_rank": 30.0}, {"step": 2, "loss": 1.0, "view_cosine": 0.7, "tokens_per_s": 900.0},
             {"step": 4, "effective_rank": 1.5, "collapse_alarm": 1.0}]
    result = TrainResult(best_step=2, best_dev=50.0, steps=4, train_seconds=2.0, sentences_per_s=64.0, curve=curve,
                         tokens_per_s=900.0, alarms=[{"step": 4, "reason": "effective rank 1.5 < 2"}])
    r = FakeRun()
    summary = _summary(result, r, scored=True)
    assert r.tags == {COLLAPSE_TAG: "step 4: effective rank 1.5 < 2"}
    assert summary["collapse_alarms"] == result.alarms and summary["tokens_per_s"] == 900.0
    assert summary["diagnostics"] == {"effective_rank": 1.5, "view_cosine": 0.7, "tokens_per_s": 900.0}
    clean = FakeRun()
    clean.tags = {}
    _summary(TrainResult(2, 50.0, 4, 2.0, 64.0, curve[:2]), clean, scored=True)
    assert clean.tags == {}
