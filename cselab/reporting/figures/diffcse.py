"""DiffCSE's qualitative outputs: Figure 2 (cosine similarities of STS-B test pairs grouped by
their human rating) and Table 9 (the top-3 STS-B test sentences retrieved for three queries),
each model beside the others and the paper's printed lists beside ours."""

from __future__ import annotations

import textwrap
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from cselab.reporting.figures import label_axes, new_figure, save_figure
from cselab.reporting.kinds import FigureInputs, NoOptions, Out, figure_kind
from cselab.settings.base import setting, settings

#: the five rating groups of DiffCSE Figure 2: [0, 1), [1, 2), [2, 3), [3, 4), [4, 5]
RATING_GROUPS = ("0-1", "1-2", "2-3", "3-4", "4-5")


def rating_group(gold: np.ndarray) -> np.ndarray:
    return np.clip(np.floor(np.asarray(gold, dtype=float)), 0, 4).astype(int)


def figure_similarity_by_rating(sims: Mapping[str, tuple[np.ndarray, np.ndarray]], out_png, out_csv,
                                title: str | None = None) -> pd.DataFrame:
    """Figure 2: per model (``label -> (cosines, gold ratings)`` of the STS-B test pairs) the
    distribution of cosine similarity in each rating group, side by side (box plots)."""
    frames = [pd.DataFrame({"model": label, "group": [RATING_GROUPS[g] for g in rating_group(gold)],
                            "gold": gold, "cosine": cos}) for label, (cos, gold) in sims.items()]
    df = pd.concat(frames, ignore_index=True)
    fig = new_figure(figsize=(7.5, 3.8))
    ax = fig.add_subplot(1, 1, 1)
    n = len(sims)
    width = 0.8 / n
    for k, label in enumerate(sims):
        rows = df[df["model"] == label]
        data = [rows.loc[rows["group"] == g, "cosine"].to_numpy() for g in RATING_GROUPS]
        positions = [i + (k - (n - 1) / 2) * width for i in range(len(RATING_GROUPS))]
        keep = [i for i, d in enumerate(data) if len(d)]
        box = ax.boxplot([data[i] for i in keep], positions=[positions[i] for i in keep], widths=width * 0.9,
                         patch_artist=True, showfliers=False)
        for patch in box["boxes"]:
            patch.set_facecolor(f"C{k}")
            patch.set_alpha(0.6)
        ax.plot([], [], color=f"C{k}", lw=6, alpha=0.6, label=label)
    ax.set_xticks(range(len(RATING_GROUPS)), RATING_GROUPS)
    label_axes(ax, "human rating (STS-B test)", "cosine similarity", title)
    return save_figure(fig, df, out_png, out_csv)


def retrieval_examples(embeddings: Mapping[str, tuple[np.ndarray, np.ndarray]], corpus: Sequence[str],
                       queries: Sequence[str], k: int = 3, printed: Sequence[dict] = ()) -> pd.DataFrame:
    """Table 9: for each query, each model's top-``k`` corpus sentences by cosine (the query
    itself excluded). ``embeddings``: ``label -> (corpus embeddings, query embeddings)``;
    ``printed``: the paper's lists (``{query, <method>: [...]}``), added as ``paper: <method>``."""
    rows = []
    for label, (c, q) in embeddings.items():
        c = c / np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-12)
        q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
        sims = q @ c.T
        for i, query in enumerate(queries):
            order = [j for j in np.argsort(-sims[i], kind="stable") if corpus[j] != query][:k]
            rows += [{"query": query, "model": label, "rank": r + 1, "sentence": corpus[j],
                      "cosine": round(float(sims[i, j]), 4)} for r, j in enumerate(order)]
    for entry in printed:
        for method, sentences in entry.items():
            if method == "query":
                continue
            rows += [{"query": entry["query"], "model": f"paper: {method}", "rank": r + 1, "sentence": s,
                      "cosine": None} for r, s in enumerate(sentences[:k])]
    return pd.DataFrame(rows)


def figure_retrieval_examples(df: pd.DataFrame, out_png, out_csv, title: str | None = None) -> pd.DataFrame:
    """Table 9 rendered as text: one block per query, one column per model."""
    queries = list(dict.fromkeys(df["query"]))
    models = list(dict.fromkeys(df["model"]))
    fig = new_figure(figsize=(3.6 * len(models) + 0.5, 1.3 + 1.4 * len(queries)))
    ax = fig.add_subplot(1, 1, 1)
    ax.axis("off")
    y = 1.0
    step = 1.0 / (len(queries) * 5 + 1)
    for query in queries:
        ax.text(0.0, y, f"query: {query}", fontsize=8, weight="bold", va="top", transform=ax.transAxes)
        y -= step
        for m, model in enumerate(models):
            rows = df[(df["query"] == query) & (df["model"] == model)].sort_values("rank")
            lines = [model] + [textwrap.shorten(f"{r['rank']}. {r['sentence']}", 60) for _, r in rows.iterrows()]
            ax.text(m / len(models), y, "\n".join(lines), fontsize=7, va="top", transform=ax.transAxes)
        y -= 4 * step
    if title:
        fig.suptitle(title, fontsize=9)
    return save_figure(fig, df, out_png, out_csv)


# -- the kinds -----------------------------------------------------------------------------------


def _stsb_test(senteval):
    """STS-B test pairs and their distinct sentences (one cached encoding per model)."""
    from cselab.data.tasks import load_stsb

    test = load_stsb(senteval, "test")
    return test, list(dict.fromkeys([*test.sent1, *test.sent2]))


@figure_kind("similarity_by_rating", reads="model")
def draw_similarity_by_rating(inputs: FigureInputs, options: NoOptions, out: Out):
    """DiffCSE Figure 2: each model's cosine of the STS-B test pairs, grouped by human rating."""
    test, sentences = _stsb_test(inputs.senteval)
    index = {s: i for i, s in enumerate(sentences)}
    sims = {}
    for label, m in inputs.models().items():
        e = m.encode_fn("stsb-test")(sentences).astype(np.float64)
        e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
        a, b = e[[index[s] for s in test.sent1]], e[[index[s] for s in test.sent2]]
        # a pair of (near-)identical sentences rounds to 1 + 1e-16: a cosine stays in [-1, 1]
        sims[label] = (np.clip((a * b).sum(1), -1.0, 1.0), test.gold)
    return figure_similarity_by_rating(sims, **out.kwargs())


@settings
class RetrievalExamplesOptions:
    queries: list[str] | None = setting(None, doc="the queries (default: the paper's three, DiffCSE Table 9)",
                                        minItems=1, items={"minLength": 1})
    k: int = setting(3, doc="sentences retrieved per query", minimum=1)


@figure_kind("retrieval_examples", reads="model", options=RetrievalExamplesOptions)
def draw_retrieval_examples(inputs: FigureInputs, options: RetrievalExamplesOptions, out: Out):
    """DiffCSE Table 9 as a figure: the top-k STS-B test sentences per query, the paper's beside."""
    from cselab.reporting.published import retrieval_examples as printed_examples

    _, corpus = _stsb_test(inputs.senteval)
    printed = printed_examples("diffcse")
    queries = list(options.queries or ()) or [e["query"] for e in printed]
    embeddings = {label: (m.encode_fn("stsb-test")(corpus), m.encode_fn(f"{out.name}-queries")(queries))
                  for label, m in inputs.models().items()}
    df = retrieval_examples(embeddings, corpus, queries, k=options.k,
                            printed=[e for e in printed if e["query"] in queries])
    return figure_retrieval_examples(df, **out.kwargs())
