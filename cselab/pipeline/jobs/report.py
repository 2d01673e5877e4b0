"""Jobs of the reporting rules: a table (CSV + markdown, the papers' numbers beside ours) and a
figure (PNG + the CSV it was drawn from)."""

from __future__ import annotations

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
        df, comparisons = tables.build_table(spec["kind"], rows, columns, [tuple(s) for s in spec.get("sources", [])],
                                             smk.params.bootstrap)
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
                     smk.params.digits, comparisons, spec.get("notes", []))
        r.log_artifact(smk.output.csv)
        r.log_artifact(smk.output.md)


def figure(smk) -> None:
    """CompCSE Figures 2-5 (config ``figures``): PNG plus the CSV it was drawn from."""
    import pandas as pd

    from cselab.pipeline.jobs.evaluate import model_dir
    from cselab.reporting import figures

    fig, entries = smk.params.figure, smk.params.labels
    kind = fig["kind"]
    with run(smk, params={"figure": fig}, label=fig["name"]) as r:
        out = {"out_png": smk.output.png, "out_csv": smk.output.csv, "title": fig.get("title")}
        if kind in ("alignment_uniformity", "dev_curve"):
            curves = {label: pd.read_csv(smk.input[key]) for label, _, key in entries}
            draw = figures.figure_alignment_uniformity if kind == "alignment_uniformity" else figures.figure_dev_curve
            draw(curves, max_step=fig.get("max_step", 500 if kind == "alignment_uniformity" else 1000), **out)
        else:
            from cselab.data.tasks import stsb_dev
            from cselab.evaluation.encoding import ModelEncoder

            models = {label: ModelEncoder(model_dir(smk.input[key]), smk.params.settings, Path(outputs.EMBEDDING_CACHE))
                      for label, _, key in entries}
            if kind == "similarity_heatmap":
                encoders = {label: m.encode_fn(f"{fig['name']}-sentences") for label, m in models.items()}
                figures.figure_similarity_heatmap(encoders, sentences=fig.get("sentences"), **out)
            else:  # the STS-B dev encoding the evaluate_stsb_dev job cached
                dev = stsb_dev(senteval_root(smk.input.senteval))
                sentences = list(dict.fromkeys([*dev.sent1, *dev.sent2]))
                embeddings = {label: m.encode_fn("stsb-dev")(sentences) for label, m in models.items()}
                figures.figure_umap(embeddings, sentences, seed=fig.get("seed", 42), **out)
        r.log_artifact(smk.output.png)
        r.log_artifact(smk.output.csv)
