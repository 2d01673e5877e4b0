"""Snakemake script of rule prepare_beir: the job cselab.pipeline.jobs.data.prepare_beir; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.data import prepare_beir

main(snakemake, prepare_beir)  # noqa: F821 (injected by Snakemake)
