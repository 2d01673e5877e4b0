"""Figures 2-5 on tiny inputs: a real PNG and the CSV it was drawn from."""

import random

import numpy as np
import pandas as pd
import pytest

from cselab.reporting.figures import compcse as figures
from cselab.errors import DataError
from tests.helpers import random_sentence

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 1024


def curve(steps, seed, every=10):
    """A training-curve CSV as train.py writes it: loss rows every step, measurements every ``every``."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(1, steps + 1):
        row = {"step": s, "epoch": 0, "loss": 1.0 / s, "lr": 3e-5}
        if s % every == 0:
            row.update(stsb_dev_spearman=60 + 20 * (1 - np.exp(-s / 200)) + rng.normal(0, 0.5),
                       alignment=0.1 + s / 5000, uniformity=-1.5 - s / 400 + rng.normal(0, 0.02))
        rows.append(row)
    return pd.DataFrame(rows)


CURVES = {"SimCSE": curve(600, 0), "w/ composition": curve(600, 1), "+ adjacent": curve(300, 2, every=50)}


def test_alignment_uniformity(tmp_path):
    png, csv = tmp_path / "fig2.png", tmp_path / "sub" / "fig2.csv"
    df = figures.figure_alignment_uniformity(CURVES, png, csv, max_step=500)
    assert_png(png)
    written = pd.read_csv(csv)
    assert list(written.columns) == ["label", "step", "alignment", "uniformity"]
    assert written.groupby("label", sort=False).size().to_dict() == {"SimCSE": 50, "w/ composition": 50,
                                                                      "+ adjacent": 6}
    assert written["step"].max() == 500 and not written.isna().any().any()
    pd.testing.assert_frame_equal(written, df, check_dtype=False)


def test_dev_curve(tmp_path):
    png, csv = tmp_path / "fig3.png", tmp_path / "fig3.csv"
    figures.figure_dev_curve(CURVES, png, csv, max_step=1000)
    assert_png(png)
    written = pd.read_csv(csv)
    assert list(written.columns) == ["label", "step", "stsb_dev_spearman"]
    assert len(written) == 60 + 60 + 6


def test_curve_without_measurements_is_a_clear_error(tmp_path):
    no_geometry = curve(100, 0).drop(columns=["alignment", "uniformity"])
    with pytest.raises(DataError, match="alignment"):
        figures.figure_alignment_uniformity({"SimCSE": no_geometry}, tmp_path / "a.png", tmp_path / "a.csv")
    with pytest.raises(DataError, match="up to step 5"):
        figures.figure_dev_curve({"SimCSE": curve(100, 0)}, tmp_path / "b.png", tmp_path / "b.csv", max_step=5)


def test_similarity_heatmap(tmp_path, tiny_encoder):
    png, csv = tmp_path / "fig4.png", tmp_path / "fig4.csv"
    encoders = {"tiny": lambda s: tiny_encoder.encode(s, batch_size=8),
                "shuffled": lambda s: np.random.default_rng(0).normal(size=(len(s), 16))}
    df = figures.figure_similarity_heatmap(encoders, png, csv)
    assert_png(png)
    written = pd.read_csv(csv)
    n = len(figures.FIGURE4_SENTENCES)
    assert list(written.columns) == ["model", "sentence_a", "sentence_b", "cosine"]
    assert len(written) == 2 * n * n
    assert set(written["sentence_a"]) == set(figures.FIGURE4_SENTENCES)
    diag = df[df["sentence_a"] == df["sentence_b"]]
    np.testing.assert_allclose(diag["cosine"], 1.0, atol=1e-6)
    sim = df[df["model"] == "tiny"].pivot(index="sentence_a", columns="sentence_b", values="cosine")
    np.testing.assert_allclose(sim.to_numpy(), sim.to_numpy().T, atol=1e-9)


def test_umap(tmp_path, tiny_encoder):
    import torch

    threads = torch.get_num_threads()
    rng = random.Random(0)
    sentences = [random_sentence(rng) for _ in range(40)]
    emb = tiny_encoder.encode(sentences, batch_size=16)
    embeddings = {"tiny": emb, "noisy": emb + np.random.default_rng(0).normal(0, 0.5, emb.shape)}
    png, csv = tmp_path / "fig5.png", tmp_path / "fig5.csv"
    df = figures.figure_umap(embeddings, sentences, png, csv, seed=42)
    assert_png(png)
    written = pd.read_csv(csv)
    assert list(written.columns) == ["model", "sentence", "word_count", "x", "y"]
    assert len(written) == 80 and np.isfinite(written[["x", "y"]].to_numpy()).all()
    assert written["word_count"].tolist() == [len(s.split()) for s in sentences] * 2
    again = figures.figure_umap(embeddings, sentences, tmp_path / "again.png", tmp_path / "again.csv", seed=42)
    pd.testing.assert_frame_equal(df, again)  # random_state: reproducible
    tiny = figures.figure_umap({"tiny": emb[:8]}, sentences[:8], tmp_path / "t.png", tmp_path / "t.csv")
    assert len(tiny) == 8  # n_neighbors lowered automatically
    assert torch.get_num_threads() == threads  # numba's OpenMP pool left torch's threads (the job's) alone
