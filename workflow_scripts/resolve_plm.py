"""Snakemake script: runs cselab.workflow.resolve_plm; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.workflow import main

main(snakemake, "resolve_plm")  # noqa: F821 (injected by Snakemake)
