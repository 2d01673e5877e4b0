"""Configuration: schema validation, data-dir resolution and experiment expansion.

The workflow's config (``config.yaml`` merged with ``--configfile``/``--config``) is checked
against ``cselab/schema/config.schema.json`` (every object forbids unknown keys, so a typo is an
error naming the key) and against the method registry (each method's options).

An *experiment* is PLM + method + settings + seed, named by a readable id:
``<name>-s<seed>`` for trained models (``compcse-bert-base-s42``) and ``<name>`` for the
untrained PLM (``untrained-bert-base``). Its settings are merged in this order, later wins:
global ``training`` < ``plms.<plm>.training`` < ``methods.<m>.training`` <
``experiments.<name>.training``; the same for ``options`` and, per auxiliary objective, for
``auxiliaries`` (an experiment setting an auxiliary to null drops it). A *pretraining stage*
(``pretraining.<stage>``) is built once per PLM that an experiment needs it for.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

from cselab.errors import ConfigError, check_schema
from cselab.pipeline import outputs
from cselab.reporting.tables import TABLE_KINDS

UNTRAINED = "untrained"
CORPUS_FILENAMES = ("wiki1m_for_simcse.txt", "wiki1m_head.txt")
SENTEVAL_DIRNAMES = ("senteval", "downstream")
_SEED_SUFFIX = re.compile(r"^(?P<name>.+)-s(?P<seed>\d+)$")


def load_schema() -> dict:
    """The config schema, with the table and figure kinds enumerated from their registries
    (:mod:`cselab.reporting.kinds`): a kind is declared once, where it is built."""
    from cselab.reporting.kinds import figure_kinds, table_kinds

    schema = json.loads(resources.files("cselab").joinpath("schema/config.schema.json").read_text())
    for section, kinds in (("tables", table_kinds()), ("figures", figure_kinds())):
        schema["properties"][section]["additionalProperties"]["properties"]["kind"] = {"enum": sorted(kinds)}
    return schema


def check_finite(node, where: str = "") -> None:
    """No setting anywhere in the config is NaN or infinite (YAML's ``.nan``, ``.inf``): a JSON
    schema's bounds let them through (every comparison with NaN is false), so they are refused
    here, naming the key."""
    if isinstance(node, dict):
        for key, value in node.items():
            check_finite(value, f"{where}.{key}" if where else str(key))
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            check_finite(value, f"{where}[{i}]")
    elif isinstance(node, float) and not math.isfinite(node):
        raise ConfigError(f"config key '{where}': {node} is not a finite number; give a number, or null where the "
                          "setting allows it")


def validate(config: dict) -> dict:
    """Validate ``config`` against the schema and the method registry; return a resolved deep copy
    (``methods`` tables expanded into their experiments, ``data_dir`` into data paths).

    Raises :class:`ConfigError` with one message naming the first offending key.
    """
    cfg = copy.deepcopy(dict(config))
    check_finite(cfg)
    check_schema(cfg, load_schema())

    for name, stage in cfg.get("pretraining", {}).items():
        _check_components(cfg, {"objective": stage["method"], "options": stage.get("options", {}), "auxiliaries": {}},
                          f"pretraining.{name}", primary_key="method")
    for name, method in cfg["methods"].items():
        _check_components(cfg, {"objective": method["objective"], "options": method.get("options", {}),
                                "auxiliaries": method.get("auxiliaries", {})}, f"methods.{name}")
    for name, exp in cfg["experiments"].items():
        where = f"experiments.{name}"
        if exp["plm"] not in cfg["plms"]:
            raise ConfigError(f"config key '{where}.plm': unknown PLM {exp['plm']!r}; "
                              f"defined under 'plms': {', '.join(sorted(cfg['plms']))}")
        if exp["method"] != UNTRAINED and exp["method"] not in cfg["methods"]:
            valid = sorted(cfg["methods"]) + [UNTRAINED]
            raise ConfigError(f"config key '{where}.method': unknown method {exp['method']!r}; "
                              f"valid methods: {', '.join(valid)}")
        if exp["method"] != UNTRAINED:
            _check_components(cfg, _merge_experiment(cfg, name), where, primary_key=None)
    for tname, table in cfg["tables"].items():
        if table["kind"] == "methods":
            _expand_methods_table(cfg, tname)
        elif "experiments" not in table:
            raise ConfigError(f"config key 'tables.{tname}' is missing a required entry: 'experiments' is a "
                              f"required property (a {table['kind']} table lists its experiments)")
        for i, exp in enumerate(table["experiments"]):
            if exp not in cfg["experiments"]:
                raise ConfigError(f"config key 'tables.{tname}.experiments[{i}]': unknown experiment "
                                  f"{exp!r}; defined under 'experiments': {', '.join(sorted(cfg['experiments']))}")
            if TABLE_KINDS[table["kind"]].trained_only and cfg["experiments"][exp]["method"] == UNTRAINED:
                raise ConfigError(f"config key 'tables.{tname}.experiments[{i}]': {exp!r} is untrained; a "
                                  f"{table['kind']} table needs training runs (e.g. their training head)")
    _check_table_reports(cfg)
    _check_export(cfg)
    _check_shared_corpora(cfg["evaluation"]["beir"])
    for fname, fig in cfg.get("figures", {}).items():
        fig["experiments"] = {k: v for k, v in fig.get("experiments", {}).items() if v is not None}
        if fig.get("table"):  # every experiment of a table, labelled by its name
            if fig["table"] not in cfg["tables"]:
                raise ConfigError(f"config key 'figures.{fname}.table': unknown table {fig['table']!r}; defined "
                                  f"under 'tables': {', '.join(sorted(cfg['tables']))}")
            fig["experiments"].update({e: e for e in cfg["tables"][fig["table"]]["experiments"]
                                       if cfg["experiments"][e]["method"] != UNTRAINED})
        _check_figure(cfg, fname, fig)
    _check_training(cfg["training"], "training")  # the shared settings first: named where they are written
    for name in cfg["experiments"]:
        _check_training(_merge_experiment(cfg, name)["training"], f"experiments.{name}.training")
    for name, stage in cfg.get("pretraining", {}).items():
        _check_training({**cfg["training"], **stage.get("training", {})}, f"pretraining.{name}.training")
    _resolve_data_dir(cfg)
    return cfg


def _check_shared_corpora(beir: dict) -> None:
    """Each group of ``evaluation.beir.shared_corpora`` names configured or known BEIR datasets,
    each in one group."""
    from cselab.data.beir import BEIR_SIZES, shared_corpus_groups

    for name, members in (beir.get("shared_corpora") or {}).items():
        unknown = [m for m in members if m not in beir["datasets"] and m not in BEIR_SIZES]
        if unknown:  # a known BEIR dataset not configured is left out of the group
            raise ConfigError(f"config key 'evaluation.beir.shared_corpora.{name}': unknown dataset {unknown[0]!r}; "
                              f"valid: evaluation.beir.datasets or a BEIR dataset ({', '.join(sorted(BEIR_SIZES))})")
    try:
        shared_corpus_groups(beir)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _check_table_reports(cfg: dict) -> None:
    """The seed planner and the protocol table name a configured table (the planner's baseline:
    one of its experiments)."""
    for key in ("seed_power", "protocols"):
        table = cfg["evaluation"][key]["table"]
        if table not in cfg["tables"]:
            raise ConfigError(f"config key 'evaluation.{key}.table': unknown table {table!r}; defined under "
                              f"'tables': {', '.join(sorted(cfg['tables']))}")
    opts = cfg["evaluation"]["seed_power"]
    if opts["baseline"] and opts["baseline"] not in cfg["tables"][opts["table"]]["experiments"]:
        raise ConfigError(f"config key 'evaluation.seed_power.baseline': {opts['baseline']!r} is not an experiment "
                          f"of table {opts['table']!r}: {', '.join(cfg['tables'][opts['table']]['experiments'])}")


def _check_export(cfg: dict) -> None:
    """The exported tables and the MTEB check's experiments are configured ones."""
    for table in cfg["export"]["tables"] or []:
        if table not in cfg["tables"]:
            raise ConfigError(f"config key 'export.tables': unknown table {table!r}; defined under "
                              f"'tables': {', '.join(sorted(cfg['tables']))}")
    for name in cfg["export"]["mteb_check"]["experiments"]:
        if name not in cfg["experiments"]:
            raise ConfigError(f"config key 'export.mteb_check.experiments': unknown experiment {name!r} "
                              f"(defined under 'experiments')")


def _check_training(training: dict, where: str) -> None:
    """Rules across a job's merged training settings."""
    if training["holdout"] and training["subsampling"] != "none":
        raise ConfigError(f"config key '{where}.holdout': a held-out split and subsampling "
                          f"({training['subsampling']}) cannot be combined")
    if training["chunk_size"] and not training["keyed_dropout"]:
        raise ConfigError(f"config key '{where}.chunk_size': gradient caching replays dropout keyed by row; "
                          f"set training.keyed_dropout: true or chunk_size: null")


def _check_figure(cfg: dict, fname: str, fig: dict) -> None:
    """A figure's kind options (validated against the kind's declaration, defaults filled in)
    and its experiments (defined; trained where the kind draws training runs; checked by the
    kind; trained without the held-out slice where the kind reads it)."""
    from cselab.reporting.kinds import figure_kinds

    kind = figure_kinds()[fig["kind"]]
    _check_kind_options(fname, fig, kind)
    experiments = fig.get("experiments", {})
    if kind.reads and not experiments:
        raise ConfigError(f"config key 'figures.{fname}.experiments': a {fig['kind']} figure draws experiments; "
                          f"list them as legend label -> experiment name")
    for label, exp in experiments.items():
        where = f"figures.{fname}.experiments.{label}"
        if exp not in cfg["experiments"]:
            raise ConfigError(f"config key '{where}': unknown experiment {exp!r}; defined under "
                              f"'experiments': {', '.join(sorted(cfg['experiments']))}")
        trained = cfg["experiments"][exp]["method"] != UNTRAINED
        if kind.trained and not trained:
            raise ConfigError(f"config key '{where}': {exp!r} is untrained; a {fig['kind']} figure "
                              f"needs a training run")
        spec = _merge_experiment(cfg, exp)
        problem = kind.check(fig, spec) if kind.check else None
        if problem:
            raise ConfigError(f"config key '{where}': {exp!r} {problem}")
        if kind.heldout and trained and spec["training"]["holdout"] != fig["holdout"]:
            raise ConfigError(f"config key '{where}': {exp!r} must train without the held-out slice "
                              f"(training.holdout: {fig['holdout']}), or its statistics are on training data")


#: keys every figure has besides its kind's options
FIGURE_KEYS = ("kind", "title", "experiments", "table")


def _check_kind_options(fname: str, fig: dict, kind) -> None:
    """A figure's options against its kind's declared JSON-schema properties (one message naming
    the key), then the kind's defaults filled in."""
    sub = {"type": "object", "additionalProperties": False,
           "properties": {**{k: {} for k in FIGURE_KEYS}, **kind.options}}
    check_schema(fig, sub, where=f"figures.{fname}", context=f"figure kind {fig['kind']!r}")
    for key, value in kind.defaults().items():
        fig.setdefault(key, value)


def _check_components(cfg: dict, spec: dict, where: str, primary_key: str | None = "objective") -> None:
    """The primary and auxiliary methods of ``spec`` exist, take these roles, and accept their
    options; every artifact they require names a pretraining stage."""
    from cselab.training.method_config import method_config

    key = f"{where}.{primary_key}" if primary_key else f"{where}.method"
    primary = method_config(spec["objective"], where=key)
    stage = where.startswith("pretraining.")
    if not stage and "primary" not in primary.roles:
        raise ConfigError(f"config key '{key}': method {spec['objective']!r} is an auxiliary objective only; "
                          f"list it under 'auxiliaries' of a primary method")
    options = primary.check_options(spec["options"], where=f"{where}.options")
    required = dict(primary.requires(options))
    for name, aux in spec.get("auxiliaries", {}).items():
        if aux is None:
            continue
        cls = method_config(name, where=f"{where}.auxiliaries.{name}")
        if "auxiliary" not in cls.roles:
            raise ConfigError(f"config key '{where}.auxiliaries.{name}': method {name!r} cannot be an auxiliary "
                              f"objective (it is a primary method)")
        aux_options = cls.check_options(aux.get("options", {}), where=f"{where}.auxiliaries.{name}.options")
        required.update(cls.requires(aux_options))
    for role, stage_name in required.items():
        if stage_name not in cfg.get("pretraining", {}):
            defined = ", ".join(sorted(cfg.get("pretraining", {}))) or "none"
            raise ConfigError(f"config key '{where}': its methods need the pretraining stage {stage_name!r} "
                              f"(for {role}), which is not defined under 'pretraining' (defined: {defined})")


def _expand_methods_table(cfg: dict, tname: str) -> None:
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
    spec = _merge_experiment(cfg, name)
    spec.pop("name")
    return spec


def _resolve_data_dir(cfg: dict) -> None:
    """Point the data rules at ``data_dir`` (a folder holding the corpus, ``senteval/`` and
    optionally ``beir/<dataset>/``)."""
    data_dir = cfg.get("data_dir")
    if not data_dir:
        return
    root = Path(data_dir).expanduser().resolve()
    if not root.is_dir():
        raise ConfigError(f"config key 'data_dir': {data_dir!r} is not a directory")
    corpus, senteval = cfg["data"]["corpus"], cfg["data"]["senteval"]
    if not corpus.get("path"):
        found = [root / n for n in CORPUS_FILENAMES if (root / n).is_file()]
        if not found:
            raise ConfigError(f"config key 'data_dir': {root} holds none of {', '.join(CORPUS_FILENAMES)}; "
                              f"add the corpus there or set data.corpus.path")
        corpus["path"] = str(found[0])
    if not senteval.get("path"):
        found = [root / n for n in SENTEVAL_DIRNAMES if (root / n).is_dir()]
        if not found:
            raise ConfigError(f"config key 'data_dir': {root} has no {' or '.join(SENTEVAL_DIRNAMES)}/ folder; "
                              f"add the SentEval tree there or set data.senteval.path")
        senteval["path"] = str(found[0])
    beir = cfg["data"].setdefault("beir", {})
    if not beir.get("path") and (root / "beir").is_dir():
        beir["path"] = str(root / "beir")


def _canonical(method: str, options: dict) -> dict:
    """A method's options under their current names (a former name is an alias: the same experiment)."""
    from cselab.training.method_config import find_config

    cls = None if method == UNTRAINED else find_config(method)
    return cls.canonical_options(options) if cls else dict(options)


def _merge_experiment(cfg: dict, name: str) -> dict:
    exp = cfg["experiments"][name]
    plm = cfg["plms"][exp["plm"]]
    method = cfg["methods"].get(exp["method"], {})
    training = {**cfg["training"], **plm.get("training", {}), **method.get("training", {}),
                **exp.get("training", {})}
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
    return {"name": name, "plm": exp["plm"], "model": plm["model"], "method": exp["method"],
            "objective": primary, "weight": exp.get("weight", method.get("weight", 1.0)), "options": options,
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
# - OPERATIONAL settings change how a job runs (speed, memory, logging, processes), never its numbers;
# - USED_BY_METHODS are read only by the methods that declare them (Method.used_training_keys:
#   the contrastive temperature, the pooled encoder forward's pooler and unpadded, BatchNorm heads'
#   statistics); a trained experiment's STS-B dev scoring reads pooler and unpadded too;
# - SCORING settings exist only where STS-B dev is scored: training jobs, not pretraining stages.
OPERATIONAL = ("checkpoint_steps", "compile", "pad_to_multiple_of", "devices", "nodes", "dist_timeout_s",
               "owner_wait_s", "log_steps", "dev_batch_size", "chunk_size", "collapse", "peak_tflops")
USED_BY_METHODS = ("temperature", "pooler", "unpadded", "batchnorm_stats")
SCORING = ("eval_steps", "eval_at_end")


def _job_training(training: dict, components: list[dict], scored: bool) -> dict:
    """The settings of ``training`` the job's methods (and, ``scored``, its dev scoring) can use."""
    from cselab.training.method_config import method_config

    used = {"pooler", "unpadded"} if scored else set()
    for entry in components:
        cls = method_config(entry["method"])
        used.update(cls.used_training_keys(cls.check_options(entry["options"])))
    drop = set(OPERATIONAL) | (set(USED_BY_METHODS) - used) | (set() if scored else set(SCORING))
    return {k: v for k, v in training.items() if k not in drop}


def experiment_spec(cfg: dict, exp_id: str) -> dict[str, Any]:
    """Everything that determines an experiment's training run (and nothing about evaluation)."""
    from cselab.training.method_config import spec_components

    name, seed = parse_id(cfg, exp_id)
    spec = _merge_experiment(cfg, name)
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
    training = _job_training({**cfg["training"], **entry.get("training", {})},
                             [{"method": entry["method"], "options": options}], scored=False)
    return {"id": f"{stage}-{plm}", "name": stage, "plm": plm, "model": cfg["plms"][plm]["model"],
            "method": stage, "objective": entry["method"], "weight": 1.0, "options": options,
            "auxiliaries": {}, "signature": entry["method"], "training": training,
            "seed": entry.get("seed", cfg["seeds"][0])}  # a stage runs once per PLM: the first seed unless its own


def operational_settings(cfg: dict, exp_id: str | None = None, stage: str | None = None) -> dict[str, Any]:
    """The settings of an experiment (or pretraining stage) that change how it runs, not what it computes."""
    if stage is not None:
        training = {**cfg["training"], **cfg["pretraining"][stage].get("training", {})}
    else:
        training = _merge_experiment(cfg, parse_id(cfg, exp_id)[0])["training"]
    return {k: training[k] for k in OPERATIONAL if k in training}


def artifacts(spec: dict) -> dict[str, str]:
    """The upstream artifacts a spec's methods declared: role -> the pretraining stage's output."""
    from cselab.training.method_config import required_artifacts

    if spec["objective"] == UNTRAINED:
        return {}
    return {role: outputs.path(outputs.PRETRAINED, stage=stage, plm=spec["plm"])
            for role, stage in required_artifacts(spec).items()}


def is_trained(cfg: dict, exp_id: str) -> bool:
    return parse_id(cfg, exp_id)[1] is not None


def encoder_settings(cfg: dict) -> dict:
    """The settings that determine an embedding (shared by every evaluator and the cache key)."""
    ev = cfg["evaluation"]
    settings = {key: ev[key] for key in ("pooler", "max_len", "batch_size", "cache")}
    if ev.get("max_tokens"):  # only when set: results evaluated before the setting existed stay valid
        settings["max_tokens"] = ev["max_tokens"]
    return settings


def tracking_uri(cfg: dict) -> str:
    """``MLFLOW_TRACKING_URI`` wins over the config's ``mlflow.tracking_uri``."""
    return os.environ.get("MLFLOW_TRACKING_URI") or cfg["mlflow"]["tracking_uri"]




def full_options(spec: dict) -> dict:
    """What published rows match on: the primary method's options with its defaults filled in,
    its ``weight``, and every auxiliary's options and weight as ``<auxiliary>.<option>`` /
    ``<auxiliary>.weight``."""
    import dataclasses

    from cselab.training.method_config import method_config

    if spec["objective"] == UNTRAINED:
        return {}
    out = {**dataclasses.asdict(method_config(spec["objective"]).check_options(spec["options"])),
           "weight": spec["weight"]}
    for name, aux in spec.get("auxiliaries", {}).items():
        options = dataclasses.asdict(method_config(name).check_options(aux.get("options", {})))
        out.update({f"{name}.{k}": v for k, v in options.items()}, **{f"{name}.weight": aux["weight"]})
    return out


def corpus_file(spec: dict) -> str:
    """The training file of an experiment: the corpus, its subsampled expansion, or the corpus
    without its held-out slice."""
    strategy, holdout = spec["training"]["subsampling"], spec["training"]["holdout"]
    if holdout:
        return outputs.path(outputs.CORPUS_TRAIN_SPLIT, fraction=holdout)
    return outputs.CORPUS if strategy == "none" else outputs.path(outputs.SUBSAMPLED, strategy=strategy)
