"""Snakemake script: runs cselab.workflow.sts_table; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.workflow import main

main(snakemake, "sts_table")  # noqa: F821 (injected by Snakemake)
