"""Rule cost_plan's job (:mod:`cselab.pipeline.cost`): no torch, no MLflow run (a plan, not a result)."""

from __future__ import annotations


def cost_plan(smk) -> None:
    """The cost plan of ``cost_plan.targets``: Snakemake's dry run of them on this config, each job
    priced from its size and the device's rates table (``smk.input.rates``)."""
    from cselab.pipeline.cost import write_cost_plan

    write_cost_plan(smk.params.cfg, smk.cselab_operations.config, smk.input.rates, list(smk.params.snakemake),
                    smk.params.snakefile, smk.output.csv, smk.output.md)
