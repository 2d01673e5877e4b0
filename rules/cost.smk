# The cost plan: every job Snakemake plans for cost_plan.targets (its own dry run, on this config),
# priced from its size and the rates of cost_plan.device (docs/cost.md). Plan scale: no torch.
# The whole config is a param, so a changed config or rates table plans again.
from cselab.reporting.cost import rates_file as cost_rates_file


rule cost_plan:
    input:
        rates=lambda wc: cfg_call(lambda cfg: str(cost_rates_file(typed_config(cfg).cost_plan.device))),
    output:
        csv=report(OUT.COST_PLAN_CSV, caption="../report/cost_plan.rst", category="Tables"),
        md=OUT.COST_PLAN_MD,
    params:
        **JOBS.rule_params("cost_plan", CFG, per_job=False),
    log:
        OUT.job_log("cost_plan"),
    benchmark:
        OUT.job_benchmark("cost_plan")
    resources:
        mem_mb=2000,
        runtime=15,
    conda:
        "../envs/report.yaml"
    script:
        "../workflow_scripts/cost_plan.py"
