"""Snakemake script of every evaluate_* rule: the job cselab.pipeline.jobs.evaluate.evaluate; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.evaluate import evaluate

main(snakemake, evaluate)  # noqa: F821 (injected by Snakemake)
