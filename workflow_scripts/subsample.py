"""Snakemake script of rule subsample: the job cselab.pipeline.jobs.data.subsample; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.data import subsample

main(snakemake, subsample)  # noqa: F821 (injected by Snakemake)
