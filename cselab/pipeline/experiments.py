"""Experiments: PLM + method + settings + seed, named by a readable id, and the specs of their jobs.

An *experiment* is named by a readable id: ``<name>-s<seed>`` for trained models
(``compcse-bert-base-s42``) and ``<name>`` for the untrained PLM (``untrained-bert-base``). Its
settings are merged in this order, later wins: global ``training`` < ``plms.<plm>.training`` <
``methods.<m>.training`` < ``experiments.<name>.training``; the same for ``options`` and, per
auxiliary objective, for ``auxiliaries`` (an experiment setting an auxiliary to null drops it). A
*pretraining stage* (``pretraining.<stage>``) is built once per PLM that an experiment needs it for.

Every function here reads a config that :func:`cselab.pipeline.config.validate` resolved.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any

from cselab.errors import ConfigError
from cselab.pipeline import outputs
from cselab.settings.base import per_config
from cselab.settings.spec import Component, ExperimentSpec
from cselab.settings.training import OPERATIONAL, Training  # noqa: F401 (OPERATIONAL: the config layer's name for it)

#: the prefix of an entry (a table's experiment, an export, the seed planner's) that stands for a
#: sweep's winner: ``sweep:<name>``
TABLE_ENTRY = "sweep:"


def entry_sweep(entry) -> str | None:
    """The sweep an experiment entry names (``sweep:<s>``: its winner), or None for an experiment."""
    return entry[len(TABLE_ENTRY):] if isinstance(entry, str) and entry.startswith(TABLE_ENTRY) else None

UNTRAINED = "untrained"

_SEED_SUFFIX = re.compile(r"^(?P<name>.+)-s(?P<seed>\d+)$")

#: ``methods:`` entries renamed to their method's own name (one spelling per method: an entry named
#: after a registered method trains it): the entry's key -> its former key, which the specs of its
#: experiments keep as their ``method``. A spec is a train job's params (Snakemake's rerun
#: trigger) and its checkpoints' fingerprint: the experiments trained before the rename are
#: neither replanned nor retrained, and their tables and cards read as before.
RENAMED_METHODS = {"simcse_edits": "simcse-edits"}


def expand_methods_table(cfg: dict, tname: str) -> None:
    """A ``methods`` table: one experiment per configured method on ``plm`` with the table's
    training overrides. An experiment with exactly those settings is reused; otherwise
    ``bench-<method>-<plm>`` is added."""
    table = cfg["tables"][tname]
    plm = table["plm"]
    if plm not in cfg["plms"]:
        raise ConfigError(f"config key 'tables.{tname}.plm': unknown PLM {plm!r}; "
                          f"defined under 'plms': {', '.join(sorted(cfg['plms']))}")
    methods = table.get("methods") or list(cfg["methods"])
    for i, method in enumerate(methods):
        if method not in cfg["methods"]:
            raise ConfigError(f"config key 'tables.{tname}.methods[{i}]': unknown method {method!r}; "
                              f"valid methods: {', '.join(sorted(cfg['methods']))}")
    names = []
    for method in methods:
        entry = {"plm": plm, "method": method, **({"training": table["training"]} if table.get("training") else {})}
        name = f"bench-{method}-{plm}"
        cfg["experiments"].setdefault(name, entry)
        wanted = _comparable(cfg, name)
        same = [n for n, e in cfg["experiments"].items()
                if n != name and e["method"] == method and seeds_of(cfg, n) == seeds_of(cfg, name)
                and _comparable(cfg, n) == wanted]
        if same and cfg["experiments"][name] == entry:
            del cfg["experiments"][name]
            name = same[0]
        names.append(name)
    table["experiments"] = names


def _comparable(cfg: dict, name: str) -> dict:
    spec = merge_experiment(cfg, name)
    spec.pop("name")
    return spec


def _canonical(method: str, options: dict) -> dict:
    """A method's options under their current names (a former name is an alias: the same experiment)."""
    from cselab.training.methods import find_config

    cls = None if method == UNTRAINED else find_config(method)
    return cls.canonical_options(options) if cls else dict(options)


def merged_training(cfg: dict, name: str | None = None, stage: str | None = None) -> dict[str, Any]:
    """The one merge of training settings, later wins: ``training`` < ``plms.<plm>.training`` <
    ``methods.<m>.training`` < ``experiments.<name>.training`` for an experiment, ``training`` <
    ``pretraining.<stage>.training`` for a pretraining stage. Every reader of an experiment's or a
    stage's settings goes through it: its spec (what it computes), its operational settings (how it
    runs, :func:`operational_settings`), the config's checks and the cost plan."""
    if stage is not None:
        layers = [cfg["pretraining"][stage]]
    else:
        exp = cfg["experiments"][name]
        layers = [cfg["plms"][exp["plm"]], cfg["methods"].get(exp["method"], {}), exp]
    merged = dict(cfg["training"])
    for layer in layers:
        merged.update(layer.get("training") or {})
    return merged


def merge_experiment(cfg: dict, name: str) -> dict:
    exp = cfg["experiments"][name]
    plm = cfg["plms"][exp["plm"]]
    method = cfg["methods"].get(exp["method"], {})
    training = merged_training(cfg, name)
    primary = method.get("objective", UNTRAINED)
    options = {**_canonical(primary, method.get("options", {})), **_canonical(primary, exp.get("options", {}))}
    auxiliaries = {aux: {**entry, "options": _canonical(aux, entry.get("options", {}))}
                   for aux, entry in copy.deepcopy(method.get("auxiliaries", {})).items() if entry is not None}
    for aux, override in exp.get("auxiliaries", {}).items():
        if override is None:
            auxiliaries.pop(aux, None)
            continue
        override = {**override, "options": _canonical(aux, override.get("options", {}))}
        if aux in auxiliaries:
            auxiliaries[aux] = {**auxiliaries[aux], **override,
                                "options": {**auxiliaries[aux].get("options", {}), **override["options"]}}
        else:
            auxiliaries[aux] = override
    for aux in auxiliaries.values():
        aux.setdefault("weight", 1.0)
        aux.setdefault("options", {})
    return {"name": name, "plm": exp["plm"], "model": plm["model"],
            "method": RENAMED_METHODS.get(exp["method"], exp["method"]), "objective": primary,
            "weight": exp.get("weight", method.get("weight", 1.0)), "options": options,
            "auxiliaries": auxiliaries, "signature": "+".join([primary, *sorted(auxiliaries)]), "training": training}


def seeds_of(cfg: dict, name: str) -> list[int]:
    return list(cfg["experiments"][name].get("seeds", cfg["seeds"]))


def experiment_ids(cfg: dict, names: list[str]) -> list[str]:
    """Expand experiment names into ids, one per seed for trained experiments."""
    ids = []
    for name in names:
        if cfg["experiments"][name]["method"] == UNTRAINED:
            ids.append(name)
        else:
            ids.extend(f"{name}-s{seed}" for seed in seeds_of(cfg, name))
    return ids


def parse_id(cfg: dict, exp_id: str) -> tuple[str, int | None]:
    """Split an experiment id into (name, seed); raises ConfigError for an unknown id."""
    if exp_id in cfg["experiments"] and cfg["experiments"][exp_id]["method"] == UNTRAINED:
        return exp_id, None
    m = _SEED_SUFFIX.match(exp_id)
    if m and m["name"] in cfg["experiments"] and cfg["experiments"][m["name"]]["method"] != UNTRAINED:
        return m["name"], int(m["seed"])
    raise ConfigError(f"unknown experiment id {exp_id!r}: expected <name>-s<seed> for one of "
                      f"{', '.join(sorted(cfg['experiments']))}")


# A job's spec (a Snakemake rerun trigger and the checkpoints' fingerprint) holds exactly the
# training settings that can change its output, so a setting that cannot never retrains anything:
# - OPERATIONAL settings (declared beside the Training settings) change how a job runs, never its numbers;
# - USED_BY_METHODS are read only by the methods that declare them (MethodConfig.used_training_keys:
#   the contrastive temperature, the pooled encoder forward's pooler and unpadded, BatchNorm heads'
#   statistics); a trained experiment's STS-B dev scoring reads pooler and unpadded too;
# - SCORING settings exist only where STS-B dev is scored: training jobs, not pretraining stages.


USED_BY_METHODS = ("temperature", "pooler", "unpadded", "batchnorm_stats")


SCORING = ("eval_steps", "eval_at_end")


def _job_training(training: dict, components: tuple[Component, ...], scored: bool) -> dict:
    """The settings of ``training`` the job's methods (and, ``scored``, its dev scoring) can use."""
    from cselab.training.methods import method_config

    used = {"pooler", "unpadded"} if scored else set()
    for entry in components:
        cls = method_config(entry.method)
        used.update(cls.used_training_keys(cls.check_options(entry.options)))
    drop = set(OPERATIONAL) | (set(USED_BY_METHODS) - used) | (set() if scored else set(SCORING))
    return {k: v for k, v in training.items() if k not in drop}


def experiment_spec(cfg: dict, exp_id: str) -> dict[str, Any]:
    """Everything that determines an experiment's training run (and nothing about evaluation)."""
    from cselab.training.methods import spec_components

    name, seed = parse_id(cfg, exp_id)
    spec = merge_experiment(cfg, name)
    spec.update(id=exp_id, seed=seed)
    spec["training"] = ({} if spec["objective"] == UNTRAINED  # nothing is trained
                        else _job_training(spec["training"], spec_components(spec), scored=True))
    return spec


def pretraining_spec(cfg: dict, stage: str, plm: str) -> dict[str, Any]:
    """A pretraining stage for one PLM: global ``training`` < ``pretraining.<stage>.training``,
    without the settings a stage cannot use (it is not scored on STS-B dev)."""
    if stage not in cfg.get("pretraining", {}):
        defined = ", ".join(sorted(cfg.get("pretraining", {}))) or "none"
        raise ConfigError(f"unknown pretraining stage {stage!r}; defined: {defined}")
    if plm not in cfg["plms"]:
        raise ConfigError(f"unknown PLM {plm!r} for pretraining stage {stage!r}")
    entry = cfg["pretraining"][stage]
    options = _canonical(entry["method"], entry.get("options", {}))
    training = _job_training(merged_training(cfg, stage=stage), (Component(entry["method"], 1.0, options),),
                             scored=False)
    return {"id": f"{stage}-{plm}", "name": stage, "plm": plm, "model": cfg["plms"][plm]["model"],
            "method": stage, "objective": entry["method"], "weight": 1.0, "options": options,
            "auxiliaries": {}, "signature": entry["method"], "training": training,
            "seed": entry.get("seed", cfg["seeds"][0])}  # a stage runs once per PLM: the first seed unless its own


# a plan asks for each experiment's spec once per table, figure and job that reads it: typed once
# per validated config and experiment (read-only, as for :func:`cselab.settings.typed_config`)
@per_config
def typed_spec(cfg: dict, exp_id: str) -> ExperimentSpec:
    """:func:`experiment_spec`, typed; built once per validated config (frozen, so shared)."""
    return ExperimentSpec.from_dict(experiment_spec(cfg, exp_id))


def trained_spec(cfg: dict, exp_id: str) -> ExperimentSpec:
    """:func:`typed_spec` of an experiment that trains; an untrained one (``method: untrained``)
    has no training job and so no model folder: asking for it (a model card, an ONNX file, an
    export folder) is a ConfigError that says what it has instead."""
    spec = typed_spec(cfg, exp_id)
    if spec.objective == UNTRAINED:
        raise ConfigError(
            f"experiment {exp_id!r} is untrained (method: {UNTRAINED}): nothing trains it, so there is no "
            f"{outputs.path(outputs.MODEL, exp=exp_id)}; its evaluations read its PLM "
            f"({outputs.path(outputs.PLM, plm=spec.plm)}), and model cards, ONNX files and export folders are "
            "made for trained experiments")
    return spec


def operational_settings(cfg: dict, exp_id: str | None = None, stage: str | None = None) -> dict[str, Any]:
    """The settings of an experiment (or pretraining stage) that change how it runs, not what it
    computes (:data:`OPERATIONAL`): what its job reads besides its spec."""
    training = merged_training(cfg, stage=stage) if stage is not None else merged_training(cfg, parse_id(cfg, exp_id)[0])
    return {k: training[k] for k in OPERATIONAL if k in training}


def artifacts(spec: ExperimentSpec | dict) -> dict[str, str]:
    """The upstream artifacts a spec's methods declared: role -> the pretraining stage's output."""
    from cselab.training.methods import required_artifacts

    spec = ExperimentSpec.of(spec)
    if spec.objective == UNTRAINED:
        return {}
    return {role: outputs.path(outputs.PRETRAINED, stage=stage, plm=spec.plm)
            for role, stage in required_artifacts(spec).items()}


def is_trained(cfg: dict, exp_id: str) -> bool:
    return parse_id(cfg, exp_id)[1] is not None


def full_options(spec: ExperimentSpec | dict) -> dict:
    """What published rows match on: the primary method's options with its defaults filled in,
    its ``weight``, and every auxiliary's options and weight as ``<auxiliary>.<option>`` /
    ``<auxiliary>.weight``."""
    import dataclasses

    from cselab.training.methods import method_config

    spec = ExperimentSpec.of(spec)
    if spec.objective == UNTRAINED:
        return {}
    primary, *auxiliaries = spec.components()
    out = {**dataclasses.asdict(method_config(primary.method).check_options(primary.options)), "weight": primary.weight}
    for aux in auxiliaries:
        options = dataclasses.asdict(method_config(aux.method).check_options(aux.options))
        out.update({f"{aux.method}.{k}": v for k, v in options.items()}, **{f"{aux.method}.weight": aux.weight})
    return out


def corpus_file(spec: ExperimentSpec | dict) -> str:
    """The training file of an experiment: the corpus, its subsampled expansion, or the corpus
    without its held-out slice."""
    return training_file(ExperimentSpec.of(spec).training)


def training_file(training: Training) -> str:
    """The training file of these training settings (see :func:`corpus_file`)."""
    strategy, holdout = training.subsampling, training.holdout
    if holdout:
        return outputs.path(outputs.CORPUS_TRAIN_SPLIT, fraction=holdout)
    return outputs.CORPUS if strategy == "none" else outputs.path(outputs.SUBSAMPLED, strategy=strategy)


def training_mem_mb(spec: ExperimentSpec | dict, processes: int = 1) -> int:
    """The host memory a training job reserves (its ``mem_mb``), from its model and batch: 3 GB
    for the process (Python, torch, the tokenised corpus), 16 bytes a parameter (weights,
    gradients and Adam's two moments, all fp32, on the CPU) and the activations of one forward
    (each view's rows x max_len x hidden x layers x 24 bytes; with ``chunk_size``, one chunk),
    for each process; a model whose size is unknown: 32 GB."""
    from cselab.errors import CselabError
    from cselab.reporting.cost import model_shape

    spec = ExperimentSpec.of(spec)
    try:
        shape = model_shape(spec.model)
    except (CselabError, OSError, KeyError, TypeError, ValueError):
        return 32000
    t = spec.training
    params = shape.nonembedding + (shape.vocab + shape.positions) * shape.hidden
    chunk = t.chunk_size if isinstance(t.chunk_size, int) else t.batch_size  # auto: whole, as on the CPU
    rows = 3 * min(t.batch_size, chunk)  # up to three views (CompCSE, the edits)
    activations = rows * t.max_len * shape.hidden * shape.layers * 24
    return int(math.ceil((3e9 + 16 * params + activations) * processes / 1e9)) * 1000
