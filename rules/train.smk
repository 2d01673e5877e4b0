# Training: one rule for every method; the experiment id picks PLM, methods, settings, seed.
# Only training settings are params here, so changing an evaluation setting never retrains.
# A method that needs an upstream artifact (a pretraining stage's output) declares it; its
# path becomes an input here and rule pretrain builds it.


rule train:
    input:
        unpack(lambda wc: training_inputs(trained_experiment_spec(wc.exp))),
        senteval=senteval_reads("stsb-dev"),  # STS-B dev: the checkpoint selection's
    output:
        model=directory(OUT.MODEL),
        curve=OUT.CURVE,
        summary=OUT.TRAIN_SUMMARY,
    params:
        **JOBS.rule_params("train", CFG),
    log:
        OUT.job_log("train", "{exp}"),
    benchmark:
        OUT.job_benchmark("train", "{exp}")
    threads: 8
    resources:
        # from the model and batch, for each of the node's training processes
        mem_mb=lambda wc: cselab_experiments.training_mem_mb(typed_experiment_spec(wc.exp),
                                                             training_world(exp=wc.exp)[0]),
        runtime=24 * 60,
        # training.devices GPUs on each of training.nodes nodes (one torchrun process per GPU);
        # none on a machine without a GPU that runs its jobs itself (cselab.pipeline.invocation)
        gpu=lambda wc: math.prod(training_world(exp=wc.exp)) if INVOCATION.gpus else 0,
        nodes=lambda wc: training_world(exp=wc.exp)[1],
    conda:
        "../envs/train.yaml"
    script:
        "../workflow_scripts/train.py"


rule pretrain:
    input:
        unpack(lambda wc: training_inputs(pretraining_spec(wc.stage, wc.plm))),
    output:
        model=directory(OUT.PRETRAINED),
        curve=OUT.PRETRAINED_CURVE,
        plot=OUT.PRETRAINED_PLOT,
        summary=OUT.PRETRAINED_SUMMARY,
    params:
        **JOBS.rule_params("pretrain", CFG),
    log:
        OUT.job_log("pretrain", "{stage}/{plm}"),
    benchmark:
        OUT.job_benchmark("pretrain", "{stage}/{plm}")
    threads: 8
    resources:
        mem_mb=lambda wc: cselab_experiments.training_mem_mb(pretraining_spec(wc.stage, wc.plm),
                                                             training_world(stage=wc.stage)[0]),
        runtime=48 * 60,
        gpu=lambda wc: math.prod(training_world(stage=wc.stage)) if INVOCATION.gpus else 0,
        nodes=lambda wc: training_world(stage=wc.stage)[1],
    conda:
        "../envs/train.yaml"
    script:
        "../workflow_scripts/pretrain.py"
