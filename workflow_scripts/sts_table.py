"""Snakemake script for rule(s) running cselab.workflow.sts_table; all logic lives in the library."""
from cselab.workflow import main

main(snakemake, "sts_table")  # noqa: F821 (injected by Snakemake)
