"""CompCSE's figures (2-5), and the heatmap DiffCSE's Figure 4 shares: alignment vs uniformity
and the STS-B dev curve during training (from the training curves), the cosine heatmap of the
paper's example sentences and the UMAP of STS-B dev embeddings (from the checkpoints)."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from cselab.reporting.figures import curve_rows, new_figure, save_figure
from cselab.reporting.kinds import FigureInputs, Out, figure_kind
from cselab.settings.base import setting, settings

#: The example sentences of CompCSE §3/§6 (Figure 4): each anchor followed by the texts it is
#: compared with ("A man is lifting weights in a garage" vs "A man is lifting weights", "A man in a
#: garage"; "We store it outside of the house" vs "A man is in a garage", "She parked on the driveway").
FIGURE4_SENTENCES = [
    "A man is lifting weights in a garage.",
    "A man is lifting weights.",
    "A man in a garage.",
    "We store it outside of the house.",
    "A man is in a garage.",
    "She parked on the driveway.",
]

def figure_alignment_uniformity(curves: Mapping[str, pd.DataFrame], out_png: str | Path, out_csv: str | Path,
                                max_step: int = 500, title: str | None = None) -> pd.DataFrame:
    """Figure 2: each label's trajectory in the (uniformity, alignment) plane up to ``max_step``.

    ``curves``: label -> training curve with columns ``step``, ``alignment``, ``uniformity`` (rows
    without a measurement are skipped). Circle = first measured step, arrow head = last.
    CSV: ``label, step, alignment, uniformity``.
    """
    df = curve_rows(curves, ["alignment", "uniformity"], max_step, "alignment/uniformity")
    fig = new_figure(figsize=(5.5, 4.5))
    ax = fig.add_subplot()
    for i, (label, rows) in enumerate(df.groupby("label", sort=False)):
        color = f"C{i}"
        u, a = rows["uniformity"].to_numpy(), rows["alignment"].to_numpy()
        ax.plot(u, a, "-o", color=color, ms=3, lw=1, label=label)
        ax.scatter(u[:1], a[:1], s=70, facecolors="none", edgecolors=color, linewidths=1.5, zorder=3)
        if len(u) > 1:
            ax.annotate("", xy=(u[-1], a[-1]), xytext=(u[-2], a[-2]),
                        arrowprops={"arrowstyle": "-|>", "color": color, "lw": 1.5, "mutation_scale": 16})
    ax.set_xlabel(r"$\ell_{\mathrm{uniform}}$ (lower is better)")
    ax.set_ylabel(r"$\ell_{\mathrm{align}}$ (lower is better)")
    ax.set_title(title or f"Alignment vs uniformity on STS-B dev (steps ≤ {max_step})", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, title="circle: start, arrow: end", title_fontsize=8)
    return save_figure(fig, df, out_png, out_csv)


def figure_dev_curve(curves: Mapping[str, pd.DataFrame], out_png: str | Path, out_csv: str | Path,
                     max_step: int = 1000, title: str | None = None) -> pd.DataFrame:
    """Figure 3: STS-B dev Spearman (column ``stsb_dev_spearman``) against training step, one line
    per label, up to ``max_step``. CSV: ``label, step, stsb_dev_spearman``."""
    df = curve_rows(curves, ["stsb_dev_spearman"], max_step, "STS-B dev curve")
    fig = new_figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for label, rows in df.groupby("label", sort=False):
        ax.plot(rows["step"], rows["stsb_dev_spearman"], "-o", ms=3, lw=1.2, label=label)
    ax.set_xlabel("training step")
    ax.set_ylabel("STS-B dev Spearman (x100)")
    ax.set_title(title or f"STS-B development set during training (steps ≤ {max_step})", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, df, out_png, out_csv)


def _unit_rows(emb: np.ndarray, n: int, name: str) -> np.ndarray:
    emb = np.asarray(emb, dtype=np.float64)
    if emb.ndim != 2 or emb.shape[0] != n:
        raise ValueError(f"{name}: embeddings of shape {emb.shape}, expected ({n}, dim)")
    return emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)


def figure_similarity_heatmap(encoders: Mapping[str, Callable[[list[str]], np.ndarray]], out_png: str | Path,
                              out_csv: str | Path, sentences: Sequence[str] | None = None,
                              title: str | None = None) -> pd.DataFrame:
    """Figure 4: per model, the cosine similarities between all ``sentences`` (default
    :data:`FIGURE4_SENTENCES`) as an annotated heatmap; one colour scale for all models.
    CSV (long): ``model, sentence_a, sentence_b, cosine`` for every ordered pair, diagonal included."""
    from matplotlib.colors import Normalize

    sentences = list(FIGURE4_SENTENCES if sentences is None else sentences)
    if len(sentences) < 2 or not encoders:
        raise ValueError("the similarity heatmap needs at least 2 sentences and 1 model")
    n = len(sentences)
    sims = {}
    for name, encode in encoders.items():
        e = _unit_rows(encode(sentences), n, name)
        sims[name] = np.clip(e @ e.T, -1.0, 1.0)
    df = pd.DataFrame([{"model": name, "sentence_a": a, "sentence_b": b, "cosine": float(sim[i, j])}
                       for name, sim in sims.items() for i, a in enumerate(sentences)
                       for j, b in enumerate(sentences)])
    vmin, vmax = df["cosine"].min(), df["cosine"].max()
    norm = Normalize(vmin, vmax if vmax > vmin else vmin + 1e-6)
    size = 0.75 * n + 2
    fig = new_figure(figsize=(size * len(sims) + 1, size), layout="constrained")
    axes = fig.subplots(1, len(sims), squeeze=False)[0]
    labels = [textwrap.fill(s, 22) for s in sentences]
    for ax, (name, sim) in zip(axes, sims.items()):
        im = ax.imshow(sim, cmap="viridis", norm=norm)
        for i in range(n):
            for j in range(n):
                ax.text(j, i, f"{sim[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="black" if norm(sim[i, j]) > 0.6 else "white")
        ax.set_xticks(range(n), labels, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(n), labels if ax is axes[0] else [""] * n, fontsize=7)
        ax.set_title(name, fontsize=10)
    fig.colorbar(im, ax=list(axes), shrink=0.8, label="cosine similarity")
    fig.suptitle(title or "Cosine similarity between the paper's example sentences", fontsize=11)
    return save_figure(fig, df, out_png, out_csv)


def _numba_threads_as_torchs() -> None:
    """Numba's OpenMP pool, started by UMAP, sets the process's OpenMP threads to numba's own
    count (every core by default), and torch's intra-op threads with them: a job's torch would
    run past its rule's threads from then on. Numba gets torch's count (the job's budget where
    torch is not imported), unless the user set ``NUMBA_NUM_THREADS``; read at numba's import."""
    from cselab.io import thread_budget

    torch = sys.modules.get("torch")
    os.environ.setdefault("NUMBA_NUM_THREADS", str(torch.get_num_threads() if torch else thread_budget()))


def figure_umap(embeddings: Mapping[str, np.ndarray], sentences: Sequence[str], out_png: str | Path,
                out_csv: str | Path, seed: int = 42, n_neighbors: int = 15, min_dist: float = 0.1,
                title: str | None = None) -> pd.DataFrame:
    """Figure 5: a 2-D UMAP (``metric="cosine"``) of each model's embeddings of ``sentences``, side
    by side, coloured by word count (viridis: dark = short) on a shared colour bar.

    ``random_state=seed`` makes UMAP single-threaded and deterministic. With fewer than
    ``n_neighbors + 2`` sentences, ``n_neighbors`` drops to ``len(sentences) - 2`` (at least 2).
    CSV: ``model, sentence, word_count, x, y``.
    """
    _numba_threads_as_torchs()
    import umap  # slow import (numba): only when this figure is drawn
    from matplotlib.colors import Normalize

    sentences = list(sentences)
    n = len(sentences)
    if n < 4 or not embeddings:
        raise ValueError(f"UMAP needs at least 4 sentences and 1 model (got {n} sentences)")
    if n < n_neighbors + 2:
        n_neighbors = max(2, n - 2)
    words = np.array([len(s.split()) for s in sentences])
    parts = []
    for name, emb in embeddings.items():
        reducer = umap.UMAP(n_components=2, metric="cosine", n_neighbors=n_neighbors, min_dist=min_dist,
                            random_state=seed, n_jobs=1)
        xy = reducer.fit_transform(_unit_rows(emb, n, name))
        parts.append(pd.DataFrame({"model": name, "sentence": sentences, "word_count": words,
                                   "x": xy[:, 0], "y": xy[:, 1]}))
    df = pd.concat(parts, ignore_index=True)
    norm = Normalize(words.min(), max(words.max(), words.min() + 1))
    fig = new_figure(figsize=(4.5 * len(embeddings) + 1, 4.5), layout="constrained")
    axes = fig.subplots(1, len(embeddings), squeeze=False)[0]
    point = float(np.clip(3000 / n, 2, 30))
    for ax, (name, rows) in zip(axes, df.groupby("model", sort=False)):
        sc = ax.scatter(rows["x"], rows["y"], c=rows["word_count"], cmap="viridis", norm=norm, s=point,
                        alpha=0.8, linewidths=0)
        ax.set_title(name, fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_aspect("equal", adjustable="datalim")
    fig.colorbar(sc, ax=list(axes), shrink=0.8, label="words per sentence")
    fig.suptitle(title or f"UMAP of sentence embeddings ({n} sentences, cosine, n_neighbors={n_neighbors})",
                 fontsize=11)
    return save_figure(fig, df, out_png, out_csv)


# -- the kinds -----------------------------------------------------------------------------------

_MAX_STEP_DOC = "the last training step drawn"


@settings
class AlignmentUniformityOptions:
    max_step: int = setting(500, doc=_MAX_STEP_DOC, minimum=1)


@settings
class DevCurveOptions:
    max_step: int = setting(1000, doc=_MAX_STEP_DOC, minimum=1)


@settings
class SimilarityHeatmapOptions:
    sentences: list[str] | None = setting(None, doc="the sentences compared (default: CompCSE's examples)",
                                          minItems=2, items={"minLength": 1})


@settings
class UmapOptions:
    seed: int = setting(42, doc="UMAP's random_state", minimum=0)


@figure_kind("alignment_uniformity", reads="curve", trained=True, options=AlignmentUniformityOptions)
def draw_alignment_uniformity(inputs: FigureInputs, options: AlignmentUniformityOptions, out: Out):
    """CompCSE Figure 2 from the training curves (alignment and uniformity on STS-B dev)."""
    return figure_alignment_uniformity(inputs.curves(), max_step=options.max_step, **out.kwargs())


@figure_kind("dev_curve", reads="curve", trained=True, options=DevCurveOptions)
def draw_dev_curve(inputs: FigureInputs, options: DevCurveOptions, out: Out):
    """CompCSE Figure 3: STS-B dev during training, from the training curves."""
    return figure_dev_curve(inputs.curves(), max_step=options.max_step, **out.kwargs())


@figure_kind("similarity_heatmap", reads="model", options=SimilarityHeatmapOptions)
def draw_similarity_heatmap(inputs: FigureInputs, options: SimilarityHeatmapOptions, out: Out):
    """CompCSE Figure 4 (and DiffCSE's beside it): cosines of the example sentences per model."""
    encoders = {label: m.encode_fn(f"{out.name}-sentences") for label, m in inputs.models().items()}
    sentences = None if options.sentences is None else list(options.sentences)
    return figure_similarity_heatmap(encoders, sentences=sentences, **out.kwargs())


@figure_kind("umap", reads="model", options=UmapOptions)
def draw_umap(inputs: FigureInputs, options: UmapOptions, out: Out):
    """CompCSE Figure 5: UMAP of the STS-B dev sentences (the encoding STS-B dev evaluation cached)."""
    from cselab.data.tasks import stsb_dev

    dev = stsb_dev(inputs.senteval)
    sentences = list(dict.fromkeys([*dev.sent1, *dev.sent2]))
    embeddings = {label: m.encode_fn("stsb-dev")(sentences) for label, m in inputs.models().items()}
    return figure_umap(embeddings, sentences, seed=options.seed, **out.kwargs())
