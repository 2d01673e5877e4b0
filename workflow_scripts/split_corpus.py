"""Snakemake script: runs the split_corpus job of cselab.pipeline.jobs; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main

main(snakemake, "split_corpus")  # noqa: F821 (injected by Snakemake)
