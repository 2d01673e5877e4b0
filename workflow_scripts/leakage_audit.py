"""Snakemake script of rule leakage_audit: the job cselab.pipeline.jobs.report.leakage_audit; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.report import leakage_audit

main(snakemake, leakage_audit)  # noqa: F821 (injected by Snakemake)
