"""Snakemake script: runs the evaluate_transfer_dev job of cselab.pipeline.jobs; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main

main(snakemake, "evaluate_transfer_dev")  # noqa: F821 (injected by Snakemake)
