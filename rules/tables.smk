# Tables: each declares its kind and experiments in the config (a `methods` table: every
# configured method on one PLM); Snakemake builds only what is missing. One rule serves all.


# A table listing sweep:<s> waits for the sweep (a checkpoint, rules/sweeps.smk) and then shows
# its winner at that place (sweep_winner: None until the sweep has run).
rule table:
    input:
        results=lambda wc: checked([f for files in cselab_targets.table_inputs(CFG, wc.table, sweep_winner).values()
                                    for f in files]),
        summaries=lambda wc: cselab_targets.table_summaries(CFG, wc.table, sweep_winner),
        sweeps=lambda wc: cselab_targets.table_sweep_reports(CFG, wc.table),
    output:
        csv=report(OUT.TABLE_CSV, caption="../report/table.rst", category="Tables"),
        md=report(OUT.TABLE_MD, caption="../report/table.rst", category="Tables"),
    params:
        **JOBS.rule_params("table", CFG, sweep_winner),
    log:
        OUT.job_log("tables", "{table}"),
    benchmark:
        OUT.job_benchmark("tables", "{table}")
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/report.yaml"
    script:
        "../workflow_scripts/table.py"


# The leakage audit: how much of each evaluation set (STS, STS-B dev, transfer, BEIR queries of
# datasets already prepared) the training corpus and each subsampled set contain.
rule leakage_audit:
    input:
        unpack(lambda wc: {f"corpus{i}": path for i, path in enumerate(cselab_targets.leakage_corpora(CFG).values())}),
        senteval=rules.prepare_senteval.output.manifest,  # every task's sentences
    output:
        csv=report(OUT.LEAKAGE_CSV, caption="../report/table.rst", category="Tables"),
        md=report(OUT.LEAKAGE_MD, caption="../report/table.rst", category="Tables"),
    params:
        **JOBS.rule_params("leakage_audit", CFG),
    log:
        OUT.job_log("tables", "table_leakage"),
    benchmark:
        OUT.job_benchmark("tables", "table_leakage")
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        "../envs/report.yaml"
    script:
        "../workflow_scripts/leakage_audit.py"


# The seed planner: variance components (seed, item) and the smallest difference each number of
# seeds detects, from the runs of evaluation.seed_power.table. A sweep:<s> entry of that table (or
# the baseline) is the sweep's winner: planned again once its checkpoint has run, like a table.
rule seed_power:
    input:
        pairs=lambda wc: checked([f for by_metric in cselab_targets.seed_power_inputs(CFG, sweep_winner).values()
                                  for files in by_metric.values() for f in files]),
        sweeps=lambda wc: cselab_targets.seed_power_sweep_reports(CFG),
    output:
        csv=report(OUT.SEED_POWER_CSV, caption="../report/table.rst", category="Tables"),
        md=OUT.SEED_POWER_MD,
        png=report(OUT.SEED_POWER_PNG, caption="../report/figure.rst", category="Figures"),
    params:
        **JOBS.rule_params("seed_power", CFG, sweep_winner),
    log:
        OUT.job_log("tables", "seed_power"),
    benchmark:
        OUT.job_benchmark("tables", "seed_power")
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        "../envs/report.yaml"
    script:
        "../workflow_scripts/seed_power.py"


# Protocol sensitivity: every checkpoint of evaluation.protocols.table scored under each
# aggregation, pooler, truncation and STS-B split the literature uses (a sweep:<s> entry of that
# table: the winner's, once the sweep's checkpoint has run).
rule protocol_table:
    input:
        models=lambda wc: list(cselab_targets.protocol_checkpoints(CFG, sweep_winner).values()),
        sweeps=lambda wc: cselab_targets.protocol_sweep_reports(CFG),
        senteval=senteval_reads("sts", "stsb-dev"),
    output:
        csv=report(OUT.PROTOCOLS_CSV, caption="../report/table.rst", category="Tables"),
        md=OUT.PROTOCOLS_MD,
    params:
        **JOBS.rule_params("protocol_table", CFG, sweep_winner),
    log:
        OUT.job_log("tables", "table_protocols"),
    benchmark:
        OUT.job_benchmark("tables", "table_protocols")
    threads: 8
    resources:
        mem_mb=8000,
        runtime=120,
    conda:
        "../envs/evaluate.yaml"
    script:
        "../workflow_scripts/protocol_table.py"
