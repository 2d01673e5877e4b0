"""The job of rule sweep: a sweep's report (:mod:`cselab.reporting.sweeps`): its table (CSV,
markdown), its figure and the selected point's experiment entry, one MLflow run."""

from __future__ import annotations

from cselab.pipeline.jobs import run
from cselab.settings import from_dict
from cselab.settings.evaluation import Bootstrap, SeedPower


def sweep(smk) -> None:
    from cselab.reporting import sweeps

    spec = smk.params.sweep
    name, metric, seeds, grid = spec["name"], spec["metric"], spec["seeds"], spec["grid"]
    boot = from_dict(Bootstrap, smk.params.bootstrap, where="evaluation.bootstrap")
    planner = from_dict(SeedPower, smk.params.seed_power, where="evaluation.seed_power")
    with run(smk, params={"sweep": name, "metric": metric, "seeds": seeds, "grid": grid}, label=f"sweep_{name}") as r:
        points = [{**p, "runs": [sweeps.load_run(x["seed"], x["score"], x["pairs"], x["summary"]) for x in p["runs"]]}
                  for p in smk.params.points]
        df = sweeps.sweep_table(points, grid, metric, boot.n_boot, boot.confidence, boot.seed, planner.power)
        notes = sweeps.notes(df, metric, seeds, boot.n_boot, boot.confidence, planner.power)
        sweeps.write(df, grid, smk.output.csv, smk.output.md, smk.output.png, f"Sweep {name}", notes, metric)
        best = df[df["selected"]].iloc[0]
        point = next(p for p in points if p["experiment"] == best["experiment"])
        sweeps.write_best(smk.output.best, name, best["experiment"],
                          sweeps.best_entry(spec["entries"][best["experiment"]], seeds), point["values"], metric,
                          float(best["mean"]))
        r.set_tags({"cselab.sweep.selected": best["experiment"]})
        for row in df.to_dict("records"):
            r.log_metrics({f"{row['experiment']}.mean": row["mean"]})
        for out in (smk.output.csv, smk.output.md, smk.output.png, smk.output.best):
            r.log_artifact(out)
