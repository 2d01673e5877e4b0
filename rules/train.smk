# Training: one rule for every method; the experiment id picks PLM, objective, settings, seed.
# Only training settings are params here, so changing an evaluation setting never retrains.


rule train:
    input:
        corpus=training_corpus,
        senteval=rules.prepare_senteval.output.manifest,
        plm=lambda wc: f"resources/plms/{experiment_spec(wc.exp)['plm']}.json",
    output:
        model=directory("results/experiments/{exp}/model"),
        curve="results/experiments/{exp}/curve.csv",
        summary="results/experiments/{exp}/train_summary.json",
    params:
        spec=lambda wc: experiment_spec(wc.exp),
    log:
        "logs/train/{exp}.log",
    benchmark:
        "benchmarks/train/{exp}.tsv"
    threads: 8
    resources:
        mem_mb=32000,
        runtime=24 * 60,
        gpu=1,
    conda:
        "../envs/train.yaml"
    script:
        "../workflow_scripts/train.py"
