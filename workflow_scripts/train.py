"""Snakemake script of rule train: the job cselab.pipeline.jobs.train.train; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.train import train

main(snakemake, train)  # noqa: F821 (injected by Snakemake)
