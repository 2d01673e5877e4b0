"""Snakemake script of rule prepare_corpus: the job cselab.pipeline.jobs.data.prepare_corpus; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.data import prepare_corpus

main(snakemake, prepare_corpus)  # noqa: F821 (injected by Snakemake)
