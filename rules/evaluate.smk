# Evaluation of a trained or untrained model. Every rule reads embeddings through the cache
# (results/cache), so adding a metric or a table never re-encodes a dataset.


rule evaluate_sts:
    input:
        model=model_input,
        senteval=rules.prepare_senteval.output.manifest,
    output:
        OUT.RESULT["sts"],
        pairs=OUT.RESULT["sts_pairs"],
    params:
        settings=ENCODER,
        experiment="{exp}",
    log:
        "logs/evaluate_sts/{exp}.log",
    benchmark:
        "benchmarks/evaluate_sts/{exp}.tsv"
    threads: 8
    resources:
        mem_mb=16000,
        runtime=60,
    conda:
        "../envs/evaluate.yaml"
    script:
        "../workflow_scripts/evaluate_sts.py"


rule evaluate_stsb_dev_head:
    input:
        model=OUT.MODEL,
        senteval=rules.prepare_senteval.output.manifest,
        # after the raw STS-B dev evaluation: its cached embeddings are what the head reads
        raw=OUT.RESULT["stsb_dev"],
    output:
        OUT.RESULT["stsb_dev_head"],
    params:
        settings=ENCODER,
        experiment="{exp}",
    log:
        "logs/evaluate_stsb_dev_head/{exp}.log",
    benchmark:
        "benchmarks/evaluate_stsb_dev_head/{exp}.tsv"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=30,
    conda:
        "../envs/evaluate.yaml"
    script:
        "../workflow_scripts/evaluate_stsb_dev_head.py"


rule evaluate_transfer:
    input:
        model=model_input,
        senteval=rules.prepare_senteval.output.manifest,
    output:
        OUT.RESULT["transfer"],
        pairs=OUT.RESULT["transfer_pairs"],
    params:
        settings=ENCODER,
        transfer=CFG["evaluation"]["transfer"],
        experiment="{exp}",
    log:
        "logs/evaluate_transfer/{exp}.log",
    benchmark:
        "benchmarks/evaluate_transfer/{exp}.tsv"
    threads: 8
    resources:
        mem_mb=16000,
        runtime=120,
    conda:
        "../envs/evaluate.yaml"
    script:
        "../workflow_scripts/evaluate_transfer.py"


rule evaluate_transfer_dev:
    input:
        model=model_input,
        senteval=rules.prepare_senteval.output.manifest,
    output:
        OUT.RESULT["transfer_dev"],
    params:
        settings=ENCODER,
        transfer=CFG["evaluation"]["transfer"],
        experiment="{exp}",
    log:
        "logs/evaluate_transfer_dev/{exp}.log",
    benchmark:
        "benchmarks/evaluate_transfer_dev/{exp}.tsv"
    threads: 8
    resources:
        mem_mb=16000,
        runtime=120,
    conda:
        "../envs/evaluate.yaml"
    script:
        "../workflow_scripts/evaluate_transfer_dev.py"


rule evaluate_beir:
    input:
        model=model_input,
        dataset=OUT.BEIR_MANIFEST,
    output:
        OUT.RESULT["beir"],
    params:
        settings=ENCODER,
        retrieval=CFG["evaluation"]["beir"],
        experiment="{exp}",
        metric="ndcg@10",
    log:
        "logs/evaluate_beir/{exp}/{dataset}.log",
    benchmark:
        "benchmarks/evaluate_beir/{exp}/{dataset}.tsv"
    threads: 8
    resources:
        mem_mb=32000,
        runtime=12 * 60,
    conda:
        "../envs/evaluate.yaml"
    script:
        "../workflow_scripts/evaluate_retrieval.py"


rule evaluate_stsb_retrieval:
    input:
        model=model_input,
        dataset=rules.prepare_stsb_retrieval.output.manifest,
    output:
        OUT.RESULT["stsb_retrieval"],
    params:
        settings=ENCODER,
        retrieval=CFG["evaluation"]["beir"],
        experiment="{exp}",
        metric="recall",
    log:
        "logs/evaluate_stsb_retrieval/{exp}.log",
    benchmark:
        "benchmarks/evaluate_stsb_retrieval/{exp}.tsv"
    threads: 8
    resources:
        mem_mb=8000,
        runtime=60,
    conda:
        "../envs/evaluate.yaml"
    script:
        "../workflow_scripts/evaluate_retrieval.py"


rule evaluate_geometry:
    input:
        model=model_input,
        senteval=rules.prepare_senteval.output.manifest,
    output:
        OUT.RESULT["geometry"],
    params:
        settings=ENCODER,
        geometry=CFG["evaluation"]["geometry"],
        experiment="{exp}",
    log:
        "logs/evaluate_geometry/{exp}.log",
    benchmark:
        "benchmarks/evaluate_geometry/{exp}.tsv"
    threads: 8
    resources:
        mem_mb=8000,
        runtime=60,
    conda:
        "../envs/evaluate.yaml"
    script:
        "../workflow_scripts/evaluate_geometry.py"


rule evaluate_stsb_dev:
    input:
        model=model_input,
        senteval=rules.prepare_senteval.output.manifest,
    output:
        OUT.RESULT["stsb_dev"],
        pairs=OUT.RESULT["stsb_dev_pairs"],
    params:
        settings=ENCODER,
        experiment="{exp}",
    log:
        "logs/evaluate_stsb_dev/{exp}.log",
    benchmark:
        "benchmarks/evaluate_stsb_dev/{exp}.tsv"
    threads: 8
    resources:
        mem_mb=8000,
        runtime=30,
    conda:
        "../envs/evaluate.yaml"
    script:
        "../workflow_scripts/evaluate_stsb_dev.py"
