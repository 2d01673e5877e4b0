"""Snakemake script: runs cselab.workflow.evaluate_stsb_dev; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.workflow import main

main(snakemake, "evaluate_stsb_dev")  # noqa: F821 (injected by Snakemake)
