"""Snakemake script of rule sweep: the job cselab.pipeline.jobs.sweep.sweep; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.sweep import sweep

main(snakemake, sweep)  # noqa: F821 (injected by Snakemake)
