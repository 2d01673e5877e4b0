# CompCSE subsampling: clause-level units of every training sentence, segmented in spans.shards
# jobs of one spaCy process each (segment_shard, temporary files) and gathered in corpus order
# into one cached file (segment_corpus: the same bytes for any shard count); then one expanded
# training file per strategy. Only experiments with training.subsampling read them.
# Both segmentation rules' params are what decides the spans' bytes only (not n_process, shards
# or min_words), so changing an operational setting reruns nothing (a shard job runs n_process =
# its threads); a new shard count does change segment_corpus's inputs (docs/methods.md).

from cselab.data.span_shards import shard_names
from cselab.settings import spans_settings

SPAN_SHARDS = shard_names(spans_settings(SPANS).shards)


rule segment_shard:
    input:
        corpus=rules.prepare_corpus.output.corpus,
    output:
        spans=temp(OUT.SPANS_SHARD),
        record=temp(OUT.SPANS_SHARD_RECORD),
    params:
        **JOBS.rule_params("segment_shard", CFG, per_job=False),
    wildcard_constraints:
        shard="[0-9]+-of-[0-9]+",
    log:
        OUT.job_log("segment_shard", "{shard}"),
    benchmark:
        OUT.job_benchmark("segment_shard", "{shard}")
    threads: SPANS.get("n_process", 1)
    resources:
        mem_mb=2000 + 1000 * SPANS.get("n_process", 1),
        runtime=30 + 12 * 60 // len(SPAN_SHARDS),
    conda:
        "../envs/spans.yaml"
    script:
        "../workflow_scripts/segment_shard.py"


rule segment_corpus:
    input:
        corpus=rules.prepare_corpus.output.corpus,
        spans=expand(OUT.SPANS_SHARD, shard=SPAN_SHARDS),
        records=expand(OUT.SPANS_SHARD_RECORD, shard=SPAN_SHARDS),
    output:
        spans=OUT.SPANS,
        stats=OUT.SPANS_STATS,
    params:
        **JOBS.rule_params("segment_corpus", CFG, per_job=False),
    log:
        OUT.job_log("segment_corpus"),
    benchmark:
        OUT.job_benchmark("segment_corpus")
    resources:
        mem_mb=2000,
        runtime=60,
    conda:
        "../envs/spans.yaml"
    script:
        "../workflow_scripts/segment_corpus.py"


rule subsample:
    input:
        spans=rules.segment_corpus.output.spans,
    output:
        corpus=OUT.SUBSAMPLED,
        stats=OUT.SUBSAMPLED_STATS,
    params:
        **JOBS.rule_params("subsample", CFG, per_job=False),
    log:
        OUT.job_log("subsample", "{strategy}"),
    benchmark:
        OUT.job_benchmark("subsample", "{strategy}")
    resources:
        mem_mb=8000,
        runtime=60,
    conda:
        "../envs/spans.yaml"
    script:
        "../workflow_scripts/subsample.py"
