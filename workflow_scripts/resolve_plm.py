"""Snakemake script for rule(s) running cselab.workflow.resolve_plm; all logic lives in the library."""
from cselab.workflow import main

main(snakemake, "resolve_plm")  # noqa: F821 (injected by Snakemake)
