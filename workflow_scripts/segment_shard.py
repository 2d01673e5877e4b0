"""Snakemake script of rule segment_shard: the job cselab.pipeline.jobs.data.segment_shard; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.data import segment_shard

main(snakemake, segment_shard)  # noqa: F821 (injected by Snakemake)
