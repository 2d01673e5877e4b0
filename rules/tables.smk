# Tables: each declares its kind and experiments in the config; Snakemake builds only what
# is missing. One rule serves every table.


rule table:
    input:
        results=lambda wc: [f for files in table_inputs(wc.table).values() for f in files],
    output:
        csv=report("results/{table}.csv", caption="../report/table.rst", category="Tables"),
        md=report("results/{table}.md", caption="../report/table.rst", category="Tables"),
    params:
        table=lambda wc: {"name": wc.table, **CFG["tables"][wc.table]},
        columns=lambda wc: cselab_config.table_columns(CFG, wc.table),
        rows=lambda wc: table_rows(wc.table),
        bootstrap=CFG["evaluation"].get("bootstrap", {}),
    log:
        "logs/tables/{table}.log",
    benchmark:
        "benchmarks/tables/{table}.tsv"
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/report.yaml"
    script:
        "../workflow_scripts/table.py"
