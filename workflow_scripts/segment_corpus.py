"""Snakemake script of rule segment_corpus (gathers the segment_shard jobs): the job cselab.pipeline.jobs.data.segment_corpus; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.data import segment_corpus

main(snakemake, segment_corpus)  # noqa: F821 (injected by Snakemake)
