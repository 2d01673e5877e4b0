"""Snakemake script: runs cselab.workflow.prepare_stsb_retrieval; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.workflow import main

main(snakemake, "prepare_stsb_retrieval")  # noqa: F821 (injected by Snakemake)
