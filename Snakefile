"""cselab: contrastive sentence-embedding experiments, one command per paper table.

    snakemake --cores 8 --use-conda results/table1.csv                  # paper scale, GPU node
    snakemake --cores 2 --configfile configs/smoke.yaml results/table1.csv   # CPU smoke run
"""

import sys

from snakemake.utils import min_version

min_version("9.0")
sys.path.insert(0, workflow.basedir)  # the library (cselab/), also where it is not installed

from cselab.io import skip_collection_at_exit
from cselab.pipeline.config import collect_less_while_planning

skip_collection_at_exit()  # 0.7 s less at the exit of the paper config's dry run (12%, docs/scale.md)
collect_less_while_planning()  # the collector ran ~950 times planning the paper DAG (docs/scale.md)


configfile: f"{workflow.basedir}/config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/spans.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
include: "rules/tables.smk"
include: "rules/figures.smk"
include: "rules/sweeps.smk"
include: "rules/export.smk"
include: "rules/cost.smk"


rule all:
    input:
        expand(OUT.TABLE_CSV, table=list(CFG["tables"])),
        OUT.LEAKAGE_CSV,
        OUT.SEED_POWER_CSV,
        OUT.PROTOCOLS_CSV,
        expand(OUT.FIGURE_PNG, figure=list(CFG.get("figures", {}))),
    default_target: True
