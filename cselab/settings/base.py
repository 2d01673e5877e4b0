"""Settings declared once: a frozen dataclass per config section, each field declared with
:func:`setting` (its default, its description and its JSON-schema constraints beyond the type).

From those declarations come the config's JSON schema (:func:`schema_of`, written to
``cselab/schema/config.schema.json`` by ``python -m cselab.pipeline.settings_docs``), its defaults
(:func:`fill_defaults`: a config may leave out any key that has one) and typed access
(:func:`from_dict`: ``settings.lr`` instead of ``t["lr"]``). Imports neither torch nor any other
heavy package: the workflow reads it when it plans.

A field is one of:

- a setting with a default (``setting(0.1, doc=...)``): optional in the schema, filled in by
  :func:`fill_defaults`;
- a required key (``setting(required=True)``): no default, the schema requires it;
- an optional key whose absence means something the code decides (``setting(None, fill=False)``,
  e.g. ``evaluation.max_tokens``): neither required nor filled; the default is only its value in
  the typed object.

Types come from the annotations: ``int``, ``float``, ``str``, ``bool``, ``X | None``,
``Literal[...]`` (an enum), ``list[X]``, ``dict[str, X]`` (``additionalProperties``), a nested
settings dataclass (a nested object), ``dict[str, Any]`` (any object) and :func:`Overrides`
(a partial settings object: every key optional, nothing filled; the schema's ``$defs``).
Constraints given to :func:`setting` are merged into the generated schema, recursively, so
``items={"minLength": 1}`` constrains a list's items and ``additionalProperties={...}`` a map's values.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import types
import typing
from typing import Annotated, Any, Callable, Literal, Union

from cselab.errors import ConfigError

MISSING = dataclasses.MISSING

#: a frozen settings dataclass: keyword-only (so a required key may follow a defaulted one)
settings = dataclasses.dataclass(frozen=True, kw_only=True)


def setting(default: Any = MISSING, *, doc: str = "", required: bool = False, fill: bool = True,
            schema: dict | None = None, **constraints) -> Any:
    """One setting: its ``default`` (a list, dict or settings dataclass is copied per object; a
    settings class stands for its defaults), its description and its JSON-schema ``constraints``
    beyond the type (``minimum``, ``pattern``, ``items={...}``, ...). ``required``: no default,
    the schema requires the key. ``fill=False``: the key may be absent and is not filled in (its
    absence means something of its own); ``default`` is then only its typed value. ``schema``
    replaces the type generated from the annotation (e.g. ``{}`` for a key enumerated at load time)."""
    metadata = {"doc": doc, "constraints": constraints, "required": required, "fill": fill and not required,
                "schema": schema}
    if required or default is MISSING:
        return dataclasses.field(metadata={**metadata, "required": required, "fill": False})
    if isinstance(default, type) and dataclasses.is_dataclass(default):
        return dataclasses.field(default_factory=default, metadata=metadata)
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


class _Partial:
    def __init__(self, cls: type):
        self.cls = cls


def Overrides(cls: type):  # noqa: N802 (a type constructor)
    """The annotation of a partial ``cls``: any of its keys, none required or filled (``plms.<p>.training``
    overrides the global ``training``); its typed value stays the plain dict of the keys given."""
    return Annotated[dict[str, Any], _Partial(cls)]


#: settings classes emitted once under the schema's ``$defs`` (by that name) and referenced
DEFS: dict[str, type] = {}

_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null"}


@functools.cache
def fields(cls: type) -> tuple[tuple[dataclasses.Field, Any], ...]:
    """The dataclass's fields with their resolved annotations (resolved once per class: a plan
    types thousands of settings)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return tuple((f, hints[f.name]) for f in dataclasses.fields(cls))


def _is_union(tp) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _non_null(tp) -> tuple[Any, bool]:
    """(the type without None, whether None is allowed)."""
    if _is_union(tp):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(tp))
        return (args[0] if len(args) == 1 else Union[tuple(args)]), nullable
    return tp, False


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def type_schema(tp) -> dict:
    """The JSON schema of an annotation (see the module docstring)."""
    inner, nullable = _non_null(tp)
    out = _type_schema(inner)
    if nullable:
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        elif "$ref" in out or "type" not in out:
            raise TypeError(f"cannot make {tp} nullable")
        else:
            out["type"] = [out["type"], "null"]
    return out


def _type_schema(tp) -> dict:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        partial = next((a for a in args[1:] if isinstance(a, _Partial)), None)
        if partial is not None:
            return _nested(partial.cls, partial=True)
        return _type_schema(args[0])
    if tp is Any:
        return {}
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (list, tuple):
        return {"type": "array", "items": type_schema(args[0])}
    if origin is dict or tp is dict:
        value = args[1] if args else Any
        return {"type": "object"} if value is Any else {"type": "object", "additionalProperties": type_schema(value)}
    if dataclasses.is_dataclass(tp):
        return _nested(tp, partial=False)
    raise TypeError(f"no JSON schema for the annotation {tp!r}")


def _nested(cls: type, partial: bool) -> dict:
    name = next((n for n, c in DEFS.items() if c is cls), None)
    if name is None:
        return schema_of(cls, partial=partial)
    required = [] if partial else _required(cls)
    return {"allOf": [{"$ref": f"#/$defs/{name}"}], "required": required} if required else {"$ref": f"#/$defs/{name}"}


def _required(cls: type) -> list[str]:
    """The keys the schema requires: those without a default, or every key of a class whose
    ``ALL_KEYS`` says that, given, it states all of them (an override replaces it whole)."""
    return [f.name for f, _ in fields(cls) if f.metadata.get("required") or getattr(cls, "ALL_KEYS", False)]


def field_schema(f: dataclasses.Field, tp) -> dict:
    """A field's schema: its annotation's type with its constraints. A :func:`setting` keeps its
    constraints apart (its ``schema`` replaces the type); a plain dataclass field (a method's
    option, a plugin kind's setting) gives them as ``metadata["schema"]`` beside its type."""
    meta = f.metadata
    if "constraints" in meta:
        base = dict(meta["schema"]) if meta.get("schema") is not None else type_schema(tp)
        constraints = meta["constraints"]
    else:
        try:
            base = type_schema(tp)
        except TypeError:  # an annotation JSON has no type for (a union of two types): its constraints alone
            base = {}
        constraints = meta.get("schema") or {}
    out = _merge(base, constraints)
    if meta.get("doc"):
        out["description"] = meta["doc"]
    return out


def schema_of(cls: type, partial: bool = False) -> dict:
    """``cls`` as a JSON-schema object: its fields' types and constraints, no other keys (unless
    the class sets ``EXTRA_KEYS``), its required keys (none when ``partial``), its docstring's
    first paragraph as the description where the class sets ``DOC``."""
    out: dict = {"type": "object", "additionalProperties": bool(getattr(cls, "EXTRA_KEYS", False))}
    out.update(getattr(cls, "SCHEMA", {}))
    out["properties"] = {f.name: field_schema(f, tp) for f, tp in fields(cls)}
    required = [] if partial else _required(cls)
    if required:
        out["required"] = required
    if getattr(cls, "DOC", ""):
        out["description"] = cls.DOC
    return out


# -- values ------------------------------------------------------------------------------------------

def default_of(f: dataclasses.Field) -> Any:
    """A field's default value (MISSING for a required key)."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def to_plain(value: Any) -> Any:
    """A typed value as the config's plain data (dataclass -> dict, tuple -> list)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    return value


def _settings_class(tp) -> type | None:
    inner, _ = _non_null(tp)
    return inner if isinstance(inner, type) and dataclasses.is_dataclass(inner) else None


def fill_defaults(cls: type, d: dict) -> dict:
    """``d`` (a dict that passed ``cls``'s schema) with every missing key that has a default
    filled in, in nested settings too (not inside maps of entries, nor in partial overrides);
    a new dict, ``d`` unchanged."""
    out = dict(d)
    for f, tp in fields(cls):
        if f.name in out:
            nested = _settings_class(tp)
            if nested is not None and isinstance(out[f.name], dict):
                out[f.name] = fill_defaults(nested, out[f.name])
        elif f.metadata.get("fill"):
            out[f.name] = to_plain(default_of(f))
    return out


def from_dict(cls: type, d: dict, where: str = ""):
    """The typed, frozen ``cls`` of a plain dict (nested settings built too, lists as tuples); a
    missing key takes its default, a missing required key or an unknown key raises ConfigError."""
    if not isinstance(d, dict):
        raise ConfigError(f"config key '{where or '<top level>'}': expected a mapping, got {d!r}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown and not getattr(cls, "EXTRA_KEYS", False):
        key = f"{where}.{unknown[0]}" if where else unknown[0]
        raise ConfigError(f"unknown config key '{key}'; valid keys here: {', '.join(sorted(known))}")
    kwargs = {}
    for f, tp in fields(cls):
        key = f"{where}.{f.name}" if where else f.name
        if f.name in d:
            kwargs[f.name] = _typed(tp, d[f.name], key)
        elif default_of(f) is MISSING:
            raise ConfigError(f"config key '{where or '<top level>'}' is missing a required entry: '{f.name}'")
    return cls(**kwargs)


def _typed(tp, value, where: str):
    inner, _ = _non_null(tp)
    if value is None:
        return None
    origin, args = typing.get_origin(inner), typing.get_args(inner)
    if origin is Annotated:
        return copy.deepcopy(value) if any(isinstance(a, _Partial) for a in args[1:]) else _typed(args[0], value, where)
    if isinstance(inner, type) and dataclasses.is_dataclass(inner):
        return from_dict(inner, value, where)
    if origin in (list, tuple):
        return tuple(_typed(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict and args:
        return {k: _typed(args[1], v, f"{where}.{k}") for k, v in value.items()}
    return copy.deepcopy(value)


def check_defaults(cls: type) -> None:
    """Every default that fills a key of ``cls`` (nested settings included) passes its own schema
    (raises ConfigError naming the key)."""
    from cselab.errors import check_schema

    values = {f.name: to_plain(default_of(f)) for f, _ in fields(cls) if f.metadata.get("fill")}
    check_schema(values, {**schema_of(cls, partial=True), "$defs": {n: schema_of(c, partial=True)
                                                                      for n, c in DEFS.items()}},
                 where=cls.__name__)


__all__ = ["DEFS", "Overrides", "check_defaults", "default_of", "fields", "fill_defaults", "from_dict", "schema_of",
           "setting", "settings", "to_plain"]


def per_config(fn: Callable) -> Callable:
    """``fn(cfg, *args)`` cached per validated config dict and ``args``: a validated config is
    read-only, and the cache holds the dict, so its ``id`` is not reused while cached (the 16
    newest configs are kept). What it returns is shared: frozen, or only read."""
    store: dict[int, tuple[dict, dict]] = {}

    @functools.wraps(fn)
    def cached(cfg: dict, *args):
        held = store.get(id(cfg))
        if held is None or held[0] is not cfg:
            if len(store) >= 16:
                store.pop(next(iter(store)))
            held = store[id(cfg)] = (cfg, {})
        if args not in held[1]:
            held[1][args] = fn(cfg, *args)
        return held[1][args]

    return cached
