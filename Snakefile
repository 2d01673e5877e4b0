"""cselab: contrastive sentence-embedding experiments, one command per paper table.

    snakemake --cores 8 --use-conda results/table1.csv                  # paper scale, GPU node
    snakemake --cores 2 --configfile configs/smoke.yaml results/table1.csv   # CPU smoke run
"""

from snakemake.utils import min_version

min_version("9.0")


configfile: f"{workflow.basedir}/config.yaml"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
include: "rules/tables.smk"


rule all:
    input:
        expand("results/{table}.csv", table=list(CFG["tables"])),
    default_target: True
