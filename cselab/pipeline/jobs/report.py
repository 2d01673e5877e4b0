"""Jobs of the reporting rules: a table (CSV + markdown, the papers' numbers beside ours) and a
figure (PNG + the CSV it was drawn from)."""

from __future__ import annotations

import json
from pathlib import Path

from cselab.pipeline import outputs
from cselab.pipeline.jobs import run, senteval_root

JOBS = ("table", "figure")


def table(smk) -> None:
    from cselab.reporting import tables

    spec, columns = smk.params.table, smk.params.columns
    with run(smk, params={"table": spec["name"], "kind": spec["kind"], "experiments": spec["experiments"]},
             label=spec["name"]) as r:
        rows = tables.read_results(smk.params.rows)
        extras = spec.get("extra_columns", [])
        df, comparisons = tables.build_table(spec["kind"], rows, columns, [tuple(s) for s in spec.get("sources", [])],
                                             smk.params.bootstrap, extras)
        for c in comparisons:
            if f"{c.prefix}diff" in df:
                for _, row in df[df["baseline"].notna()].iterrows():
                    r.log_metrics({f"{row['experiment']}.{c.prefix}diff_vs_baseline": row[f"{c.prefix}diff"],
                                   f"{row['experiment']}.{c.prefix}diff_ci_low": row[f"{c.prefix}diff_ci_low"],
                                   f"{row['experiment']}.{c.prefix}diff_ci_high": row[f"{c.prefix}diff_ci_high"]})
        if "Avg" in df:
            for _, row in df.iterrows():
                r.log_metrics({f"{row['experiment']}.avg": row["Avg"]})
        tables.write(df, columns, smk.output.csv, smk.output.md, spec.get("title", spec["name"]),
                     smk.params.digits, comparisons, spec.get("notes", []), extras)
        r.log_artifact(smk.output.csv)
        r.log_artifact(smk.output.md)


def figure(smk) -> None:
    """A figure (config ``figures``): PNG plus the CSV it was drawn from."""
    fig, entries = smk.params.figure, smk.params.labels
    with run(smk, params={"figure": fig}, label=fig["name"]) as r:
        out = {"out_png": smk.output.png, "out_csv": smk.output.csv, "title": fig.get("title")}
        DRAW[fig["kind"]](smk, fig, entries, out)
        r.log_artifact(smk.output.png)
        r.log_artifact(smk.output.csv)


def _curves(smk, entries):
    import pandas as pd

    return {label: pd.read_csv(smk.input[key]) for label, _, key in entries}


def _models(smk, entries):
    from cselab.evaluation.encoding import ModelEncoder
    from cselab.pipeline.jobs.evaluate import model_dir

    return {label: ModelEncoder(model_dir(smk.input[key]), smk.params.settings, Path(outputs.EMBEDDING_CACHE))
            for label, _, key in entries}


def _curve_figure(smk, fig, entries, out):
    from cselab.reporting import figures

    if fig["kind"] == "alignment_uniformity":
        figures.figure_alignment_uniformity(_curves(smk, entries), max_step=fig.get("max_step", 500), **out)
    else:
        figures.figure_dev_curve(_curves(smk, entries), max_step=fig.get("max_step", 1000), **out)


def _heatmap(smk, fig, entries, out):
    from cselab.reporting import figures

    encoders = {label: m.encode_fn(f"{fig['name']}-sentences") for label, m in _models(smk, entries).items()}
    figures.figure_similarity_heatmap(encoders, sentences=fig.get("sentences"), **out)


def _umap(smk, fig, entries, out):
    from cselab.data.tasks import stsb_dev
    from cselab.reporting import figures

    dev = stsb_dev(senteval_root(smk.input.senteval))
    sentences = list(dict.fromkeys([*dev.sent1, *dev.sent2]))  # the STS-B dev encoding evaluate_stsb_dev cached
    embeddings = {label: m.encode_fn("stsb-dev")(sentences) for label, m in _models(smk, entries).items()}
    figures.figure_umap(embeddings, sentences, seed=fig.get("seed", 42), **out)


def _simulation(smk, fig, entries, out):
    from cselab.reporting import paradigm

    grid = {"points": fig.get("points", 100)}
    if fig["kind"] == "gradient_dissipation":
        paradigm.figure_gd(losses=fig.get("losses", paradigm.GD_LOSSES), n_batches=fig.get("batches", 1000),
                           seed=fig.get("seed", 0), **grid, **out)
    elif fig["kind"] == "gradient_weight":
        paradigm.figure_weight(temperatures=fig.get("temperatures", paradigm.WEIGHT_TEMPERATURES),
                               n_batches=fig.get("batches", 1000), seed=fig.get("seed", 0), **grid, **out)
    else:
        paradigm.figure_ratio(**grid, **out)


def _sweep(smk, fig, entries, out):
    from cselab.reporting import paradigm

    scores = {label: json.loads(Path(smk.input[key]).read_text())["scores"]["STS-B dev"] for label, _, key in entries}
    values = smk.params.values
    paradigm.figure_sweep({values[label]: scores[label] for label in scores}, fig.get("parameter", "m"), **out)


def _curve_beside_model(model: str, exp_id: str):
    """The training curve an experiment's checkpoint was trained with: ``<experiment dir>/curve.csv``
    beside ``<experiment dir>/model`` (:data:`outputs.CURVE`, :data:`outputs.MODEL`; rule train
    writes both, so the checkpoint as the figure's input brings the curve along)."""
    import pandas as pd

    from cselab.errors import DataError

    curve = Path(model).parent / Path(outputs.CURVE).name
    if not curve.is_file():
        raise DataError(f"{curve} is missing beside the checkpoint {model} of {exp_id}: retrain {exp_id} "
                        f"(delete {Path(model).parent} and rerun the figure)")
    return pd.read_csv(curve)


def _training_ratio(smk, fig, entries, out):
    """Figure 8: the kind reads ``model`` (config ``figure_inputs`` gives one input per experiment:
    the checkpoint, for panel (a) on the held-out slice) and each experiment's training curve is
    the file beside it (panels (b) and (c)). Options: ``margins`` (default [0.3]) and
    ``step_sizes`` (default [0.1]) of Lemma 1, ``max_sentences`` (10,000) held-out sentences in
    batches of ``batch_size`` (128)."""
    from cselab.reporting import paradigm

    experiments = {label: exp_id for label, exp_id, _ in entries}
    curves = {label: _curve_beside_model(smk.input[key], exp_id) for label, exp_id, key in entries}
    paradigm.require_curve_columns(curves, paradigm.TRAINING_RATIO_COLUMNS, "Figure 8", experiments)
    sentences = _heldout_sentences(smk, fig)
    margins = fig.get("margins", list(paradigm.LEMMA1_MARGINS))
    steps = fig.get("step_sizes", list(paradigm.LEMMA1_STEP_SIZES))
    batch_size = fig.get("batch_size", 128)
    min_ratios = {label: paradigm.heldout_min_ratios(paradigm.dropout_pairs(m.encoder, sentences, batch_size),
                                                     margins, steps)
                  for label, m in _models(smk, entries).items()}
    paradigm.figure_training_ratio(curves, min_ratios, experiments=experiments, **out)


def _angle_statistics(smk, fig, entries, out):
    """Figure 9: the positive and negative angles' means and deviations from the training curves."""
    from cselab.reporting import paradigm

    paradigm.figure_angle_statistics(_curves(smk, entries), experiments={label: e for label, e, _ in entries},
                                     **out)


def _heldout_sentences(smk, fig):
    from cselab.data.corpus import read_sentences

    return read_sentences(Path(smk.input.heldout))[: fig.get("max_sentences", 10000)]


def _heldout(smk, fig, entries, out):
    from cselab.reporting import paradigm

    sentences = _heldout_sentences(smk, fig)
    stats = {label: paradigm.heldout_statistics(paradigm.dropout_pairs(m.encoder, sentences))
             for label, m in _models(smk, entries).items()}
    paradigm.figure_heldout(stats, **out)


def _stsb_test(smk):
    """STS-B test pairs and their distinct sentences (one cached encoding per model)."""
    from cselab.data.tasks import load_stsb

    test = load_stsb(senteval_root(smk.input.senteval), "test")
    return test, list(dict.fromkeys([*test.sent1, *test.sent2]))


def _by_rating(smk, fig, entries, out):
    import numpy as np

    from cselab.reporting import diffcse

    test, sentences = _stsb_test(smk)
    index = {s: i for i, s in enumerate(sentences)}
    sims = {}
    for label, m in _models(smk, entries).items():
        e = m.encode_fn("stsb-test")(sentences).astype(np.float64)
        e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
        a, b = e[[index[s] for s in test.sent1]], e[[index[s] for s in test.sent2]]
        # a pair of (near-)identical sentences rounds to 1 + 1e-16: a cosine stays in [-1, 1]
        sims[label] = (np.clip((a * b).sum(1), -1.0, 1.0), test.gold)
    diffcse.figure_similarity_by_rating(sims, **out)


def _retrieval_examples(smk, fig, entries, out):
    from cselab.reporting import diffcse
    from cselab.reporting.published import retrieval_examples

    _, corpus = _stsb_test(smk)
    printed = retrieval_examples("diffcse")
    queries = fig.get("queries") or [e["query"] for e in printed]
    embeddings = {label: (m.encode_fn("stsb-test")(corpus), m.encode_fn(f"{fig['name']}-queries")(queries))
                  for label, m in _models(smk, entries).items()}
    df = diffcse.retrieval_examples(embeddings, corpus, queries, k=fig.get("k", 3),
                                    printed=[e for e in printed if e["query"] in queries])
    diffcse.figure_retrieval_examples(df, **out)


DRAW = {"alignment_uniformity": _curve_figure, "dev_curve": _curve_figure, "similarity_heatmap": _heatmap,
        "umap": _umap, "gradient_dissipation": _simulation, "gradient_weight": _simulation,
        "gradient_ratio": _simulation, "component_sweep": _sweep, "training_ratio": _training_ratio,
        "heldout_statistics": _heldout, "angle_statistics": _angle_statistics, "similarity_by_rating": _by_rating,
        "retrieval_examples": _retrieval_examples}
