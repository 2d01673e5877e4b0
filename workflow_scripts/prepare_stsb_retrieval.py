"""Snakemake script of rule prepare_stsb_retrieval: the job cselab.pipeline.jobs.data.prepare_stsb_retrieval; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.data import prepare_stsb_retrieval

main(snakemake, prepare_stsb_retrieval)  # noqa: F821 (injected by Snakemake)
