"""cselab.schema_subset says what jsonschema says, or that it cannot tell; never the opposite.

The subset decides every config check of a dry run, so a wrong "valid" would let a bad config
through. It is held to jsonschema over the real configs and a few hundred mutations of them."""

import copy
import random
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from cselab.errors import ConfigError, check_schema
from cselab.pipeline import checks
from cselab.pipeline.config import load_plugins, load_schema
from cselab.schema_subset import conforms

ROOT = Path(__file__).resolve().parents[1]


def _merged(*files: str) -> dict:
    from snakemake.utils import update_config

    cfg = {}
    for name in files:
        update_config(cfg, yaml.safe_load((ROOT / name).read_text()))
    load_plugins(cfg.get("plugins") or [])
    checks.resolve_objectives(cfg)
    return cfg


def _jsonschema_valid(instance, schema) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(instance)


def _paths(node, prefix=()):
    """Every key path of a nested config (dict keys and list indices)."""
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, prefix + (i,))


REPLACEMENTS = ["x", "", -1, 0, 1, 2.5, 1.0, -0.5, 1e9, True, False, None, [], [1, 1], ["a"], {}, {"zz_unknown": 1}]


def _mutants(cfg: dict, n: int, seed: int):
    rng = random.Random(seed)
    paths = [p for p in _paths(cfg) if p]
    for _ in range(n):
        path = rng.choice(paths)
        mutant = copy.deepcopy(cfg)
        parent = mutant
        for key in path[:-1]:
            parent = parent[key]
        action = rng.random()
        if action < 0.15 and isinstance(parent, dict):
            del parent[path[-1]]
        elif action < 0.3 and isinstance(parent, dict):
            parent[f"{path[-1]}_typo"] = parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(REPLACEMENTS))
        yield path, mutant


@pytest.mark.parametrize("files", [("config.yaml",), ("config.yaml", "configs/smoke.yaml")])
def test_the_real_configs_conform_as_jsonschema_says(files):
    cfg, schema = _merged(*files), load_schema()
    assert conforms(cfg, schema) is True
    assert _jsonschema_valid(cfg, schema)


def test_mutated_configs_get_jsonschema_verdict_or_none():
    cfg, schema = _merged("config.yaml", "configs/smoke.yaml"), load_schema()
    verdicts = {True: 0, False: 0, None: 0}
    for path, mutant in _mutants(cfg, 400, seed=7):
        ours = conforms(mutant, schema)
        verdicts[ours] += 1
        if ours is not None:
            assert ours == _jsonschema_valid(mutant, schema), f"disagrees at {'.'.join(map(str, path))}"
    # both verdicts occur often, so the comparison above means something
    assert verdicts[True] > 40 and verdicts[False] > 100, verdicts


def test_method_option_schemas_agree_with_jsonschema():
    from cselab.training.methods import method_config, method_names

    rng = random.Random(3)
    checked = 0
    for cls in map(method_config, method_names()):
        schema = cls.options_schema()
        for name in schema.get("properties", {}):
            for value in rng.sample(REPLACEMENTS, 6):
                ours = conforms({name: value}, schema)
                if ours is not None:
                    assert ours == _jsonschema_valid({name: value}, schema), (cls.name, name, value)
                    checked += 1
    assert checked > 100


@pytest.mark.parametrize("instance, schema, expected", [
    (True, {"type": "integer"}, False),             # a bool is no number
    (2.0, {"type": "integer"}, True),               # an integral float is an integer (draft 6 on)
    (2.5, {"type": ["integer", "null"]}, False),
    (True, {"enum": [1, 2]}, False),                # True is not 1
    (1.0, {"enum": [1, 2]}, True),                  # but 1.0 is
    ([1, True], {"uniqueItems": True}, True),
    ("ab", {"pattern": "^a"}, True),
    (5, {"pattern": "^a", "minLength": 9}, True),   # string keywords ignore numbers
    ({"a": 1}, {"properties": {"a": {"$ref": "#/$defs/pos"}}, "$defs": {"pos": {"exclusiveMinimum": 1}}}, False),
    ({"b": 1}, {"properties": {"a": {}}, "additionalProperties": False}, False),
    ({"b": 1}, {"patternProperties": {"^b": {"type": "integer"}}, "additionalProperties": False}, True),
    ("x", {"not": {"enum": ["x"]}}, False),
    (3, {"oneOf": [{"minimum": 0}, {"maximum": 5}]}, False),
    (3, {"anyOf": [{"minimum": 9}, {"maximum": 5}]}, True),
    (3, {"if": {"minimum": 0}, "then": {"maximum": 1}}, None),  # a keyword the subset does not know
    ([1, 1], {"uniqueItems": True}, None),                        # jsonschema's own search decides
    (1, {"$ref": "other.json#/x"}, None),
    # found by review: each once gave True where jsonschema rejects or raises
    ({"a": 1.0}, {"properties": {"a": {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"}}},
     None),                                                       # another draft's rules
    ({"a": 5}, {"not": {"properties": {"a": {"$ref": "#/$defs/y", "$id": "http://ex/a",
                                             "$defs": {"y": {"type": "integer"}}}}},
                "$defs": {"y": {"type": "string"}}}, None),      # $id: another base for $ref
    ("x", {"items": {"type": "string"}, "$ref": "#items",
           "$defs": {"a": {"$anchor": "items", "type": "integer"}}}, None),  # an anchor, not a pointer
    (5, {"$defs": {"x": {"type": "integer"}, "": {"x": {"type": "string"}}}, "$ref": "#/$defs//x"}, False),
    ("s", {"$defs": {"a b": {"type": "integer"}, "a%20b": {"type": "string"}}, "$ref": "#/$defs/a%20b"}, None),
    ("x", {"type": ["foo", "string"]}, None),                   # an unknown type: jsonschema raises
    ("x", {"anyOf": [{"type": "string"}, {"$ref": "#"}]}, None),  # a $ref cycle
])
def test_keywords(instance, schema, expected):
    assert conforms(instance, schema) is expected
    if expected is not None:
        assert _jsonschema_valid(instance, schema) is expected


def test_a_bad_value_still_gets_jsonschemas_message():
    with pytest.raises(ConfigError, match=r"config key 'training\.lr'"):
        check_schema({"lr": "fast"}, {"type": "object", "properties": {"lr": {"type": "number"}}}, where="training")


def test_a_valid_config_is_checked_without_importing_jsonschema():
    code = ("import sys, yaml; from cselab.pipeline.config import load_schema; from cselab.errors import check_schema;"
            f"check_schema(yaml.safe_load(open({str(ROOT / 'config.yaml')!r})), load_schema());"
            "print('jsonschema' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"
