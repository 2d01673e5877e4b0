"""Snakemake script of rule prepare_senteval: the job cselab.pipeline.jobs.data.prepare_senteval; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.data import prepare_senteval

main(snakemake, prepare_senteval)  # noqa: F821 (injected by Snakemake)
