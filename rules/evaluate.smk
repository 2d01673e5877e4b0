# Evaluation of a trained or untrained model: one rule per evaluation kind, evaluate_<kind>,
# generated from the kind's declaration (cselab.evaluation.kinds: the built-in kinds and those of
# the config's plugins; cselab.pipeline.evaluations turns it into the rule's directives). Every
# rule reads embeddings through the cache (results/cache), so adding a metric or a table never
# re-encodes a dataset; every rule runs one job (cselab.pipeline.jobs.evaluate.evaluate), which
# computes what the rule's kind declares.
from cselab.pipeline import evaluations as EVAL

for _kind in EVAL.kinds():
    _outputs, _named = EVAL.rule_outputs(_kind, BEIR_ALONE)

    rule:
        name:
            _kind.rule
        input:
            **EVAL.rule_inputs(_kind, model_input, senteval=lambda kind: senteval_reads(*kind.senteval_reads(CFG))),
        output:
            *_outputs,
            **_named,
        params:
            **JOBS.evaluation_params(_kind, CFG),
        log:
            OUT.job_log(_kind.rule, EVAL.job_name(_kind)),
        benchmark:
            OUT.job_benchmark(_kind.rule, EVAL.job_name(_kind))
        threads: _kind.threads
        resources:
            **EVAL.rule_resources(_kind, CFG),
        conda:
            "../envs/evaluate.yaml"
        script:
            "../workflow_scripts/evaluate.py"


# BEIR datasets that share a corpus (evaluation.beir.shared_corpora: FEVER and Climate-FEVER): one
# job per checkpoint and corpus, which encodes it once and writes each dataset's result
for _kind, _name, _group, _members in EVAL.shared_jobs(BEIR_SHARED):

    rule:
        name:
            _name
        input:
            **EVAL.rule_inputs(_kind, model_input, _members, lambda kind: senteval_reads(*kind.senteval_reads(CFG))),
        output:
            EVAL.shared_outputs(_kind, _members),
        params:
            **JOBS.evaluation_params(_kind, CFG, _members),
        log:
            OUT.job_log(_kind.rule, f"{{exp}}/{_group}"),
        benchmark:
            OUT.job_benchmark(_kind.rule, f"{{exp}}/{_group}")
        threads: _kind.threads
        resources:
            **EVAL.rule_resources(_kind, CFG, _members),
        conda:
            "../envs/evaluate.yaml"
        script:
            "../workflow_scripts/evaluate.py"
