"""The evaluation rules' directives from the evaluation kinds' declarations
(:mod:`cselab.evaluation.kinds`): ``rules/evaluate.smk`` generates one rule per kind,
``evaluate_<kind>``, plus one per group of BEIR datasets sharing a corpus for a kind with a result
per dataset, and asks this module for each rule's inputs, outputs, params and resources."""

from __future__ import annotations

import re
from typing import Any, Callable

from cselab.evaluation.kinds import EvaluationKind, evaluation_kinds
from cselab.pipeline import outputs

#: the files a kind's ``inputs`` name (``model``: the experiment's model, given by the workflow)
INPUT_FILES = {"trained_model": outputs.MODEL, "senteval": outputs.SENTEVAL_MANIFEST,
               "beir_dataset": outputs.BEIR_MANIFEST, "stsb_retrieval_dataset": outputs.STSB_RETRIEVAL_MANIFEST}


def kinds() -> list[EvaluationKind]:
    """Every evaluation kind (the built-in ones and the config's plugins')."""
    return list(evaluation_kinds().values())


def shared_jobs(shared: dict[str, list[str]]) -> list[tuple[EvaluationKind, str, str, list[str]]]:
    """(kind, rule name, group, datasets) of each shared-corpus rule: a kind with a result per
    BEIR dataset, one rule per group of ``evaluation.beir.shared_corpora``."""
    return [(k, "%s_shared_%s" % (k.rule, re.sub(r"\W", "_", group)), group, members)
            for k in kinds() if k.per_dataset for group, members in shared.items()]


def rule_inputs(kind: EvaluationKind, model: Any, members: list[str] | None = None,
                senteval: Callable[[EvaluationKind], list[str]] | None = None) -> dict:
    """The rule's inputs; ``model``: what the workflow reads as the experiment's model (an input
    function); ``members``: a shared-corpus job's BEIR datasets (one manifest each); ``senteval``:
    the records of what a kind reading SentEval reads (:meth:`EvaluationKind.senteval_reads`;
    without it, or for a kind that declares none, the whole tree's manifest)."""
    out = {}
    for key, what in kind.inputs.items():
        if what == "senteval" and senteval is not None and kind.senteval is not None:
            out[key] = senteval(kind)
        elif what.startswith("result:"):
            out[key] = outputs.RESULT[what.removeprefix("result:")]
        elif what == "model":
            out[key] = model
        elif what == "beir_dataset" and members:
            out[key] = [outputs.path(outputs.BEIR_MANIFEST, dataset=m) for m in members]
        else:
            out[key] = INPUT_FILES[what]
    return out


def rule_outputs(kind: EvaluationKind, alone: str) -> tuple[list[str], dict[str, str]]:
    """(unnamed, named) outputs; a result per BEIR dataset: those matching ``alone`` (the
    datasets no shared-corpus job evaluates: a regex of the others)."""
    first, named = kind.outputs()
    if kind.per_dataset and named:
        raise ValueError(f"evaluation kind {kind.name!r}: a kind with a result per BEIR dataset has one result")
    dataset = "{dataset,(?!(?:%s)\\.json$)[^/]+}" % alone
    return ([outputs.RESULT[r].replace("{dataset}", dataset) for r in first],
            {k: outputs.RESULT[r] for k, r in named.items()})


def shared_outputs(kind: EvaluationKind, members: list[str]) -> list[str]:
    """A shared-corpus job's outputs: the kind's result for each of its datasets."""
    return [outputs.RESULT[kind.outputs()[0][0]].replace("{dataset}", m) for m in members]


def job_name(kind: EvaluationKind) -> str:
    """The log and benchmark file name of a job: its experiment (and BEIR dataset)."""
    return "{exp}/{dataset}" if kind.per_dataset else "{exp}"


def _per_dataset(size: Callable, cfg: dict) -> Callable:
    return lambda wildcards: size([wildcards.dataset], cfg)


def rule_resources(kind: EvaluationKind, cfg: dict, members: list[str] | None = None) -> dict:
    """The kind's resources; a callable one from the job's BEIR datasets and the config."""
    out = {}
    for key, value in kind.resources.items():
        if not callable(value):
            out[key] = value
        elif members is not None or not kind.per_dataset:
            out[key] = value(list(members or []), cfg)
        else:
            out[key] = _per_dataset(value, cfg)
    return out
