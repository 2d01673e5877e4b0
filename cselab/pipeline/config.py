"""Configuration: schema validation, plugins, data-dir resolution; the config layer's entry point.

The workflow's config (``config.yaml`` merged with ``--configfile``/``--config``) is checked
against ``cselab/schema/config.schema.json`` (every object forbids unknown keys, so a typo is an
error naming the key), then across sections (:mod:`cselab.pipeline.checks`: references, each
method's options and roles, figure kinds). Experiments and their job specs live in
:mod:`cselab.pipeline.experiments` (re-exported here).

``plugins:`` lists modules (importable names or ``.py`` paths, relative to the working
directory) imported before anything is checked: a method, evaluation, table or figure kind
registered there is known to the whole workflow.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import json
import math
import os
import sys
from importlib import resources
from pathlib import Path

from cselab.errors import ConfigError, check_schema
from cselab.pipeline import checks, sweeps
from cselab.pipeline.experiments import (OPERATIONAL, RENAMED_METHODS, SCORING, UNTRAINED,  # noqa: F401 (re-exported)
                                         USED_BY_METHODS,
                                         artifacts, corpus_file, experiment_ids, experiment_spec,
                                         expand_methods_table, full_options, is_trained, merge_experiment, merged_training,
                                         operational_settings, parse_id, pretraining_spec, seeds_of)
from cselab.reporting.tables import TABLE_KINDS
from cselab.settings import fill_config_defaults

CORPUS_FILENAMES = ("wiki1m_for_simcse.txt", "wiki1m_head.txt")
SENTEVAL_DIRNAMES = ("senteval", "downstream")


#: the cyclic collector's thresholds while a Snakefile is planned and run: its youngest
#: generation every 50,000 net allocations (Python's default: 700), the older ones as by default
PLANNING_GC_THRESHOLDS = (50_000, 10, 10)


def collect_less_while_planning() -> None:
    """Move the objects alive when the Snakefile is read (Snakemake's imports, the library's) into
    the collector's permanent generation (:func:`gc.freeze`) and run its youngest generation every
    :data:`PLANNING_GC_THRESHOLDS` allocations: building the paper config's DAG allocates millions
    of short-lived objects, and at Python's default the collector ran about 950 times and took
    0.55 s of its dry run (docs/scale.md). Every collection still happens, only less often; objects
    are still freed by their reference counts at once."""
    import gc

    gc.freeze()
    gc.set_threshold(*PLANNING_GC_THRESHOLDS)


def load_schema() -> dict:
    """The config schema, with the table and figure kinds enumerated from their registries
    (:mod:`cselab.reporting.kinds`), and each evaluation kind's own settings as ``evaluation.<kind>``
    (:mod:`cselab.evaluation.kinds`): a kind is declared once, where it is built."""
    from cselab.evaluation.kinds import evaluation_kinds, settings_schema
    from cselab.reporting.kinds import figure_kinds, table_kinds

    schema = json.loads(resources.files("cselab").joinpath("schema/config.schema.json").read_text())
    for section, kinds in (("tables", table_kinds()), ("figures", figure_kinds())):
        schema["properties"][section]["additionalProperties"]["properties"]["kind"] = {"enum": sorted(kinds)}
    evaluation = schema["properties"]["evaluation"]["properties"]
    for kind in (k for k in evaluation_kinds().values() if k.settings is not None):
        if kind.name in evaluation:
            raise ConfigError(f"evaluation kind {kind.name!r}: 'evaluation.{kind.name}' is another setting; rename it")
        evaluation[kind.name] = settings_schema(kind)
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
    """Validate ``config`` against the schema and the registries; return a resolved deep copy
    (plugins imported, ``methods`` tables and ``sweeps`` expanded into their experiments, ``data_dir``
    into data paths). Raises :class:`ConfigError` with one message naming the first offending key.
    """
    cfg = copy.deepcopy(dict(config))
    load_plugins(cfg.get("plugins") or [])
    checks.resolve_objectives(cfg)  # an entry named after a method trains it
    check_finite(cfg)
    check_schema(cfg, load_schema())
    cfg = fill_config_defaults(cfg)  # a key left out takes its default (cselab/settings)
    _check_methods(cfg)
    sweeps.name_points(cfg)  # a sweep's named points are experiments the tables and figures may list
    sweeps.take_table_entries(cfg)  # a table's sweep:<name> (the sweep's winner) is no experiment
    _check_tables(cfg)
    checks.check_table_reports(cfg)
    checks.check_export(cfg)
    checks.check_shared_corpora(cfg["evaluation"]["beir"])
    _check_figures(cfg)
    # the shared settings first: their problems named where they are written
    checks.check_training(cfg["training"], "training", trains=False)
    for name, exp in cfg["experiments"].items():
        checks.check_training(merged_training(cfg, name), f"experiments.{name}.training",
                              trains=exp["method"] != UNTRAINED)
    for name in cfg.get("pretraining", {}):
        checks.check_training(merged_training(cfg, stage=name), f"pretraining.{name}.training")
    sweeps.expand_sweeps(cfg)  # each grid point an experiment, after the experiments it changes are checked
    _resolve_data_dir(cfg)
    return cfg


def load_plugins(plugins: list[str]) -> None:
    """Import each plugin module (a dotted name, or a ``.py`` file) once; its decorators register
    its kinds. A plugin that cannot be imported is one message naming it."""
    for i, plugin in enumerate(plugins):
        where = f"config key 'plugins[{i}]'"
        if not isinstance(plugin, str):
            raise ConfigError(f"{where}: {plugin!r} is not a module name or a .py path")
        try:
            if plugin.endswith(".py"):
                path = Path(plugin).expanduser().resolve()
                name = f"cselab_plugin_{path.stem}"
                if name not in sys.modules:
                    spec = importlib.util.spec_from_file_location(name, path)
                    if spec is None or not path.is_file():
                        raise ConfigError(f"{where}: no plugin file {path}")
                    module = importlib.util.module_from_spec(spec)
                    sys.modules[name] = module
                    spec.loader.exec_module(module)
            else:
                importlib.import_module(plugin)
        except ConfigError:
            raise
        except Exception as e:  # the plugin's own error, named
            raise ConfigError(f"{where}: could not import plugin {plugin!r}: {type(e).__name__}: {e}") from None


def _check_methods(cfg: dict) -> None:
    """Pretraining stages, methods and experiments name known PLMs and methods, whose options check."""
    for name, stage in cfg.get("pretraining", {}).items():
        checks.check_components(cfg, {"objective": stage["method"], "options": stage.get("options", {}),
                                      "auxiliaries": {}}, f"pretraining.{name}", primary_key="method")
    for name, method in cfg["methods"].items():
        checks.check_components(cfg, {"objective": method["objective"], "options": method.get("options", {}),
                                      "auxiliaries": method.get("auxiliaries", {})}, f"methods.{name}")
    for name, exp in cfg["experiments"].items():
        where = f"experiments.{name}"
        if exp["plm"] not in cfg["plms"]:
            raise ConfigError(f"config key '{where}.plm': unknown PLM {exp['plm']!r}; "
                              f"defined under 'plms': {', '.join(sorted(cfg['plms']))}")
        if exp["method"] != UNTRAINED and exp["method"] not in cfg["methods"]:
            valid = sorted(cfg["methods"]) + [UNTRAINED]
            former = {old: new for new, old in RENAMED_METHODS.items()}.get(exp["method"])
            raise ConfigError(f"config key '{where}.method': unknown method {exp['method']!r}"
                              f"{f' (now {former!r})' if former else ''}; valid methods: {', '.join(valid)}")
        if exp["method"] != UNTRAINED:
            checks.check_components(cfg, merge_experiment(cfg, name), where, primary_key=None)


def _check_tables(cfg: dict) -> None:
    """Each table's experiments exist (a methods table's are expanded first) and suit its kind."""
    for tname, table in cfg["tables"].items():
        if table["kind"] == "methods":
            expand_methods_table(cfg, tname)
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


def _check_figures(cfg: dict) -> None:
    """Each figure's experiments (a ``table:`` adds every trained experiment of that table) and options."""
    for fname, fig in cfg.get("figures", {}).items():
        fig["experiments"] = {k: v for k, v in fig.get("experiments", {}).items() if v is not None}
        if fig.get("table"):  # every experiment of a table, labelled by its name
            if fig["table"] not in cfg["tables"]:
                raise ConfigError(f"config key 'figures.{fname}.table': unknown table {fig['table']!r}; defined "
                                  f"under 'tables': {', '.join(sorted(cfg['tables']))}")
            fig["experiments"].update({e: e for e in cfg["tables"][fig["table"]]["experiments"]
                                       if cfg["experiments"][e]["method"] != UNTRAINED})
        checks.check_figure(cfg, fname, fig)


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


