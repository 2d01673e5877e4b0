"""Snakemake script of rule resolve_plm: the job cselab.pipeline.jobs.data.resolve_plm; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.data import resolve_plm

main(snakemake, resolve_plm)  # noqa: F821 (injected by Snakemake)
