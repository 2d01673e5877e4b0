"""Snakemake script of rule split_corpus: the job cselab.pipeline.jobs.data.split_corpus; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.data import split_corpus

main(snakemake, split_corpus)  # noqa: F821 (injected by Snakemake)
