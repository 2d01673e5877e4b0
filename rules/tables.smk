# Tables: each declares its experiments in the config; Snakemake builds only what is missing.


rule table1:
    input:
        results=lambda wc: [f"results/experiments/{i}/sts.json" for i in table_ids("table1")],
    output:
        csv="results/table1.csv",
        md="results/table1.md",
    params:
        table=lambda wc: {"name": "table1", **CFG["tables"]["table1"]},
        rows=lambda wc: table_rows("table1"),
    log:
        "logs/table1.log",
    benchmark:
        "benchmarks/table1.tsv"
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/cselab.yaml"
    script:
        "../workflow_scripts/sts_table.py"
