"""Configuration: schema validation, data-dir resolution and experiment expansion.

The workflow's config (``config.yaml`` merged with ``--configfile``/``--config``) is checked
against ``cselab/schema/config.schema.json``. Every object in the schema forbids unknown keys,
so a typo such as ``learnig_rate`` is an error naming the key, not a silently ignored setting.

An *experiment* is PLM + method + settings + seed, named by a readable id:
``<name>-s<seed>`` for trained models (``compcse-bert-base-s42``) and ``<name>`` for the
untrained PLM (``untrained-bert-base``). Its settings are merged in this order, later wins:
global ``training`` < ``plms.<plm>.training`` < ``methods.<m>.training`` <
``experiments.<name>.training`` (and the same for objective ``options``).
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from cselab.errors import ConfigError

UNTRAINED = "untrained"
CORPUS_FILENAMES = ("wiki1m_for_simcse.txt", "wiki1m_head.txt")
SENTEVAL_DIRNAMES = ("senteval", "downstream")
_SEED_SUFFIX = re.compile(r"^(?P<name>.+)-s(?P<seed>\d+)$")


def load_schema() -> dict:
    return json.loads(resources.files("cselab").joinpath("schema/config.schema.json").read_text())


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def _explain(error: jsonschema.ValidationError, schema: dict) -> str:
    """Turn one jsonschema error into a sentence that names the config key."""
    key = _key(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        msgs = []
        for name in extra:
            full = f"{key}.{name}" if error.absolute_path else name
            hint = difflib.get_close_matches(name, allowed, n=1)
            did = f" (did you mean '{hint[0]}'?)" if hint else ""
            msgs.append(f"unknown config key '{full}'{did}; valid keys here: {', '.join(allowed)}")
        if msgs:
            return "; ".join(msgs)
    if error.validator == "required":
        return f"config key '{key}' is missing a required entry: {error.message}"
    if error.validator == "enum":
        return f"config key '{key}': {error.instance!r} is not one of {error.validator_value}"
    if error.validator == "type" and isinstance(error.instance, str):
        try:
            float(error.instance)
            return (f"config key '{key}': {error.instance!r} is a string, expected "
                    f"{error.validator_value}; YAML reads 3e-5 as text, write 3.0e-5")
        except ValueError:
            pass
    if error.validator == "propertyNames":
        return (f"config key '{key}': name {error.instance!r} may contain only letters, digits, "
                f"'.', '_' and '-'")
    return f"config key '{key}': {error.message}"


def validate(config: dict) -> dict:
    """Validate ``config`` against the schema and the registries; return a resolved deep copy.

    Raises :class:`ConfigError` with one message naming the first offending key.
    """
    from cselab.objectives import OBJECTIVES, objective_class

    cfg = copy.deepcopy(dict(config))
    schema = load_schema()
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: (len(e.absolute_path), _key(e.absolute_path)))
    if errors:
        more = f" ({len(errors) - 1} more problem(s) after fixing this one)" if len(errors) > 1 else ""
        raise ConfigError(_explain(errors[0], schema) + more)

    for name, method in cfg["methods"].items():
        if method["objective"] not in OBJECTIVES:
            raise ConfigError(f"config key 'methods.{name}.objective': unknown objective "
                              f"{method['objective']!r}; valid objectives: {', '.join(sorted(OBJECTIVES))}")
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
            spec = _merge_experiment(cfg, name)
            objective_class(spec["objective"]).check_options(spec["options"], where=f"{where}.options")
    for tname, table in cfg["tables"].items():
        for i, exp in enumerate(table["experiments"]):
            if exp not in cfg["experiments"]:
                raise ConfigError(f"config key 'tables.{tname}.experiments[{i}]': unknown experiment "
                                  f"{exp!r}; defined under 'experiments': {', '.join(sorted(cfg['experiments']))}")
    for fname, fig in cfg.get("figures", {}).items():
        for label, exp in fig["experiments"].items():
            where = f"figures.{fname}.experiments.{label}"
            if exp not in cfg["experiments"]:
                raise ConfigError(f"config key '{where}': unknown experiment {exp!r}; defined under "
                                  f"'experiments': {', '.join(sorted(cfg['experiments']))}")
            if fig["kind"] in CURVE_FIGURES and cfg["experiments"][exp]["method"] == UNTRAINED:
                raise ConfigError(f"config key '{where}': {exp!r} is untrained; a {fig['kind']} figure "
                                  f"draws training curves")
    _resolve_data_dir(cfg)
    return cfg


def _resolve_data_dir(cfg: dict) -> None:
    """Point the data rules at ``data_dir`` (a folder laid out like ``shared/data``)."""
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


def _merge_experiment(cfg: dict, name: str) -> dict:
    exp = cfg["experiments"][name]
    plm = cfg["plms"][exp["plm"]]
    method = cfg["methods"].get(exp["method"], {})
    training = {**cfg["training"], **plm.get("training", {}), **method.get("training", {}),
                **exp.get("training", {})}
    options = {**method.get("options", {}), **exp.get("options", {})}
    return {"name": name, "plm": exp["plm"], "model": plm["model"], "method": exp["method"],
            "objective": method.get("objective", UNTRAINED), "options": options, "training": training}


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


# Training settings that do not change the result: not part of the spec (a Snakemake rerun
# trigger), so switching checkpoints on for a cluster run retrains nothing.
OPERATIONAL = ("checkpoint_steps",)


def experiment_spec(cfg: dict, exp_id: str) -> dict[str, Any]:
    """Everything that determines an experiment's training run (and nothing about evaluation)."""
    name, seed = parse_id(cfg, exp_id)
    spec = _merge_experiment(cfg, name)
    spec.update(id=exp_id, seed=seed)
    for key in OPERATIONAL:
        spec["training"].pop(key, None)
    return spec


def operational_settings(cfg: dict, exp_id: str) -> dict[str, Any]:
    """The experiment's settings that change how it runs, not what it computes."""
    training = _merge_experiment(cfg, parse_id(cfg, exp_id)[0])["training"]
    return {k: training[k] for k in OPERATIONAL if k in training}


def is_trained(cfg: dict, exp_id: str) -> bool:
    return parse_id(cfg, exp_id)[1] is not None


def senteval_tasks(cfg: dict) -> list[str]:
    """SentEval tasks the data rule verifies: always all 14 (7 STS, 7 transfer).

    The list must not depend on which tables are configured: the manifest is an input of
    training (STS-B dev), so a manifest rewritten because a table was added would retrain.
    """
    from cselab.data import KNOWN_TASKS

    return list(KNOWN_TASKS)


def encoder_settings(cfg: dict) -> dict:
    """The settings that determine an embedding (shared by every evaluator and the cache key)."""
    ev = cfg["evaluation"]
    return {"pooler": ev.get("pooler", "cls"), "max_len": ev.get("max_len", 512), "batch_size": ev.get("batch_size", 128)}


def tracking_uri(cfg: dict) -> str:
    """``MLFLOW_TRACKING_URI`` wins over the config's ``mlflow.tracking_uri``."""
    return os.environ.get("MLFLOW_TRACKING_URI") or cfg["mlflow"].get("tracking_uri", "sqlite:///results/mlflow.db")


TABLE_KINDS = {
    # kind: (result file(s) per experiment, columns, report an average)
    "sts": ("sts.json", None, True),
    "stsb_dev": ("stsb_dev.json", ["STS-B dev"], False),
    "transfer": ("transfer.json", None, True),
    "beir": ("beir/{dataset}.json", None, True),
    "retrieval": ("stsb_retrieval.json", ["R@1", "R@5", "R@10"], False),
    "geometry": ("geometry.json", ["alignment", "uniformity"], False),
}


# Kinds whose evaluation also writes per-pair predictions, for the paired bootstrap vs SimCSE.
PAIR_FILES = {"sts": "sts_pairs.npz", "stsb_dev": "stsb_dev_pairs.npz"}
CURVE_FIGURES = ("alignment_uniformity", "dev_curve")


def table_columns(cfg: dict, name: str) -> list[str]:
    kind = cfg["tables"][name]["kind"]
    if kind == "sts":
        from cselab.published import STS_COLUMNS

        return list(STS_COLUMNS)
    if kind == "transfer":
        return list(cfg["evaluation"]["transfer"]["tasks"])
    if kind == "beir":
        return list(cfg["evaluation"]["beir"]["datasets"])
    return list(TABLE_KINDS[kind][1])


def table_inputs(cfg: dict, name: str) -> dict[str, list[str]]:
    """Result files per experiment id that a table reads (Snakemake builds what is missing)."""
    kind = cfg["tables"][name]["kind"]
    pattern = TABLE_KINDS[kind][0]
    files = [pattern.format(dataset=d) for d in cfg["evaluation"]["beir"]["datasets"]] if kind == "beir" else [pattern]
    files += [PAIR_FILES[kind]] if kind in PAIR_FILES else []
    return {i: [f"results/experiments/{i}/{f}" for f in files]
            for i in experiment_ids(cfg, cfg["tables"][name]["experiments"])}


def figure_experiments(cfg: dict, name: str) -> dict[str, str]:
    """Legend label -> experiment id (the first seed of each trained experiment)."""
    return {label: experiment_ids(cfg, [exp])[0] for label, exp in cfg["figures"][name]["experiments"].items()}


def figure_inputs(cfg: dict, name: str) -> dict[str, str]:
    """Label -> what the figure reads: a training curve, or a model (checkpoint dir / PLM json)."""
    fig = cfg["figures"][name]
    out = {}
    for label, exp_id in figure_experiments(cfg, name).items():
        if fig["kind"] in CURVE_FIGURES:
            out[label] = f"results/experiments/{exp_id}/curve.csv"
        elif is_trained(cfg, exp_id):
            out[label] = f"results/experiments/{exp_id}/model"
        else:
            out[label] = f"resources/plms/{experiment_spec(cfg, exp_id)['plm']}.json"
    return out


def corpus_file(spec: dict) -> str:
    """The training file of an experiment: the corpus, or its subsampled expansion."""
    strategy = spec["training"].get("subsampling", "none")
    return "resources/corpus/corpus.txt" if strategy in (None, "none") else f"resources/subsample/{strategy}.txt"
