# Figures: each declares its kind and the experiments it draws (config `figures`); one rule
# serves all of them. What a kind reads (training curves, checkpoints, STS-B dev results, or
# nothing for a simulation) is declared with the kind (cselab/reporting/figures/).


rule figure:
    input:
        unpack(lambda wc: checked(figure_inputs(wc.figure))),
        senteval=senteval_reads("stsb-dev", "stsb-test"),  # what the figure kinds read
    output:
        png=report(OUT.FIGURE_PNG, caption="../report/figure.rst", category="Figures"),
        csv=report(OUT.FIGURE_CSV, caption="../report/figure.rst", category="Figures"),
    params:
        **JOBS.rule_params("figure", CFG),
    log:
        OUT.job_log("figures", "{figure}"),
    benchmark:
        OUT.job_benchmark("figures", "{figure}")
    threads: 2
    resources:
        mem_mb=8000,
        runtime=60,
    conda:
        "../envs/report.yaml"
    script:
        "../workflow_scripts/figure.py"
