"""Snakemake script for rule(s) running cselab.workflow.prepare_senteval; all logic lives in the library."""
from cselab.workflow import main

main(snakemake, "prepare_senteval")  # noqa: F821 (injected by Snakemake)
