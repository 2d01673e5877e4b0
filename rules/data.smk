# Data: the training corpus and the SentEval tree, downloaded from the real URLs or taken
# from local copies (data_dir / data.*.path), verified, with a manifest of sha256 and counts.


rule prepare_corpus:
    output:
        corpus=OUT.CORPUS,
        manifest=OUT.CORPUS_MANIFEST,
    params:
        **JOBS.rule_params("prepare_corpus", CFG, per_job=False),
    log:
        OUT.job_log("prepare_corpus"),
    benchmark:
        OUT.job_benchmark("prepare_corpus")
    resources:
        mem_mb=4000,
        runtime=60,
    conda:
        "../envs/data.yaml"
    script:
        "../workflow_scripts/prepare_corpus.py"


rule split_corpus:
    input:
        corpus=rules.prepare_corpus.output.corpus,
    output:
        train=OUT.CORPUS_TRAIN_SPLIT,
        heldout=OUT.CORPUS_HELDOUT_SPLIT,
    log:
        OUT.job_log("split_corpus", "{fraction}"),
    benchmark:
        OUT.job_benchmark("split_corpus", "{fraction}")
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        "../envs/data.yaml"
    script:
        "../workflow_scripts/split_corpus.py"


rule prepare_senteval:
    input:
        unpack(lambda wc: senteval_reads_inputs(None)),  # a local tree's files: a changed one prepares it again
    output:
        manifest=OUT.SENTEVAL_MANIFEST,
    params:
        **JOBS.rule_params("prepare_senteval", CFG, per_job=False),
    log:
        OUT.job_log("prepare_senteval"),
    benchmark:
        OUT.job_benchmark("prepare_senteval")
    resources:
        mem_mb=2000,
        runtime=60,
    conda:
        "../envs/data.yaml"
    script:
        "../workflow_scripts/prepare_senteval.py"


# The SentEval files jobs read, by name (cselab.data.senteval.READS: STS-B dev, STS, ...): each
# prepared from the files themselves (a local tree) and recorded; a job's data input is the record
# of what it reads, so a changed file reruns the jobs that read it and no other.
rule senteval_reads:
    input:
        unpack(lambda wc: senteval_reads_inputs(wc.reads)),
    output:
        OUT.SENTEVAL_READS,
    params:
        **JOBS.rule_params("senteval_reads", CFG),
    log:
        OUT.job_log("senteval_reads", "{reads}"),
    benchmark:
        OUT.job_benchmark("senteval_reads", "{reads}")
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/data.yaml"
    script:
        "../workflow_scripts/senteval_reads.py"


rule resolve_plm:
    output:
        OUT.PLM,
    params:
        **JOBS.rule_params("resolve_plm", CFG),
    log:
        OUT.job_log("resolve_plm", "{plm}"),
    benchmark:
        OUT.job_benchmark("resolve_plm", "{plm}")
    resources:
        mem_mb=4000,
        runtime=60,
    conda:
        "../envs/data.yaml"
    script:
        "../workflow_scripts/resolve_plm.py"


rule prepare_beir:
    output:
        manifest=OUT.BEIR_MANIFEST,
    params:
        **JOBS.rule_params("prepare_beir", CFG),
    log:
        OUT.job_log("prepare_beir", "{dataset}"),
    benchmark:
        OUT.job_benchmark("prepare_beir", "{dataset}")
    resources:
        mem_mb=8000,
        disk_mb=lambda wc: cselab_beir.prepare_disk_mb(wc.dataset, CFG["evaluation"]["beir"]),
        runtime=120,
    conda:
        "../envs/data.yaml"
    script:
        "../workflow_scripts/prepare_beir.py"


rule prepare_stsb_retrieval:
    input:
        senteval=senteval_reads("stsb-test"),
    output:
        manifest=OUT.STSB_RETRIEVAL_MANIFEST,
    params:
        **JOBS.rule_params("prepare_stsb_retrieval", CFG, per_job=False),
    log:
        OUT.job_log("prepare_stsb_retrieval"),
    benchmark:
        OUT.job_benchmark("prepare_stsb_retrieval")
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/data.yaml"
    script:
        "../workflow_scripts/prepare_stsb_retrieval.py"
