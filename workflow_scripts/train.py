"""Snakemake script for rule(s) running cselab.workflow.train; all logic lives in the library."""
from cselab.workflow import main

main(snakemake, "train")  # noqa: F821 (injected by Snakemake)
