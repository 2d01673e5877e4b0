"""Snakemake script of rule seed_power: the job cselab.pipeline.jobs.report.seed_power; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.report import seed_power

main(snakemake, seed_power)  # noqa: F821 (injected by Snakemake)
