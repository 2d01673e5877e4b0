"""Jobs of the reporting rules: a table (CSV + markdown, the papers' numbers beside ours) and a
figure (PNG + the CSV it was drawn from), each through its kind's declaration in
:mod:`cselab.reporting`."""

from __future__ import annotations

from pathlib import Path

from cselab.pipeline import outputs
from cselab.data.integrity import verify_senteval_inputs
from cselab.evaluation.records import record_result
from cselab.pipeline.jobs import encoder_settings, run
from cselab.settings import from_dict, to_plain
from cselab.settings.entries import Figure, Table
from cselab.settings.evaluation import Bootstrap, Protocols, SeedPower


def _entry(cls: type, named: dict, where: str):
    """``(name, typed entry)`` of a rule's ``{"name": ..., **<the config's entry>}`` param."""
    name = named["name"]
    return name, from_dict(cls, {k: v for k, v in named.items() if k != "name"}, where=f"{where}.{name}")



def table(smk) -> None:
    from cselab.reporting import tables

    (name, spec), columns = _entry(Table, smk.params.table, "tables"), smk.params.columns
    with run(smk, params={"table": name, "kind": spec.kind, "experiments": to_plain(spec.experiments)},
             label=name) as r:
        rows = tables.read_results(smk.params.rows)
        extras = list(spec.extra_columns)
        df, comparisons = tables.build_table(spec.kind, rows, columns, [tuple(s) for s in spec.sources],
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
        tables.write(df, columns, smk.output.csv, smk.output.md, name if spec.title is None else spec.title,
                     tables.TABLE_KINDS[spec.kind].digits, comparisons,
                     [*spec.notes, *tables.collapse_notes(rows), *tables.subset_notes(rows)], extras)
        for path in (smk.output.csv, smk.output.md):  # planning checks a built table against them
            record_result(path, "table")
        r.log_artifact(smk.output.csv)
        r.log_artifact(smk.output.md)


def leakage_audit(smk) -> None:
    """The leakage audit (:mod:`cselab.evaluation.leakage`): one row per (training corpus,
    evaluation set), written as a table; the largest shares are the run's metrics."""
    from cselab.evaluation.leakage import audit, evaluation_sets
    from cselab.reporting.tables import write_leakage

    corpora, n = smk.params.corpora, smk.params.ngram
    with run(smk, params={"ngram": n, "corpora": corpora, "beir": sorted(smk.params.beir)},
             label="table_leakage") as r:
        sets = evaluation_sets(verify_senteval_inputs(smk.input), {d: Path(p) for d, p in smk.params.beir.items()})
        rows = audit({label: Path(path) for label, path in corpora.items()}, sets, n)
        write_leakage(rows, Path(smk.output.csv), Path(smk.output.md), n)
        for label in corpora:
            mine = [row for row in rows if row["corpus"] == label]
            r.log_metrics({f"{label}.max_exact_pct": max(row["exact_pct"] for row in mine),
                           f"{label}.max_ngram_pct": max(row["ngram_pct"] for row in mine)})
        r.log_artifact(smk.output.csv)
        r.log_artifact(smk.output.md)


def seed_power(smk) -> None:
    """The seed planner (:mod:`cselab.reporting.power`): variance components and detectable
    differences from the runs of ``evaluation.seed_power.table``."""
    from cselab.reporting.power import plan, write_seed_power
    from cselab.reporting.stats import load_pairs

    opts = from_dict(SeedPower, smk.params.options, where="evaluation.seed_power")
    boot = from_dict(Bootstrap, smk.params.bootstrap, where="evaluation.bootstrap")
    with run(smk, params={"seed_power": smk.params.options, "baseline": smk.params.baseline}, label="seed_power") as r:
        experiments = {name: {m: [load_pairs(f) for f in files] for m, files in by_metric.items()}
                       for name, by_metric in smk.params.inputs.items()}
        differences = list(opts.differences)
        rows = plan(experiments, smk.params.baseline, list(opts.metrics), opts.max_seeds, differences,
                    power=opts.power, n_boot=boot.n_boot, seed=boot.seed)
        write_seed_power(rows, smk.output.csv, smk.output.md, smk.output.png, opts.max_seeds, differences, opts.power)
        for row in rows:
            r.log_metrics({f"{row['experiment']}.{row['metric']}.seed_std": row["seed_std"],
                           f"{row['experiment']}.{row['metric']}.mde_3": row["mde_3"]})
        for out in (smk.output.csv, smk.output.md, smk.output.png):
            r.log_artifact(out)


def protocol_table(smk) -> None:
    """Protocol sensitivity (:mod:`cselab.evaluation.protocols`): every checkpoint of
    ``evaluation.protocols.table`` under every protocol, one forward per sentence and truncation."""
    from cselab.evaluation.protocols import checkpoint_protocols, spread
    from cselab.models.checkpoints import model_path
    from cselab.reporting.tables import write_protocols

    opts = from_dict(Protocols, smk.params.options, where="evaluation.protocols")
    root = verify_senteval_inputs(smk.input)
    with run(smk, params={"protocols": smk.params.options}, label="table_protocols") as r:
        rows = []
        for exp_id, model in smk.params.checkpoints.items():
            mine = checkpoint_protocols(model_path(model), root, [None, opts.truncation],
                                        smk.cselab_operations.encoding["batch_size"])
            summary = spread(mine)
            rows += [{"experiment": exp_id, **row, **summary} for row in mine]
            r.log_metrics({f"{exp_id}.spread": summary["spread"], f"{exp_id}.papers_avg": summary["papers_avg"]})
        write_protocols(rows, Path(smk.output.csv), Path(smk.output.md))
        r.log_artifact(smk.output.csv)
        r.log_artifact(smk.output.md)


def figure(smk) -> None:
    """A figure (config ``figures``): its kind's draw function on the inputs the kind reads; the
    PNG plus the CSV it was drawn from."""
    from cselab.reporting.kinds import FigureInputs, Out, figure_kinds

    fig, entries = smk.params.figure, smk.params.labels
    name, spec = _entry(Figure, fig, "figures")
    kind = figure_kinds()[spec.kind]
    inputs = FigureInputs(
        labels={label: exp_id for label, exp_id, _ in entries},
        files={label: {read: Path(smk.input[f"{key}_{read}"]) for read in kind.reads} for label, _, key in entries},
        settings=encoder_settings(smk), cache=Path(outputs.EMBEDDING_CACHE), senteval=verify_senteval_inputs(smk.input),
        heldout=Path(smk.input.heldout) if "heldout" in smk.input.keys() else None, values=smk.params.values)
    with run(smk, params={"figure": fig}, label=name) as r:
        kind.draw(inputs, kind.typed(fig, where=f"figures.{name}"), Out(Path(smk.output.png), Path(smk.output.csv), spec.title, name))
        for path in (smk.output.png, smk.output.csv):  # planning checks a built figure against them
            record_result(path, "figure")
        r.log_artifact(smk.output.png)
        r.log_artifact(smk.output.csv)
