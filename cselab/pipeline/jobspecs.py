"""Each rule's job spec: exactly the settings that can change a job's output, from the validated
config and the job's wildcards; Snakemake stores it as the job's params and reruns the job when
it changes (its rerun trigger), so a setting reruns the jobs it can affect and nothing else.

One function per rule (:func:`job_spec` registers it with the params' names); the rules take
their params from here (``params: **JOBS.rule_params("table", ...)``) and nothing else, so a test
can compute every job's params without Snakemake (``tests/test_rerun_precision.py``). What only
changes how a job runs (threads, evaluation batch sizes, the embedding cache, logging, tracking,
resources, processes, compile) is never in a spec: a job reads it through
:func:`cselab.pipeline.jobs.operations`.

A spec is serialized canonically (JSON, keys sorted, finite numbers): a value that cannot be
(a NaN, an object) is one :class:`~cselab.errors.ConfigError` naming the setting.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Callable, Mapping

from cselab.errors import ConfigError
from cselab.pipeline import outputs
from cselab.settings.base import per_config

Winner = Callable[[str], "dict | None"]
SpecFn = Callable[..., dict]

#: rule -> (params' names, spec function, whether it reads a sweep's winner)
_SPECS: dict[str, tuple[tuple[str, ...], SpecFn, bool]] = {}

#: the evaluation settings that decide an embedding (the others: batching and the cache, operational)
ENCODER_KEYS = ("pooler", "max_len")


def job_spec(rule: str, *names: str, winner: bool = False):
    """Register ``fn(cfg, wildcards[, winner])`` as rule ``rule``'s spec: a dict of ``names``."""
    def register(fn: SpecFn) -> SpecFn:
        _SPECS[rule] = (names, fn, winner)
        return fn
    return register


def rules() -> list[str]:
    """Every rule with a registered spec (the evaluation rules: see :func:`evaluation_spec`)."""
    return list(_SPECS)


def spec_of(rule: str, cfg: dict, wildcards: Mapping[str, str], winner: Winner | None = None) -> dict:
    """Rule ``rule``'s params for the job of ``wildcards``, checked canonical; computed once per
    config and job (a rule's params are asked for name by name), and for a rule that shows a
    sweep's winner once per winner too (a sweep that has run since changes the spec)."""
    names, fn, needs_winner = _SPECS[rule]
    key = tuple(sorted(wildcards.items()))
    spec = _with_winners(cfg, rule, key, winner) if needs_winner else _cached(cfg, rule, key)
    missing = set(names) ^ set(spec)
    if missing:
        raise ValueError(f"the spec of rule {rule} has {sorted(spec)}, declared {sorted(names)}")
    return spec


@per_config
def _cached(cfg: dict, rule: str, key: tuple) -> dict:
    return canonical(_SPECS[rule][1](cfg, dict(key)), rule)


def _with_winners(cfg: dict, rule: str, key: tuple, winner: Winner | None) -> dict:
    """The spec of a rule that reads sweeps' winners: reused while every winner it read is the same."""
    held = _winner_specs(cfg, rule, key)
    for asked, spec in held:
        if all(_winner(winner, sweep) == found for sweep, found in asked.items()):
            return spec
    asked: dict = {}

    def remembered(sweep: str):
        asked[sweep] = _winner(winner, sweep)
        return asked[sweep]

    spec = canonical(_SPECS[rule][1](cfg, dict(key), remembered if winner else None), rule)
    held.append((asked, spec))
    return spec


def _winner(winner: Winner | None, sweep: str):
    return winner(sweep) if winner else None


@per_config
def _winner_specs(cfg: dict, rule: str, key: tuple) -> list:
    return []


def job_params(cfg: dict, rule: str, wildcards: Mapping[str, str], winner: Winner | None = None) -> dict:
    """Any job's params: rule ``rule``'s spec for ``wildcards`` (an evaluation rule's from its
    kind; a shared-corpus job's with its group's datasets)."""
    if rule in _SPECS:
        return spec_of(rule, cfg, wildcards, winner)
    from cselab.data.beir import shared_corpus_groups
    from cselab.evaluation.kinds import kind_of_rule

    kind = kind_of_rule(rule)
    if kind is None:
        return {}  # a rule without params (all, exports)
    members = None
    if "_shared_" in rule:
        groups = {k: m for k, m in shared_corpus_groups(cfg["evaluation"]["beir"]).items() if len(m) > 1}
        members = next(m for name, m in groups.items() if rule.endswith("_shared_" + _rule_suffix(name)))
    return _evaluation_cached(cfg, kind.name, tuple(sorted(wildcards.items())), tuple(members or ()))


def _rule_suffix(group: str) -> str:
    import re

    return re.sub(r"\W", "_", group)


def rule_params(rule: str, cfg: dict, winner: Winner | None = None, per_job: bool = True) -> dict[str, Any]:
    """The ``params:`` of rule ``rule``: one function of the wildcards per name; for a rule of
    one job (``per_job`` False: no wildcards, no winner, no state of the folder) the values."""
    names = _SPECS[rule][0]
    if not per_job:
        return dict(spec_of(rule, cfg, {}, winner))

    def param(name: str) -> Callable:
        return lambda wc: spec_of(rule, cfg, dict(wc.items()), winner)[name]

    return {name: param(name) for name in names}


def canonical(spec: dict, rule: str) -> dict:
    """``spec`` unchanged when it is canonical: every value a string, finite number, boolean,
    null, list, tuple or mapping (mappings keep their order: a figure's labels, a table's inputs,
    a settings section as results built so far recorded it); anything else is one ConfigError
    naming the rule and the setting."""
    try:
        json.dumps(spec, allow_nan=False, default=_refuse)
    except (TypeError, ValueError):
        _explain(spec, rule, "")
    return spec


def _refuse(value):
    raise TypeError(value)


def _explain(node: Any, rule: str, where: str) -> None:
    """Raise the ConfigError naming the first setting of ``node`` with no canonical form."""
    if isinstance(node, Mapping):
        bad = [k for k in node if not isinstance(k, str)]
        if bad:
            raise ConfigError(f"rule {rule}: setting '{where}' has the key {bad[0]!r}; keys are strings")
        for k, v in node.items():
            _explain(v, rule, f"{where}.{k}" if where else k)
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            _explain(v, rule, f"{where}[{i}]")
    elif isinstance(node, float) and not math.isfinite(node):
        raise ConfigError(f"rule {rule}: setting '{where}' is {node}, which has no canonical form; give a "
                          "finite number")
    elif node is not None and not isinstance(node, (str, int, float, bool)):
        raise ConfigError(f"rule {rule}: setting '{where}' is a {type(node).__name__} ({node!r}), which has "
                          "no canonical form; give a string, number, boolean, list or mapping")


def serialized(spec: dict) -> str:
    """A spec's text, order included, as Snakemake compares params (their ``repr``)."""
    return json.dumps(spec, allow_nan=False, separators=(",", ":"))


# -- the settings a job's result depends on -------------------------------------------------------

def encoder_spec(cfg: dict) -> dict:
    """What decides an embedding: the evaluation pooler and truncation."""
    return {key: cfg["evaluation"][key] for key in ENCODER_KEYS}


def evaluation_spec(kind, cfg: dict, wildcards: Mapping[str, str], members: list[str] | None = None) -> dict:
    """An evaluation rule's spec (:mod:`cselab.evaluation.kinds`): the encoder, the experiment,
    the kind's declared params and settings, and for a kind with a result per BEIR dataset the
    job's own datasets (its ``dataset``, or the ``members`` of a shared-corpus job), never the list."""
    spec = {"settings": encoder_spec(cfg), "experiment": wildcards["exp"], **kind.rule_params(cfg)}
    if kind.per_dataset:
        spec["datasets"] = list(members) if members else [wildcards["dataset"]]
    return canonical(spec, kind.rule)


def evaluation_params(kind, cfg: dict, members: list[str] | None = None) -> dict[str, Any]:
    """The ``params:`` of an evaluation rule, or of a shared-corpus job of ``members``: the spec
    of :func:`evaluation_spec`, its experiment the ``{exp}`` wildcard and, for a job of one BEIR
    dataset, its datasets a function of the ``{dataset}`` wildcard."""
    spec = evaluation_spec(kind, cfg, {"exp": "{exp}", "dataset": "{dataset}"}, members)
    if kind.per_dataset and not members:
        spec["datasets"] = lambda wc: [wc.dataset]
    return spec


@per_config
def _evaluation_cached(cfg: dict, kind: str, key: tuple, members: tuple) -> dict:
    from cselab.evaluation.kinds import evaluation_kinds

    return evaluation_spec(evaluation_kinds()[kind], cfg, dict(key), list(members) or None)


# -- data ------------------------------------------------------------------------------------------

@job_spec("prepare_corpus", "source", "download_dir")
def _prepare_corpus(cfg, wc):
    return {"source": cfg["data"]["corpus"], "download_dir": outputs.DOWNLOADS}


@job_spec("prepare_senteval", "source", "tasks", "extract_dir", "download_dir")
def _prepare_senteval(cfg, wc):
    from cselab.data.senteval import KNOWN_TASKS

    # every SentEval task, whatever the tables need: the manifest is an input of training (STS-B
    # dev) and must not change when a table is added
    return {"source": cfg["data"]["senteval"], "tasks": list(KNOWN_TASKS), "extract_dir": outputs.SENTEVAL_TREE,
            "download_dir": outputs.DOWNLOADS}


@job_spec("senteval_reads", "source", "sets")
def _senteval_reads(cfg, wc):
    from cselab.data.senteval import reads_sets
    from cselab.settings import typed_config

    tasks = typed_config(cfg).evaluation.transfer.tasks
    return {"source": cfg["data"]["senteval"], "sets": list(reads_sets(wc["reads"], list(tasks)))}


@job_spec("resolve_plm", "model")
def _resolve_plm(cfg, wc):
    return {"model": cfg["plms"][wc["plm"]]["model"]}


@job_spec("prepare_beir", "url", "path", "out_dir", "download_dir")
def _prepare_beir(cfg, wc):
    from pathlib import Path

    root = cfg["data"]["beir"].get("path")
    return {"url": cfg["data"]["beir"]["url"].format(name=wc["dataset"]),
            "path": str(Path(root) / wc["dataset"]) if root else None,
            "out_dir": outputs.path(outputs.BEIR_DATA, dataset=wc["dataset"]), "download_dir": outputs.DOWNLOADS}


@job_spec("prepare_stsb_retrieval", "out_dir", "download_dir")
def _prepare_stsb_retrieval(cfg, wc):
    return {"out_dir": outputs.STSB_RETRIEVAL_DATA, "download_dir": outputs.DOWNLOADS}


@job_spec("split_corpus")
def _split_corpus(cfg, wc):
    return {}


def _spans(cfg: dict) -> dict:
    from cselab.data.spans import segmentation_settings

    return segmentation_settings(cfg["spans"])


@job_spec("segment_shard", "settings")
def _segment_shard(cfg, wc):
    return {"settings": _spans(cfg)}


@job_spec("segment_corpus", "settings")
def _segment_corpus(cfg, wc):
    return {"settings": _spans(cfg)}


@job_spec("subsample", "min_words")
def _subsample(cfg, wc):
    return {"min_words": cfg["spans"]["min_words"]}


# -- training --------------------------------------------------------------------------------------

@job_spec("train", "spec", "artifacts")
def _train(cfg, wc):
    from cselab.pipeline import experiments

    return {"spec": experiments.experiment_spec(cfg, wc["exp"]),
            "artifacts": experiments.artifacts(experiments.typed_spec(cfg, wc["exp"]))}


@job_spec("pretrain", "spec", "artifacts")
def _pretrain(cfg, wc):
    from cselab.pipeline import experiments

    spec = experiments.pretraining_spec(cfg, wc["stage"], wc["plm"])
    return {"spec": spec, "artifacts": experiments.artifacts(spec)}


# -- reports -----------------------------------------------------------------------------------

@job_spec("table", "table", "columns", "rows", "bootstrap", winner=True)
def _table(cfg, wc, winner):
    from cselab.pipeline import targets

    return {"table": targets.table_params(cfg, wc["table"], winner), "columns": targets.table_columns(cfg, wc["table"]),
            "rows": targets.table_rows(cfg, wc["table"], winner), "bootstrap": cfg["evaluation"]["bootstrap"]}


@job_spec("leakage_audit", "corpora", "ngram", "beir")
def _leakage_audit(cfg, wc):
    from pathlib import Path

    from cselab.pipeline import targets

    # the BEIR datasets prepared so far: the audit reads their queries
    folders = {d: outputs.path(outputs.BEIR_DATA, dataset=d) for d in cfg["evaluation"]["beir"]["datasets"]}
    return {"corpora": targets.leakage_corpora(cfg), "ngram": cfg["evaluation"]["leakage"]["ngram"],
            "beir": {d: folder for d, folder in folders.items() if Path(folder).is_dir()}}


@job_spec("seed_power", "options", "inputs", "baseline", "bootstrap", winner=True)
def _seed_power(cfg, wc, winner):
    from cselab.pipeline import targets

    return {"options": cfg["evaluation"]["seed_power"], "inputs": targets.seed_power_inputs(cfg, winner),
            "baseline": targets.seed_power_baseline(cfg, winner), "bootstrap": cfg["evaluation"]["bootstrap"]}


@job_spec("protocol_table", "options", "checkpoints", winner=True)
def _protocol_table(cfg, wc, winner):
    from cselab.pipeline import targets

    return {"options": cfg["evaluation"]["protocols"], "checkpoints": targets.protocol_checkpoints(cfg, winner)}


#: the seed planner's settings a sweep report reads (the power of the seeds that would separate two points)
SWEEP_SEED_POWER = ("power",)


@job_spec("sweep", "sweep", "points", "bootstrap", "seed_power")
def _sweep(cfg, wc):
    from cselab.pipeline import targets

    seed_power = cfg["evaluation"]["seed_power"]
    return {"sweep": targets.sweep_params(cfg, wc["sweep"]), "points": targets.sweep_points(cfg, wc["sweep"]),
            "bootstrap": cfg["evaluation"]["bootstrap"],
            "seed_power": {k: seed_power[k] for k in SWEEP_SEED_POWER if k in seed_power}}


@job_spec("figure", "figure", "labels", "values", "settings")
def _figure(cfg, wc):
    from cselab.pipeline import targets

    ids = targets.figure_experiments(cfg, wc["figure"])
    return {"figure": {"name": wc["figure"], **cfg["figures"][wc["figure"]]},
            "labels": [(label, exp_id, f"exp{n}") for n, (label, exp_id) in enumerate(ids.items())],
            "values": targets.figure_values(cfg, wc["figure"]), "settings": encoder_spec(cfg)}


#: config sections no job's cost depends on
COST_PLAN_IGNORES = ("mlflow", "hub")


@job_spec("cost_plan", "cfg", "snakemake", "snakefile")
def _cost_plan(cfg, wc):
    from pathlib import Path

    # the whole config but tracking and the Hub: the plan prices every job, resources and processes included
    return {"cfg": {k: v for k, v in cfg.items() if k not in COST_PLAN_IGNORES},
            "snakemake": [sys.executable, "-m", "snakemake"],
            "snakefile": str(Path(__file__).resolve().parents[2] / "Snakefile")}


# -- exports ------------------------------------------------------------------------------------

@job_spec("mteb_results", "sources")
def _mteb_results(cfg, wc):
    from cselab.pipeline import targets

    return {"sources": targets.mteb_sources(cfg, wc["exp"])}


@job_spec("mteb_check", "entries", "options", "settings", winner=True)
def _mteb_check(cfg, wc, winner):
    from cselab.pipeline import targets

    return {"entries": targets.mteb_check_inputs(cfg, winner), "options": cfg["export"]["mteb_check"],
            "settings": encoder_spec(cfg)}


@job_spec("model_card", "spec", "options", "settings", "bootstrap")
def _model_card(cfg, wc):
    from cselab.pipeline import experiments

    return {"spec": experiments.experiment_spec(cfg, wc["exp"]), "options": cfg["export"]["card"],
            "settings": encoder_spec(cfg), "bootstrap": cfg["evaluation"]["bootstrap"]}


@job_spec("export_onnx", "options", "settings")
def _export_onnx(cfg, wc):
    return {"options": cfg["export"]["onnx"], "settings": encoder_spec(cfg)}


@job_spec("export_model")
def _export_model(cfg, wc):
    return {}


@job_spec("push", "hub")
def _push(cfg, wc):
    return {"hub": cfg["hub"]}


@job_spec("push_sweep", "winner", winner=True)
def _push_sweep(cfg, wc, winner):
    return {"winner": winner(wc["sweep"]) if winner else None}
