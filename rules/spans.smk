# CompCSE subsampling: clause-level units of every training sentence (one cached rule), then
# one expanded training file per strategy. Only experiments with training.subsampling read them.


rule segment_corpus:
    input:
        corpus=rules.prepare_corpus.output.corpus,
    output:
        spans=OUT.SPANS,
        stats=OUT.SPANS_STATS,
    params:
        settings=SPANS,
    log:
        OUT.job_log("segment_corpus"),
    benchmark:
        OUT.job_benchmark("segment_corpus")
    threads: SPANS.get("n_process", 1)
    resources:
        mem_mb=8000,
        runtime=12 * 60,
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
        min_words=SPANS.get("min_words", 1),
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
