"""Snakemake script of rule protocol_table: the job cselab.pipeline.jobs.report.protocol_table; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.report import protocol_table

main(snakemake, protocol_table)  # noqa: F821 (injected by Snakemake)
