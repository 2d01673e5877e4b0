# Sharing: results and models in the field's formats (cselab.export; README "Results and models
# in the field's formats"). Target `exports` builds, for the experiments of export.tables, the
# MTEB result files, and for the trained ones the card, the ONNX file and the export folder,
# plus the MTEB check. Rule push uploads one export folder; it is never part of a target.
# A sweep:<s> entry (a table's, export.experiments', export.mteb_check.experiments') is the sweep's
# winner: the target waits for results/sweep_<s>.csv (a checkpoint, rules/sweeps.smk) and is
# planned again, with the winner's exports, once the sweep has run. Rule push_sweep pushes a winner.


rule exports:
    input:
        lambda wc: cselab_targets.export_targets(CFG, sweep_winner),
        lambda wc: cselab_targets.export_sweep_reports(CFG),


rule mteb_results:
    input:
        unpack(lambda wc: checked({f"result{i}": result for i, (_, result, _) in enumerate(mteb_sources(wc.exp))})),
        unpack(lambda wc: {f"manifest{i}": m for i, m in enumerate(dict.fromkeys(m for _, _, m in mteb_sources(wc.exp)))}),
        model=model_input,
    output:
        directory(OUT.MTEB_DIR),
    params:
        **JOBS.rule_params("mteb_results", CFG),
    log:
        OUT.job_log("mteb_results", "{exp}"),
    benchmark:
        OUT.job_benchmark("mteb_results", "{exp}")
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/evaluate.yaml"
    script:
        "../workflow_scripts/export.py"


rule mteb_check:
    input:
        models=lambda wc: [e["model"] for e in cselab_targets.mteb_check_inputs(CFG, sweep_winner).values()],
        sts=lambda wc: checked([e["sts"] for e in cselab_targets.mteb_check_inputs(CFG, sweep_winner).values()]),
        sweeps=lambda wc: cselab_targets.mteb_check_sweep_reports(CFG),
        senteval=senteval_reads("sts"),
    output:
        csv=report(OUT.MTEB_CHECK_CSV, caption="../report/table.rst", category="Tables"),
        md=OUT.MTEB_CHECK_MD,
    params:
        **JOBS.rule_params("mteb_check", CFG, sweep_winner),
    log:
        OUT.job_log("mteb_check"),
    benchmark:
        OUT.job_benchmark("mteb_check")
    threads: 8
    resources:
        mem_mb=8000,
        runtime=120,
    conda:
        "../envs/evaluate.yaml"
    script:
        "../workflow_scripts/export.py"


rule model_card:
    input:
        unpack(lambda wc: checked(cfg_call(cselab_targets.card_inputs, wc.exp))),
    output:
        OUT.CARD,
    params:
        **JOBS.rule_params("model_card", CFG),
    log:
        OUT.job_log("model_card", "{exp}"),
    benchmark:
        OUT.job_benchmark("model_card", "{exp}")
    resources:
        mem_mb=4000,
        runtime=20,
    conda:
        "../envs/report.yaml"
    script:
        "../workflow_scripts/export.py"


rule export_onnx:
    input:
        model=OUT.MODEL,
        senteval=senteval_reads("stsb-dev"),
    output:
        onnx=OUT.ONNX,
        check=OUT.ONNX_CHECK,
    params:
        **JOBS.rule_params("export_onnx", CFG),
    log:
        OUT.job_log("export_onnx", "{exp}"),
    benchmark:
        OUT.job_benchmark("export_onnx", "{exp}")
    threads: 8
    resources:
        mem_mb=16000,
        runtime=60,
    conda:
        "../envs/export.yaml"
    script:
        "../workflow_scripts/export.py"


rule export_model:
    input:
        model=OUT.MODEL,
        card=OUT.CARD,
        onnx=OUT.ONNX,
        check=OUT.ONNX_CHECK,
    output:
        directory(OUT.EXPORT),
    log:
        OUT.job_log("export_model", "{exp}"),
    benchmark:
        OUT.job_benchmark("export_model", "{exp}")
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/export.yaml"
    script:
        "../workflow_scripts/export.py"


rule push:
    input:
        export=OUT.EXPORT,
    output:
        OUT.PUSH_RECEIPT,
    params:
        **JOBS.rule_params("push", CFG),
    log:
        OUT.job_log("push", "{exp}"),
    benchmark:
        OUT.job_benchmark("push", "{exp}")
    resources:
        mem_mb=2000,
        runtime=60,
    conda:
        "../envs/export.yaml"
    script:
        "../workflow_scripts/export.py"


# A sweep's winner on the Hub: every seed's export folder pushed (rule push) once the sweep has
# run (results/sweep_<s>.csv, a checkpoint); the receipt names the winner and each push's receipt.
# Never part of a target: snakemake results/hub/sweeps/<s>.json
rule push_sweep:
    input:
        sweep=OUT.SWEEP_CSV,
        receipts=lambda wc: cfg_call(cselab_targets.sweep_push_receipts, wc.sweep, sweep_winner),
    output:
        OUT.SWEEP_PUSH_RECEIPT,
    params:
        **JOBS.rule_params("push_sweep", CFG, sweep_winner),
    log:
        OUT.job_log("push_sweep", "{sweep}"),
    benchmark:
        OUT.job_benchmark("push_sweep", "{sweep}")
    resources:
        mem_mb=1000,
        runtime=5,
    conda:
        "../envs/export.yaml"
    script:
        "../workflow_scripts/export.py"
