"""Snakemake script: runs cselab.workflow.subsample; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.workflow import main

main(snakemake, "subsample")  # noqa: F821 (injected by Snakemake)
