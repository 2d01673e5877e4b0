"""Snakemake script: runs cselab.workflow.segment_corpus; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.workflow import main

main(snakemake, "segment_corpus")  # noqa: F821 (injected by Snakemake)
