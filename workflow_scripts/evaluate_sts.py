"""Snakemake script for rule(s) running cselab.workflow.evaluate_sts; all logic lives in the library."""
from cselab.workflow import main

main(snakemake, "evaluate_sts")  # noqa: F821 (injected by Snakemake)
