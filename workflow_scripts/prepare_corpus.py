"""Snakemake script for rule(s) running cselab.workflow.prepare_corpus; all logic lives in the library."""
from cselab.workflow import main

main(snakemake, "prepare_corpus")  # noqa: F821 (injected by Snakemake)
