# Evaluation of a trained or untrained model. Every rule reads embeddings through the cache
# (results/cache), so adding a metric or a table never re-encodes a dataset. One skeleton
# (evaluate_sts) and one job (cselab.pipeline.jobs.evaluate.evaluate, which computes what the
# rule's name says); the others inherit it and name what differs (`use rule ... with:`).


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
        OUT.job_log("evaluate_sts", "{exp}"),
    benchmark:
        OUT.job_benchmark("evaluate_sts", "{exp}")
    threads: 8
    resources:
        mem_mb=16000,
        runtime=60,
    conda:
        "../envs/evaluate.yaml"
    script:
        "../workflow_scripts/evaluate.py"


use rule evaluate_sts as evaluate_stsb_dev with:
    output:
        OUT.RESULT["stsb_dev"],
        pairs=OUT.RESULT["stsb_dev_pairs"],
    params:
        settings=ENCODER,
        experiment="{exp}",
    log:
        OUT.job_log("evaluate_stsb_dev", "{exp}"),
    benchmark:
        OUT.job_benchmark("evaluate_stsb_dev", "{exp}")
    resources:
        mem_mb=8000,
        runtime=30,


use rule evaluate_sts as evaluate_stsb_dev_head with:
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
        OUT.job_log("evaluate_stsb_dev_head", "{exp}"),
    benchmark:
        OUT.job_benchmark("evaluate_stsb_dev_head", "{exp}")
    threads: 2
    resources:
        mem_mb=8000,
        runtime=30,


use rule evaluate_sts as evaluate_transfer with:
    output:
        OUT.RESULT["transfer"],
        pairs=OUT.RESULT["transfer_pairs"],
    params:
        settings=ENCODER,
        transfer=CFG["evaluation"]["transfer"],
        experiment="{exp}",
    log:
        OUT.job_log("evaluate_transfer", "{exp}"),
    benchmark:
        OUT.job_benchmark("evaluate_transfer", "{exp}")
    resources:
        mem_mb=16000,
        runtime=120,


use rule evaluate_transfer as evaluate_transfer_dev with:
    output:
        OUT.RESULT["transfer_dev"],
    log:
        OUT.job_log("evaluate_transfer_dev", "{exp}"),
    benchmark:
        OUT.job_benchmark("evaluate_transfer_dev", "{exp}")


# BEIR datasets (nDCG@10) and the STS-B in-domain retrieval (recall@k): one job, evaluate_retrieval.
# One job per checkpoint and corpus: datasets that share a corpus (evaluation.beir.shared_corpora:
# FEVER and Climate-FEVER) are one job below that encodes it once. Memory and disk follow from
# the dataset's published size (cselab.data.beir.retrieval_resources).
use rule evaluate_sts as evaluate_beir with:
    input:
        model=model_input,
        dataset=OUT.BEIR_MANIFEST,
    output:
        OUT.RESULT["beir"].replace("{dataset}", "{dataset,(?!(?:%s)\\.json$)[^/]+}" % BEIR_ALONE),
    params:
        settings=ENCODER,
        retrieval=BEIR_SCORED,
        experiment="{exp}",
        metric="ndcg@10",
    log:
        OUT.job_log("evaluate_beir", "{exp}/{dataset}"),
    benchmark:
        OUT.job_benchmark("evaluate_beir", "{exp}/{dataset}")
    resources:
        mem_mb=lambda wc: beir_resources([wc.dataset])["mem_mb"],
        disk_mb=lambda wc: beir_resources([wc.dataset])["disk_mb"],
        runtime=12 * 60,


for _group, _members in BEIR_SHARED.items():

    rule:
        name:
            BEIR_SHARED_RULE[_group]
        input:
            model=model_input,
            dataset=[OUT.path(OUT.BEIR_MANIFEST, dataset=m) for m in _members],
        output:
            [OUT.RESULT["beir"].replace("{dataset}", m) for m in _members],
        params:
            settings=ENCODER,
            retrieval=BEIR_SCORED,
            experiment="{exp}",
            metric="ndcg@10",
        log:
            OUT.job_log("evaluate_beir", f"{{exp}}/{_group}"),
        benchmark:
            OUT.job_benchmark("evaluate_beir", f"{{exp}}/{_group}")
        threads: 8
        resources:
            mem_mb=beir_resources(_members)["mem_mb"],
            disk_mb=beir_resources(_members)["disk_mb"],
            runtime=24 * 60,
        conda:
            "../envs/evaluate.yaml"
        script:
            "../workflow_scripts/evaluate.py"


use rule evaluate_beir as evaluate_stsb_retrieval with:
    input:
        model=model_input,
        dataset=rules.prepare_stsb_retrieval.output.manifest,
    output:
        OUT.RESULT["stsb_retrieval"],
    params:
        settings=ENCODER,
        retrieval=BEIR_SCORED,
        experiment="{exp}",
        metric="recall",
    log:
        OUT.job_log("evaluate_stsb_retrieval", "{exp}"),
    benchmark:
        OUT.job_benchmark("evaluate_stsb_retrieval", "{exp}")
    resources:
        mem_mb=8000,
        disk_mb=200,
        runtime=60,


use rule evaluate_sts as evaluate_geometry with:
    output:
        OUT.RESULT["geometry"],
    params:
        settings=ENCODER,
        geometry=CFG["evaluation"]["geometry"],
        experiment="{exp}",
    log:
        OUT.job_log("evaluate_geometry", "{exp}"),
    benchmark:
        OUT.job_benchmark("evaluate_geometry", "{exp}")
    resources:
        mem_mb=8000,
        runtime=60,
