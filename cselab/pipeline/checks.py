"""Checks across a validated config's sections: what its JSON schema cannot say (references
between sections, a method's options and roles, figure kinds' options, rules across training
settings). Each raises :class:`ConfigError` naming the key."""

from __future__ import annotations

import re

from cselab.errors import ConfigError, check_schema
from cselab.pipeline.experiments import RENAMED_METHODS, UNTRAINED, entry_sweep, merge_experiment
from cselab.settings.spec import ExperimentSpec


def check_shared_corpora(beir: dict) -> None:
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


def check_table_reports(cfg: dict) -> None:
    """The seed planner and the protocol table name a configured table (the planner's baseline:
    one of its experiments)."""
    for key in ("seed_power", "protocols"):
        table = cfg["evaluation"][key]["table"]
        if table not in cfg["tables"]:
            raise ConfigError(f"config key 'evaluation.{key}.table': unknown table {table!r}; defined under "
                              f"'tables': {', '.join(sorted(cfg['tables']))}")
    opts = cfg["evaluation"]["seed_power"]
    sweep = named_sweep(cfg, opts["baseline"], "evaluation.seed_power.baseline")
    if sweep is not None and opts["table"] not in cfg["sweeps"][sweep]["rows"]:
        raise ConfigError(f"config key 'evaluation.seed_power.baseline': table {opts['table']!r} does not list "
                          f"{opts['baseline']!r} among its experiments; add it there")
    if sweep is None and opts["baseline"] and opts["baseline"] not in cfg["tables"][opts["table"]]["experiments"]:
        raise ConfigError(f"config key 'evaluation.seed_power.baseline': {opts['baseline']!r} is not an experiment "
                          f"of table {opts['table']!r}: {', '.join(cfg['tables'][opts['table']]['experiments'])}")


def named_sweep(cfg: dict, entry, where: str) -> str | None:
    """The sweep an experiment entry names (``sweep:<s>``: its winner, resolved through the sweep's
    report when the workflow plans), or None for another entry; an unknown sweep is an error naming ``where``."""
    name, sweeps = entry_sweep(entry), cfg.get("sweeps") or {}
    if name is None:
        return None
    if name not in sweeps:
        raise ConfigError(f"config key '{where}': unknown sweep {name!r} in {entry!r}; defined under 'sweeps': "
                          f"{', '.join(sorted(sweeps)) or 'none'}")
    return name


def check_export(cfg: dict) -> None:
    """The exported tables and experiments, and the MTEB check's, are configured ones (or
    ``sweep:<s>``, a configured sweep's winner)."""
    for table in cfg["export"]["tables"] or []:
        if table not in cfg["tables"]:
            raise ConfigError(f"config key 'export.tables': unknown table {table!r}; defined under "
                              f"'tables': {', '.join(sorted(cfg['tables']))}")
    for key, names in (("export.experiments", cfg["export"].get("experiments") or []),
                       ("export.mteb_check.experiments", cfg["export"]["mteb_check"]["experiments"])):
        for i, name in enumerate(names):
            if named_sweep(cfg, name, f"{key}[{i}]") is None and name not in cfg["experiments"]:
                raise ConfigError(f"config key '{key}[{i}]': unknown experiment {name!r} (defined under "
                                  f"'experiments'; sweep:<name> for a sweep's winner)")


def check_training(training: dict, where: str, trains: bool = True) -> None:
    """Rules across a job's merged training settings; ``trains``: they are a training job's (not
    the shared section alone, nor an untrained experiment's), whose batch must split."""
    if training["holdout"] and training["subsampling"] != "none":
        raise ConfigError(f"config key '{where}.holdout': a held-out split and subsampling "
                          f"({training['subsampling']}) cannot be combined")
    if isinstance(training["chunk_size"], int) and not training["keyed_dropout"]:  # auto: never chunks then
        raise ConfigError(f"config key '{where}.chunk_size': gradient caching replays dropout keyed by row; "
                          f"set training.keyed_dropout: true or chunk_size: null")
    tokens = training.get("chunk_tokens")
    if tokens and tokens < training["max_len"]:
        raise ConfigError(f"config key '{where}.chunk_tokens': {tokens} tokens is less than the longest sentence "
                          f"(training.max_len {training['max_len']}): a chunk holds at least one; raise it or set "
                          "chunk_tokens: null")
    if tokens and not training["keyed_dropout"]:
        raise ConfigError(f"config key '{where}.chunk_tokens': gradient caching replays dropout keyed by row; "
                          f"set training.keyed_dropout: true or chunk_tokens: null")
    if not trains:
        return
    processes = training["devices"] * training["nodes"]
    if training["batch_size"] < 2 * processes * training["accumulation_steps"]:  # in-batch losses need 2 rows
        raise ConfigError(f"config key '{where}.batch_size': a batch of {training['batch_size']} sentences cannot be "
                          f"split into {processes} process(es) (devices x nodes) x {training['accumulation_steps']} "
                          "accumulation step(s) of at least 2 sentences; raise it, or lower training.devices, "
                          "training.nodes or training.accumulation_steps")


def check_figure(cfg: dict, fname: str, fig: dict) -> None:
    """A figure's kind options (validated against the kind's declaration, defaults filled in)
    and its experiments (defined; trained where the kind draws training runs; checked by the
    kind; trained without the held-out slice where the kind reads it)."""
    from cselab.reporting.kinds import figure_kinds

    kind = figure_kinds()[fig["kind"]]
    check_kind_options(fname, fig, kind)
    options = kind.typed(fig, where=f"figures.{fname}")
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
        spec = merge_experiment(cfg, exp)
        problem = kind.check(options, ExperimentSpec.from_dict(spec)) if kind.check else None
        if problem:
            raise ConfigError(f"config key '{where}': {exp!r} {problem}")
        if kind.heldout and trained and spec["training"]["holdout"] != options.holdout:
            raise ConfigError(f"config key '{where}': {exp!r} must train without the held-out slice "
                              f"(training.holdout: {options.holdout}), or its statistics are on training data")


#: keys every figure has besides its kind's options
FIGURE_KEYS = ("kind", "title", "experiments", "table")


def check_kind_options(fname: str, fig: dict, kind) -> None:
    """A figure's options against its kind's options dataclass (its schema: one message naming
    the key), then the kind's defaults filled in."""
    sub = kind.schema()
    sub["properties"] = {**{k: {} for k in FIGURE_KEYS}, **sub["properties"]}
    check_schema(fig, sub, where=f"figures.{fname}", context=f"figure kind {fig['kind']!r}")
    for key, value in kind.defaults().items():
        fig.setdefault(key, value)


def check_components(cfg: dict, spec: dict, where: str, primary_key: str | None = "objective") -> None:
    """The primary and auxiliary methods of ``spec`` exist, take these roles, and accept their
    options; every artifact they require names a pretraining stage."""
    from cselab.training.methods import method_config

    key = f"{where}.{primary_key}" if primary_key else f"{where}.method"
    primary = method_config(spec["objective"], where=key)
    stage = where.startswith("pretraining.")
    if not stage and "primary" not in primary.roles:
        raise ConfigError(f"config key '{key}': method {spec['objective']!r} is an auxiliary objective only; "
                          f"list it under 'auxiliaries' of a primary method")
    options = primary.check_options(spec["options"], where=f"{where}.options")
    check_training_keys(cfg, primary, options, key)
    required = dict(primary.requires(options))
    methods = [(primary, options)]
    for name, aux in spec.get("auxiliaries", {}).items():
        if aux is None:
            continue
        cls = method_config(name, where=f"{where}.auxiliaries.{name}")
        if "auxiliary" not in cls.roles:
            raise ConfigError(f"config key '{where}.auxiliaries.{name}': method {name!r} cannot be an auxiliary "
                              f"objective (it is a primary method)")
        aux_options = cls.check_options(aux.get("options", {}), where=f"{where}.auxiliaries.{name}.options")
        check_training_keys(cfg, cls, aux_options, f"{where}.auxiliaries.{name}")
        required.update(cls.requires(aux_options))
        methods.append((cls, aux_options))
    check_per_sentence(methods, where)
    for role, stage_name in required.items():
        if stage_name not in cfg.get("pretraining", {}):
            defined = ", ".join(sorted(cfg.get("pretraining", {}))) or "none"
            raise ConfigError(f"config key '{where}': its methods need the pretraining stage {stage_name!r} "
                              f"(for {role}), which is not defined under 'pretraining' (defined: {defined})")


def check_per_sentence(methods: list, where: str) -> None:
    """A method that declares its loss per sentence (``per_sentence``: its batches may run as
    accumulated micro-batches) is refused in a composition that is not: another method's in-batch
    terms, a BatchNorm head (``MethodConfig.per_sentence_problem``)."""
    declaring = [cls for cls, _ in methods if cls.per_sentence]
    if not declaring:
        return
    for cls, options in methods:
        problem = cls.per_sentence_problem(options)
        if problem:
            but = problem if cls is declaring[0] else f"{cls.name!r} beside it is not per sentence: {problem}"
            raise ConfigError(f"config key '{where}': method {declaring[0].name!r} declares its loss per sentence "
                              f"(its large batches run as accumulated micro-batches), but {but}; drop the "
                              "declaration or train it in a composition whose every method is per sentence")


def check_training_keys(cfg: dict, cls, options, where: str) -> None:
    """The training settings a method declares (``used_training_keys`` for these options) are
    training settings, and its code reads no other (``MethodConfig.training_read_sites``: what it
    reads of ``ctx.training``, found in its source, named by file and line): checked when the config
    is read, not found missing by the job."""
    valid = cfg["training"]
    declared = cls.used_training_keys(options)
    for key in declared:
        if key not in valid:
            raise ConfigError(f"config key '{where}': method {cls.name!r} declares the training setting {key!r} "
                              f"(training_keys), which is none; valid: {', '.join(sorted(valid))}")
    undeclared = {k: site for k, site in cls.training_read_sites().items() if k not in declared}
    if undeclared:
        key, site = next(iter(sorted(undeclared.items())))
        raise ConfigError(f"config key '{where}': method {cls.name!r} reads the training setting {key!r} ({site}), "
                          "which it does not declare: add it to its training_keys (a method receives exactly the "
                          "settings it declares)")


def resolve_objectives(cfg: dict) -> None:
    """One spelling per method: a ``methods:`` entry named after a registered method trains that
    method (its ``objective`` is implied; naming another is an error); any other entry (a
    composition or a variant: ``diffcse``, ``paradigm-mhe``) names its objective. Fills in the
    implied objectives, so every later reader finds ``objective`` in each entry."""
    from cselab.training.methods import find_config, is_registered, method_names

    for key, entry in (cfg.get("methods") or {}).items():
        if not isinstance(entry, dict):
            continue  # the schema names it
        objective = entry.get("objective")
        if objective is None:
            if is_registered(key):
                entry["objective"] = key
                continue
            former = {old: new for new, old in RENAMED_METHODS.items()}.get(key)
            hint = f" (that entry is now {former!r})" if former else ""
            raise ConfigError(f"config key 'methods.{key}': {key!r} is no method's name{hint}; an entry named "
                              f"otherwise names the method it trains (objective: <method>); methods: "
                              f"{', '.join(method_names())}")
        elif objective != key and is_registered(key) and find_config(objective) is not None:  # (else: unknown)
            raise ConfigError(f"config key 'methods.{key}.objective': the entry {key!r} is named after the method "
                              f"{key!r} and trains it; drop 'objective: {objective}', or give the entry a name "
                              f"of its own for a variant of {objective!r}")


_KEY = re.compile(r"config key '([^']+)'")


def key_origin(message: str, sources: list[tuple[str, dict]]) -> str | None:
    """Where the key a ConfigError ``message`` names was set: the last of ``sources`` (config
    files, then ``--config``, in Snakemake's order: later wins) that holds it; None when none does
    (a default) or the message names no key."""
    found = _KEY.search(message)
    if not found:
        return None
    path = found.group(1)
    origin = None
    for name, source in sources:
        if _holds(source, path):
            origin = name
    return origin


def _holds(node, path: str) -> bool:
    """Whether ``node`` holds the dotted ``path`` (``a.b[2].c``; a key may itself contain dots)."""
    if not path:
        return True
    if isinstance(node, list):
        index = re.match(r"^\[(\d+)\]\.?|^(\d+)(?:\.|$)", path)  # a[2].b, or jsonschema's a.2.b
        i = int(index.group(1) or index.group(2)) if index else len(node)
        return i < len(node) and _holds(node[i], path[index.end():])
    if not isinstance(node, dict):
        return False
    for key in sorted(map(str, node), key=len, reverse=True):  # the longest key first: "0.3" before "0"
        if path == key or path.startswith(key + ".") or path.startswith(key + "["):
            rest = path[len(key):].removeprefix(".")
            value = node.get(key, node.get(_number(key)))
            if _holds(value, rest):
                return True
    return False


def _number(key: str):
    try:
        return int(key)
    except ValueError:
        try:
            return float(key)
        except ValueError:
            return key
