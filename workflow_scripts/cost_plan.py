"""Snakemake script of rule cost_plan: the job cselab.pipeline.jobs.cost.cost_plan; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.cost import cost_plan

main(snakemake, cost_plan)  # noqa: F821 (injected by Snakemake)
