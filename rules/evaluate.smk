# Evaluation: the 7 STS tasks (SentEval "all" protocol) for a trained or untrained model.


rule evaluate_sts:
    input:
        model=model_input,
        senteval=rules.prepare_senteval.output.manifest,
    output:
        "results/experiments/{exp}/sts.json",
    params:
        settings=CFG["evaluation"],
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
        "../envs/cselab.yaml"
    script:
        "../workflow_scripts/evaluate_sts.py"
