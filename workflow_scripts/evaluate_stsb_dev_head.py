"""Snakemake script: runs the evaluate_stsb_dev_head job of cselab.pipeline.jobs; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main

main(snakemake, "evaluate_stsb_dev_head")  # noqa: F821 (injected by Snakemake)
