"""Snakemake script: runs cselab.workflow.train; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.workflow import main

main(snakemake, "train")  # noqa: F821 (injected by Snakemake)
