"""The registry of evaluation kinds: each kind is declared once, with :func:`evaluation` on its
job function, and everything else is derived from the declaration: its result files
(:data:`cselab.pipeline.outputs.RESULT`), its rule ``evaluate_<name>`` (generated in
``rules/evaluate.smk``: inputs, outputs, params, log, benchmark, threads, resources), the job's
dispatch (:func:`cselab.pipeline.jobs.evaluate.evaluate`), its default price in the cost plan
(:mod:`cselab.pipeline.cost`) and, where it declares a settings dataclass, its config section
``evaluation.<name>`` in the schema (:func:`settings_schema`).

Importable without torch: a kind's module imports its heavy implementation inside the job
function, at job time. The built-in kinds are the modules of this package (scanned once, no list
to edit); a kind of one's own is a module named under ``plugins:`` in the config.

A job function takes the job's ``snakemake`` object and returns ``(compute, params)``:
``compute(model)`` gets a :class:`~cselab.evaluation.encoding.ModelEncoder` and returns
``{"scores": {...}, ...}`` (``"pairs"``: per-item predictions, written to the rule's ``pairs``
output); ``params`` is what the MLflow run logs besides the encoder settings (or None).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

#: what a rule can read (``inputs``' values; the workflow maps each to its file), besides
#: ``result:<name>``, another kind's result of the same experiment
INPUTS = ("model", "trained_model", "senteval", "beir_dataset", "stsb_retrieval_dataset")


@dataclass(frozen=True)
class EvaluationKind:
    """An evaluation kind (see the module docstring).

    ``results``: result name -> file under the experiment's folder (``{dataset}`` in it: one file
    per BEIR dataset); the first is the rule's output, each further ``<name>_<key>`` its output
    ``<key>`` (``sts_pairs`` -> ``pairs``). ``inputs``: rule input -> what it reads
    (:data:`INPUTS`, ``result:<name>``). ``params``: the job's params besides ``settings`` (the
    encoder) and ``experiment``; a callable value is computed from the config. ``settings``: a
    dataclass of the kind's own ``evaluation.<name>`` settings (its fields' defaults), checked by
    the schema and passed as ``params.<name>``. ``resources``: the rule's; a callable value gets
    (BEIR datasets of the job, config). ``encodes``: the :data:`cselab.reporting.cost.EVAL_SETS`
    entry it encodes (or a callable of the config naming it), its default price; None: the job's
    start alone. ``senteval``: what a kind reading ``senteval`` reads of it, by name
    (:data:`cselab.data.senteval.READS`; a callable of the config): the records of those files are
    its data inputs, so a change to another file reruns it not; None: the whole tree's manifest."""

    name: str
    job: Callable
    results: dict[str, str]
    inputs: dict[str, str] = field(default_factory=lambda: {"model": "model", "senteval": "senteval"})
    params: dict[str, Any] = field(default_factory=dict)
    settings: type | None = None
    threads: int = 8
    resources: dict[str, Any] = field(default_factory=lambda: {"mem_mb": 8000, "runtime": 60})
    encodes: str | Callable[[dict], str] | None = None
    senteval: tuple[str, ...] | Callable[[dict], tuple[str, ...]] | None = None

    @property
    def rule(self) -> str:
        return f"evaluate_{self.name}"

    @property
    def per_dataset(self) -> bool:
        """One result per BEIR dataset (``{dataset}`` in its result file)."""
        return "{dataset}" in next(iter(self.results.values()))

    def outputs(self) -> tuple[list[str], dict[str, str]]:
        """The rule's outputs as result names: the unnamed one, then ``key -> result name``."""
        first, *rest = self.results
        return [first], {r.removeprefix(f"{self.name}_"): r for r in rest}

    def rule_params(self, cfg: dict) -> dict:
        """The job's params besides ``settings`` and ``experiment``: the declared ones, then the
        kind's own settings (defaults filled in) under its name."""
        out = {k: v(cfg) if callable(v) else v for k, v in self.params.items()}
        if self.settings is not None:
            out[self.name] = self.settings_of(cfg)
        return out

    def settings_of(self, cfg: dict) -> dict:
        """``evaluation.<name>`` over the settings dataclass's defaults."""
        return dataclasses.asdict(self.settings(**config_section(cfg, self.name)))

    def eval_set(self, cfg: dict) -> str | None:
        return self.encodes(cfg) if callable(self.encodes) else self.encodes

    def senteval_reads(self, cfg: dict) -> tuple[str, ...] | None:
        """What of SentEval the kind's job reads (:data:`cselab.data.senteval.READS`; None: all of it)."""
        return tuple(self.senteval(cfg)) if callable(self.senteval) else self.senteval


def config_section(cfg: dict, name: str) -> dict:
    """The config's plain ``evaluation.<name>`` section (empty if absent): what a kind's params
    and resources are computed from at planning time (the params stay the config's own dicts)."""
    evaluation = cfg.get("evaluation") or {}
    return evaluation.get(name) or {}


def typed_section(cfg: dict, cls: type, name: str):
    """The config's ``evaluation.<name>`` section as the settings dataclass ``cls`` (missing
    keys: their defaults)."""
    from cselab.settings import from_dict

    return from_dict(cls, config_section(cfg, name), where=f"evaluation.{name}")


_KINDS: dict[str, EvaluationKind] = {}
_SCANNED = False


def evaluation(name: str, *, results: Mapping[str, str], inputs: Mapping[str, str] | None = None,
               params: Mapping[str, Any] | None = None, settings: type | None = None, threads: int = 8,
               resources: Mapping[str, Any] | None = None, encodes=None, senteval=None):
    """Register the decorated job function as evaluation kind ``name`` (:class:`EvaluationKind`)."""
    inputs = dict(inputs) if inputs is not None else {"model": "model", "senteval": "senteval"}
    unknown = [v for v in inputs.values() if v not in INPUTS and not v.startswith("result:")]
    if unknown:
        raise ValueError(f"evaluation kind {name!r} reads {unknown}; a kind reads any of {INPUTS} or result:<name>")
    if settings is not None and not dataclasses.is_dataclass(settings):
        raise ValueError(f"evaluation kind {name!r}: settings must be a dataclass, not {settings!r}")
    if not results:
        raise ValueError(f"evaluation kind {name!r} declares no result")

    def register(job):
        kind = EvaluationKind(name, job, dict(results), inputs, dict(params or {}), settings, threads,
                              dict(resources) if resources is not None else {"mem_mb": 8000, "runtime": 60}, encodes,
                              tuple(senteval) if isinstance(senteval, (list, tuple)) else senteval)
        known = {r: k.name for k in _KINDS.values() if k.name != name for r in k.results}
        taken = [r for r in kind.results if r in known]
        if taken:
            raise ValueError(f"evaluation kind {name!r}: result {taken[0]!r} is evaluation kind "
                             f"{known[taken[0]]!r}'s")
        _KINDS[name] = kind
        return job

    return register


def evaluation_kinds() -> dict[str, EvaluationKind]:
    """Every evaluation kind: the modules of this package (scanned once), and those registered
    since (plugins)."""
    global _SCANNED
    if not _SCANNED:
        _SCANNED = True
        for module in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{module.name}")
    return _KINDS


def kind_of_rule(rule: str) -> EvaluationKind | None:
    """The kind of an evaluation rule (a shared-corpus job ``<rule>_shared_<group>``: its kind's)."""
    by_rule = {k.rule: k for k in evaluation_kinds().values()}
    return by_rule.get(rule) or by_rule.get(rule.split("_shared_")[0])


def result_files() -> dict[str, str]:
    """Every result name -> its file under the experiment's folder."""
    return {r: f for k in evaluation_kinds().values() for r, f in k.results.items()}


def settings_schema(kind: EvaluationKind) -> dict:
    """A kind's settings dataclass as the JSON schema of ``evaluation.<name>``: each field's type
    from its annotation plus its constraints (:func:`cselab.settings.base.schema_of`); no other keys."""
    from cselab.settings.base import schema_of

    return schema_of(kind.settings)
