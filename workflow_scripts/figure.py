"""Snakemake script of rule figure: the job cselab.pipeline.jobs.report.figure; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.report import figure

main(snakemake, figure)  # noqa: F821 (injected by Snakemake)
