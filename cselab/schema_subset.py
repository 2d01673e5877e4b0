"""A quick yes for the JSON schemas cselab writes, without importing jsonschema.

Importing jsonschema costs about 0.1 s (it reads every metaschema), a twentieth of a dry run, and
a valid config never needs its error messages. :func:`conforms` answers ``True`` only where
jsonschema (Draft 2020-12, no format checker) finds no error, ``False`` only where it finds one,
and ``None`` where it cannot tell: a keyword it does not know (``if``, ``contains``, a remote or
``$id``-relative ``$ref``...), or a verdict that depends on jsonschema's own quirks (repeated items
under ``uniqueItems``). :func:`cselab.errors.check_schema` asks jsonschema whenever the answer is
not ``True``, and jsonschema words every error, so a bad value reads as it always did.
``tests/test_schema_subset.py`` holds the two to the same verdicts over the real configs and
their mutations.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Mapping, Sequence

# keywords that only annotate (2020-12 does not assert "format" without a format checker)
_ANNOTATIONS = frozenset({"$schema", "$comment", "$defs", "title", "description", "default", "examples",
                          "deprecated", "readOnly", "writeOnly", "format"})
_DRAFT = "https://json-schema.org/draft/2020-12/schema"


def conforms(instance, schema) -> bool | None:
    """Whether ``instance`` conforms to ``schema``: True or False as jsonschema would say, None
    where this subset cannot tell (also a ``$ref`` cycle, or a value the subset's comparisons
    cannot handle: jsonschema then decides, and words its own error)."""
    try:
        return _conforms(instance, schema, schema)
    except (RecursionError, TypeError, ValueError, re.error):
        return None


def _conforms(instance, schema, root) -> bool | None:
    """:func:`conforms` of a subschema; ``root`` holds the ``$defs`` that ``$ref`` names."""
    if schema is True or schema is False:
        return schema
    if not isinstance(schema, dict) or "$id" in schema or str(schema.get("$schema", _DRAFT)).rstrip("#") != _DRAFT:
        return None  # another base for $ref, or another draft's rules
    verdict = True
    for keyword, value in schema.items():
        check = _KEYWORDS.get(keyword)
        if check is None:
            if keyword in _ANNOTATIONS:
                continue
            return None
        result = check(instance, value, schema, root)
        if result is None:
            verdict = None
        elif not result:
            return False
    return verdict


def _all(results) -> bool | None:
    """True if every result is True, False if any is False, else None."""
    verdict = True
    for result in results:
        if result is False:
            return False
        if result is None:
            verdict = None
    return verdict


def _is_type(instance, name: str) -> bool | None:
    if name == "object":
        return isinstance(instance, dict)
    if name == "array":
        return isinstance(instance, list)
    if name == "string":
        return isinstance(instance, str)
    if name == "boolean":
        return isinstance(instance, bool)
    if name == "null":
        return instance is None
    if isinstance(instance, bool):
        return False if name in ("number", "integer") else None
    if name == "number":
        return isinstance(instance, numbers.Number)
    if name == "integer":
        return isinstance(instance, int) or (isinstance(instance, float) and instance.is_integer())
    return None


def _type(instance, value, schema, root):
    names = value if isinstance(value, list) else [value]
    results = [_is_type(instance, name) for name in names]
    return None if None in results else True in results  # an unknown type name: jsonschema raises


def _number(instance) -> bool:
    return isinstance(instance, numbers.Number) and not isinstance(instance, bool)


def _equal(one, two) -> bool:
    """jsonschema's equality: True is not 1, sequences and mappings compared item by item."""
    if one is two:
        return True
    if isinstance(one, str) or isinstance(two, str):
        return one == two
    if isinstance(one, Sequence) and isinstance(two, Sequence):
        return len(one) == len(two) and all(_equal(a, b) for a, b in zip(one, two))
    if isinstance(one, Mapping) and isinstance(two, Mapping):
        return len(one) == len(two) and all(k in two and _equal(v, two[k]) for k, v in one.items())
    if isinstance(one, bool) or isinstance(two, bool):
        return isinstance(one, bool) and isinstance(two, bool) and one == two
    return one == two


def _unique(instance, value, schema, root):
    if not value or not isinstance(instance, list):
        return True
    for i, item in enumerate(instance):
        if any(_equal(item, other) for other in instance[i + 1:]):
            return None  # jsonschema's own search may or may not find this pair
    return True


def _properties(instance, value, schema, root):
    if not isinstance(instance, dict):
        return True
    return _all(_conforms(instance[key], sub, root) for key, sub in value.items() if key in instance)


def _additional(instance, value, schema, root):
    if not isinstance(instance, dict):
        return True
    known = schema.get("properties", {})
    patterns = "|".join(schema.get("patternProperties", {}))
    extras = [key for key in instance if key not in known and not (patterns and re.search(patterns, key))]
    if isinstance(value, dict):
        return _all(_conforms(instance[key], value, root) for key in extras)
    return bool(value) or not extras


def _pattern_properties(instance, value, schema, root):
    if not isinstance(instance, dict):
        return True
    return _all(_conforms(item, sub, root) for pattern, sub in value.items()
                for key, item in instance.items() if re.search(pattern, key))


def _items(instance, value, schema, root):
    if not isinstance(instance, list):
        return True
    if "prefixItems" in schema:
        return None
    return _all(_conforms(item, value, root) for item in instance)


def _ref(instance, value, schema, root):
    """A JSON pointer into the root (``#`` or ``#/...``); an anchor, a percent-encoded pointer or
    another document is jsonschema's to resolve."""
    if value == "#":
        parts = []
    elif isinstance(value, str) and value.startswith("#/") and "%" not in value:
        parts = value[2:].split("/")
    else:
        return None
    target = root
    for part in parts:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            return None
        target = target[part]
    return _conforms(instance, target, root)


def _not(instance, value, schema, root):
    result = _conforms(instance, value, root)
    return None if result is None else not result


def _any_of(instance, value, schema, root):
    results = [_conforms(instance, sub, root) for sub in value]
    return True if True in results else (None if None in results else False)


def _one_of(instance, value, schema, root):
    results = [_conforms(instance, sub, root) for sub in value]
    return None if None in results else results.count(True) == 1


def _bound(test, applies):
    return lambda instance, value, schema, root: not applies(instance) or test(instance, value)


_string = lambda x: isinstance(x, str)  # noqa: E731
_array = lambda x: isinstance(x, list)  # noqa: E731
_object = lambda x: isinstance(x, dict)  # noqa: E731

_KEYWORDS = {
    "type": _type,
    "enum": lambda instance, value, schema, root: any(_equal(each, instance) for each in value),
    "const": lambda instance, value, schema, root: _equal(instance, value),
    "minimum": _bound(lambda x, v: not x < v, _number),
    "maximum": _bound(lambda x, v: not x > v, _number),
    "exclusiveMinimum": _bound(lambda x, v: not x <= v, _number),
    "exclusiveMaximum": _bound(lambda x, v: not x >= v, _number),
    "minLength": _bound(lambda x, v: len(x) >= v, _string),
    "maxLength": _bound(lambda x, v: len(x) <= v, _string),
    "pattern": _bound(lambda x, v: re.search(v, x) is not None, _string),
    "minItems": _bound(lambda x, v: len(x) >= v, _array),
    "maxItems": _bound(lambda x, v: len(x) <= v, _array),
    "uniqueItems": _unique,
    "items": _items,
    "required": _bound(lambda x, v: all(key in x for key in v), _object),
    "minProperties": _bound(lambda x, v: len(x) >= v, _object),
    "maxProperties": _bound(lambda x, v: len(x) <= v, _object),
    "properties": _properties,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional,
    "propertyNames": lambda instance, value, schema, root: (
        not isinstance(instance, dict) or _all(_conforms(key, value, root) for key in instance)),
    "$ref": _ref,
    "not": _not,
    "allOf": lambda instance, value, schema, root: _all(_conforms(instance, sub, root) for sub in value),
    "anyOf": _any_of,
    "oneOf": _one_of,
}
