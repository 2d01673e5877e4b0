# Sweeps: a config's sweeps.<s> grid, expanded into ordinary experiments when the config is
# validated; this report reads every point's STS-B dev results and training summaries, selects
# the best mean and says whether it is distinguishable from the others. Not part of `all`:
# snakemake results/sweep_<s>.csv. With no sweeps configured the rule matches nothing.
# A checkpoint: a table listing sweep:<s> shows the winner, known only once this has run; the
# table is planned with the sweep's CSV as an input, and planned again (now with the winner's
# results, which Snakemake then builds) when the checkpoint has run or is found up to date.


checkpoint sweep:
    input:
        results=lambda wc: checked(cfg_call(cselab_targets.sweep_inputs, wc.sweep)),
    output:
        csv=report(OUT.SWEEP_CSV, caption="../report/table.rst", category="Sweeps"),
        md=OUT.SWEEP_MD,
        png=report(OUT.SWEEP_PNG, caption="../report/figure.rst", category="Sweeps"),
        best=OUT.SWEEP_BEST,
    params:
        **JOBS.rule_params("sweep", CFG),
    log:
        OUT.job_log("sweeps", "{sweep}"),
    benchmark:
        OUT.job_benchmark("sweeps", "{sweep}")
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/report.yaml"
    script:
        "../workflow_scripts/sweep.py"
