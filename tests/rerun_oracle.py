"""What a config change may rerun, declared independently of the job specs it checks
(``tests/test_rerun_precision.py``): for a setting's path, the rules whose jobs may read it and,
for a named entry (an experiment, a table, a figure, a sweep, a pretraining stage), which of
their jobs; and how to change a setting to another valid value (from the config's schema)."""

from __future__ import annotations

import copy
import fnmatch
from typing import Any, Iterator

#: rules that gather many experiments' results, whose params name them (a table's rows, a sweep's points)
AGGREGATES = {"table", "sweep", "figure", "seed_power", "protocol_table", "mteb_check", "leakage_audit",
              "cost_plan"}
EVALUATIONS = "evaluate_*"
#: the embedding's settings: every job that encodes with the evaluation settings
ENCODING = {EVALUATIONS, "figure", "model_card", "export_onnx", "mteb_check"}
#: a training run's settings: its job, the card that quotes them, the reports that show or list them
TRAINING = {"train", "pretrain", "model_card", "table", "sweep", "figure", "cost_plan"}

#: (path pattern, rules whose jobs may read it), first match wins; ``*`` matches one name
SCOPES: list[tuple[str, set[str]]] = [
    ("mlflow.*", set()),
    ("hub.*", {"push", "push_sweep"}),
    ("cost_plan.*", {"cost_plan"}),
    ("data_dir", {"prepare_corpus", "prepare_senteval", "senteval_reads", "prepare_beir", "table", "cost_plan"}),
    ("data.corpus.*", {"prepare_corpus", "table", "cost_plan"}),
    ("data.senteval.*", {"prepare_senteval", "senteval_reads", "cost_plan"}),
    ("data.beir.*", {"prepare_beir", "cost_plan"}),
    ("plms.*.model", {"resolve_plm", *TRAINING}),
    ("plms.*", TRAINING),
    ("training.*", TRAINING),
    ("methods.*", TRAINING),
    ("experiments.*", TRAINING),
    ("pretraining.*", {"pretrain", "cost_plan"}),
    ("sweeps.*", {"sweep", "table", "train", "model_card", "cost_plan"}),  # its points' runs too
    ("evaluation.pooler", {*ENCODING, "protocol_table", "cost_plan"}),
    ("evaluation.max_len", {*ENCODING, "cost_plan"}),
    ("evaluation.transfer.*", {"evaluate_transfer", "evaluate_transfer_dev", "senteval_reads", "table", "cost_plan"}),
    ("evaluation.beir.*", {"evaluate_beir", "evaluate_beir_shared_*", "evaluate_stsb_retrieval", "prepare_beir",
                           "table", "leakage_audit", "cost_plan"}),
    ("evaluation.geometry.*", {"evaluate_geometry", "table", "cost_plan"}),
    ("evaluation.bootstrap.*", {"table", "sweep", "seed_power", "model_card", "cost_plan"}),
    ("evaluation.leakage.*", {"leakage_audit", "cost_plan"}),
    ("evaluation.seed_power.*", {"seed_power", "sweep", "cost_plan"}),
    ("evaluation.protocols.*", {"protocol_table", "cost_plan"}),
    ("spans.min_words", {"subsample", "cost_plan"}),
    ("spans.*", {"segment_shard", "segment_corpus", "table", "cost_plan"}),
    ("tables.*", {"table", "figure", "seed_power", "protocol_table", "mteb_check", "cost_plan"}),
    ("figures.*", {"figure", "cost_plan"}),
    ("export.onnx.*", {"export_onnx", "cost_plan"}),
    ("export.card.*", {"model_card", "cost_plan"}),
    ("export.mteb_check.*", {"mteb_check", "cost_plan"}),
    ("export.*", {"mteb_results", "mteb_check", "model_card", "export_onnx", "export_model", "cost_plan"}),
]


def scope(path: str) -> set[str]:
    """The rules whose jobs may read the setting at ``path``."""
    for pattern, rules in SCOPES:
        if fnmatch.fnmatchcase(path, pattern) or path == pattern.removesuffix(".*"):
            return rules
    raise KeyError(f"no scope declared for config path {path!r}: add it to tests/rerun_oracle.py")


def rule_allowed(rule: str, rules: set[str]) -> bool:
    return any(fnmatch.fnmatchcase(rule, r) for r in rules)


def owner(path: str) -> tuple[str, str] | None:
    """The named entry a path lies under (``experiments``, ``tables``, ``figures``, ``sweeps``,
    ``pretraining``) and its name."""
    parts = path.split(".")
    if len(parts) > 1 and parts[0] in ("experiments", "tables", "figures", "sweeps", "pretraining"):
        return parts[0], parts[1]
    return None


def job_allowed(path: str, rule: str, wildcards: dict, cfg: dict) -> bool:
    """Whether the setting at ``path`` may change the job (``rule``, ``wildcards``) of the validated ``cfg``."""
    if not rule_allowed(rule, scope(path)):
        return False
    named = owner(path)
    if named is None or rule in AGGREGATES - {"figure"} or rule in ("figure", "table") and named[0] != rule + "s":
        return True
    section, name = named
    if section == "experiments":  # its runs, and its sweeps' points (they inherit its settings)
        names = {name, *(p["experiment"] for s in (cfg.get("sweeps") or {}).values() if s.get("base") == name
                         for p in s.get("points", []))}
        exp = wildcards.get("exp", "")
        return any(exp == n or exp.startswith(f"{n}-s") or exp.startswith(f"{n}@") for n in names)
    if section == "pretraining":
        return wildcards.get("stage") == name
    if section == "sweeps" and "exp" in wildcards:  # a point's run: the point is the base and the grid
        points = [p["experiment"] for p in cfg["sweeps"][name].get("points", [])]
        return any(wildcards["exp"].startswith(f"{p}-s") for p in points)
    key = {"tables": "table", "figures": "figure", "sweeps": "sweep"}[section]
    return wildcards.get(key) == name


# -- mutations ---------------------------------------------------------------------------------------

def leaves(node: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """Every leaf setting (a non-mapping value) of a config, with its path."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaves(value, (*path, key))
    elif path:
        yield path, node


def schema_at(schema: dict, path: tuple) -> dict:
    """The schema of the setting at ``path`` ({} where the schema leaves it open)."""
    node = schema
    for key in path:
        node = _resolve(schema, node)
        props = node.get("properties") or {}
        if key in props:
            node = props[key]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return {}
    return _resolve(schema, node)


def _resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        target = schema
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _fits(value: Any, schema: dict) -> bool:
    """Whether ``value`` is of one of the schema's types (or in its enum)."""
    if "enum" in schema:
        return value in schema["enum"]
    types = schema.get("type", [])
    names = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}
    return names.get(type(value)) in ([types] if isinstance(types, str) else types)


def candidates(value: Any, schema: dict, siblings: list[Any]) -> list[Any]:
    """Other values for a setting: its schema's other enum values, a nearby number within its
    bounds, the other boolean, another value the config gives the same key elsewhere."""
    out: list[Any] = []
    for alternative in schema.get("anyOf", []):  # e.g. an integer or one of some names (chunk_size: auto)
        out += candidates(value, alternative, []) if _fits(value, alternative) else candidates(None, alternative, [])
    if "enum" in schema:
        out += [v for v in schema["enum"] if v != value]
    types = schema.get("type", [])
    types = [types] if isinstance(types, str) else list(types)
    lo = schema.get("minimum", schema.get("exclusiveMinimum"))
    hi = schema.get("maximum", schema.get("exclusiveMaximum"))
    if isinstance(value, bool):
        out.append(not value)
    elif isinstance(value, int):
        out += [v for v in (value + 1, value - 1, value * 2) if (lo is None or v > lo) and (hi is None or v < hi)]
    elif isinstance(value, float):
        out += [v for v in (value / 2, (value + (hi if hi is not None else value * 3)) / 2, value * 1.5 + 0.5)
                if (lo is None or v > lo) and (hi is None or v < hi) and v != value]
    elif value is None:
        out += [{"integer": 7, "number": 0.5, "boolean": True, "string": "x", "object": {}}[t] for t in types
                if t in ("integer", "number", "boolean", "string", "object")]
        out += [512] if "integer" in types else []  # a count bounded below by another setting (chunk_tokens)
    out += [s for s in siblings if s != value and (value is None or type(s) is type(value))
            and not isinstance(s, (dict, list))]
    if isinstance(value, str):
        out.append(value.replace("://", "://mirror.") if "://" in value else value + "x")
    unique: list = []
    for v in out:
        if not any(v == u and type(v) is type(u) for u in unique):
            unique.append(v)
    return unique[:48]


def options_schema(full: dict, path: tuple) -> dict | None:
    """The schema of a method's options (its ``Options``) for a path under ``options`` of a
    method entry, an experiment or an auxiliary; None elsewhere."""
    from cselab.training.methods import find_config

    if "options" not in path[:-1]:
        return None
    at = path.index("options")
    owner_path = path[:at]
    if len(owner_path) >= 2 and owner_path[-2] == "auxiliaries":
        method = owner_path[-1]
    elif owner_path[:1] == ("methods",):
        method = full["methods"][owner_path[1]].get("objective", owner_path[1])
    elif owner_path[:1] == ("experiments",):
        entry = full["methods"].get(full["experiments"][owner_path[1]]["method"]) or {}
        method = entry.get("objective", full["experiments"][owner_path[1]]["method"])
    elif owner_path[:1] == ("pretraining",):
        method = full["pretraining"][owner_path[1]]["method"]
    else:
        return None
    cls = find_config(method)
    return cls.options_schema() if cls else None


def in_collection(schema: dict, path: tuple) -> bool:
    """Whether ``path`` is a value of a mapping of plain values (a figure's label -> experiment, a
    sweep's names): the list tests change those, not the leaf tests."""
    parent = schema_at(schema, path[:-1])
    extra = parent.get("additionalProperties")
    return not parent.get("properties") and extra not in (None, False) and not (
        isinstance(extra, dict) and (extra.get("properties") or extra.get("type") == "object"))


def set_path(cfg: dict, path: tuple, value: Any) -> dict:
    out = copy.deepcopy(cfg)
    node = out
    for key in path[:-1]:
        node = node.setdefault(key, {})
        if node is None:
            return out
    node[path[-1]] = value
    return out


# -- data files -----------------------------------------------------------------------------------

#: the rules whose jobs may read a SentEval file (its path under the tree, ``fnmatch``), directly
#: or through a record of it (rule senteval_reads, the tree's manifest): a change to the file may
#: rerun them and what is built from them, nothing else. Every file: its preparation and the jobs
#: that read the whole tree (the leakage audit, the exports' data revision).
WHOLE_TREE = {"senteval_reads", "prepare_senteval", "leakage_audit", "model_card", "mteb_results"}
DATA_READERS: list[tuple[str, set[str]]] = [
    ("STS/STSBenchmark/sts-dev.csv", {"train", "evaluate_stsb_dev", "evaluate_stsb_dev_head", "export_onnx",
                                      "protocol_table", "figure"}),
    ("STS/STSBenchmark/sts-test.csv", {"evaluate_sts", "prepare_stsb_retrieval", "evaluate_geometry",
                                       "protocol_table", "figure", "mteb_check"}),
    ("STS/STSBenchmark/sts-train.csv", set()),
    ("STS/STS1?-en-test/*", {"evaluate_sts", "protocol_table", "mteb_check"}),
    ("SICK/SICK_test_annotated.txt", {"evaluate_sts", "protocol_table", "mteb_check"}),
    ("SICK/*", set()),
    ("*", {"evaluate_transfer", "evaluate_transfer_dev"}),  # the transfer tasks' folders
]
#: the only SentEval file a training reads (STS-B dev: its checkpoint selection)
TRAINING_READS = "STS/STSBenchmark/sts-dev.csv"


def data_readers(relpath: str) -> set[str]:
    """The rules whose jobs may read the SentEval file ``relpath`` (:data:`DATA_READERS`)."""
    return WHOLE_TREE | next(rules for pattern, rules in DATA_READERS if fnmatch.fnmatchcase(relpath, pattern))
