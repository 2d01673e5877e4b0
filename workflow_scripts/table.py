"""Snakemake script of rule table: the job cselab.pipeline.jobs.report.table; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.report import table

main(snakemake, table)  # noqa: F821 (injected by Snakemake)
