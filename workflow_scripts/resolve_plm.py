"""Snakemake script: runs the resolve_plm job of cselab.pipeline.jobs; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main

main(snakemake, "resolve_plm")  # noqa: F821 (injected by Snakemake)
