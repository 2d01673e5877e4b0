"""Snakemake script of rule senteval_reads: the job cselab.pipeline.jobs.data.senteval_reads; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.data import senteval_reads

main(snakemake, senteval_reads)  # noqa: F821 (injected by Snakemake)
