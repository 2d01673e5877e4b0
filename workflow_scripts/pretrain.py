"""Snakemake script of rule pretrain: the job cselab.pipeline.jobs.train.pretrain; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.train import pretrain

main(snakemake, pretrain)  # noqa: F821 (injected by Snakemake)
