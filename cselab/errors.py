"""User-facing errors.

Anything a user can cause (a bad config value, missing or corrupt data, an unknown model)
raises a :class:`CselabError` whose message names the culprit and the fix. Workflow scripts
turn it into one clear line on stderr and a non-zero exit instead of a traceback.
"""

import contextlib
import errno
import functools
import json


class CselabError(Exception):
    """An error caused by the user's input, with a message that says what to do."""


class ConfigError(CselabError):
    """Invalid configuration (names the offending key)."""


class DataError(CselabError):
    """Missing, empty, truncated or corrupt input data (names the file and the fix)."""


class ModelError(CselabError):
    """A model that cannot be resolved or loaded."""


class ExportError(CselabError):
    """An export that cannot be built or shared (no card, no token, no repository id)."""


class NumericError(CselabError, FloatingPointError):
    """Training diverged (a NaN or infinite loss, a collapsed model): names the settings behind it."""


class TrackingError(CselabError):
    """The MLflow tracking server cannot be reached (names the server and the ways out)."""


class StorageError(CselabError):
    """A file that cannot be written: the disk is full, read-only or over its quota (names the
    path, the cause, and the space needed where known)."""


#: the errors of a file that cannot be written, in words
STORAGE_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is exceeded",
                  errno.EROFS: "the file system is read-only", errno.EFBIG: "the file is larger than allowed",
                  errno.EACCES: "permission denied"}


def storage_error(e: BaseException, path=None, need=None) -> StorageError | None:
    """The :class:`StorageError` that ``e`` means, or None: an ``OSError`` of :data:`STORAGE_ERRNOS`
    in its chain (torch's checkpoint writer, for one, raises a ``RuntimeError`` around it), named
    with its file (else ``path``), the space free there and ``need`` (bytes, or a callable giving
    them) where known. Without such an ``OSError``, a failure to write ``path`` where less than
    ``need`` is free is the disk being full too (a writer that kept only its own message)."""
    import os
    import shutil

    cause = next((x for x in _chain(e) if isinstance(x, OSError) and x.errno in STORAGE_ERRNOS), None)
    where = str(getattr(cause, "filename", None) or path or os.getcwd())
    need = need() if callable(need) else need
    free = _free_bytes(where, shutil)
    if cause is None and not (path is not None and need is not None and free is not None and free < need):
        return None
    code = cause.errno if cause is not None else errno.ENOSPC
    full = code in (errno.ENOSPC, errno.EDQUOT)
    space = (f"; {free / 1e6:,.1f} MB free there" if full and free is not None else "") + \
        (f", about {need / 1e6:,.1f} MB needed" if full and need else "")
    fix = ("free space there" if full else "raise the file size limit (ulimit -f)" if code == errno.EFBIG
           else "make it writable")
    verb = "cannot open" if code == errno.EACCES else "cannot write"
    return StorageError(f"{verb} {where}: {STORAGE_ERRNOS[code]}{space}. {fix.capitalize()} and rerun: what was "
                        "written whole before (outputs, the last good checkpoint) is kept, nothing partial is")


def _chain(e: BaseException):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def _free_bytes(where: str, shutil) -> int | None:
    from pathlib import Path

    for folder in (Path(where), *Path(where).parents):
        try:
            return shutil.disk_usage(folder).free
        except OSError:
            continue
    return None


@contextlib.contextmanager
def named_storage_errors(path=None, need=None):
    """A block whose failure to write a file (:func:`storage_error`) becomes one
    :class:`StorageError` naming it; any other error passes unchanged."""
    try:
        yield
    except CselabError:
        raise
    except Exception as e:  # noqa: BLE001 (torch wraps the OSError in its own error)
        named = storage_error(e, path, need)
        if named is None:
            raise
        raise named from e


# -- one message per schema violation -------------------------------------------------------------
# The config schema, a figure kind's options and a method's options are JSON-schema documents,
# checked by one function with one set of messages, each naming the key.

def check_schema(instance, schema: dict, where: str = "", context: str = "") -> None:
    """Check ``instance`` (the value at config key ``where``) against ``schema``; raise
    :class:`ConfigError` naming the first offending key (the shallowest, then alphabetical),
    with ``context`` appended and a count of the problems left."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    if validator.is_valid(instance):
        return
    errors = sorted(validator.iter_errors(instance), key=lambda e: (len(e.absolute_path), _key(e.absolute_path)))
    if errors:
        more = f" ({len(errors) - 1} more problem(s) after fixing this one)" if len(errors) > 1 else ""
        raise ConfigError(explain(errors[0], where) + (f" ({context})" if context else "") + more)


@functools.lru_cache(maxsize=256)
def _validator(schema: str):
    """jsonschema's validator of a schema (its JSON text), built once: a plan checks the same
    method's options and figure kind's options many times."""
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads(schema))


def _key(path, where: str = "") -> str:
    return ".".join([where, *(str(p) for p in path)] if where else [str(p) for p in path]) or "<top level>"


def _types(schema: dict) -> list:
    types = schema.get("type", [])
    return types if isinstance(types, list) else [types]


def _range(schema: dict) -> str:
    """A number's allowed range in words: ``in (0, 1)``, ``>= 0``, ``in 2..4``."""
    low = ("[", schema["minimum"]) if "minimum" in schema else ("(", schema.get("exclusiveMinimum"))
    high = ("]", schema["maximum"]) if "maximum" in schema else (")", schema.get("exclusiveMaximum"))
    if low[1] is not None and high[1] is not None:
        if "integer" in _types(schema) and low[0] == "[" and high[0] == "]":
            return f"in {low[1]}..{high[1]}"
        return f"in {low[0]}{low[1]}, {high[1]}{high[0]}"
    if low[1] is not None:
        return f"{'>=' if low[0] == '[' else '>'} {low[1]}"
    return f"{'<=' if high[0] == ']' else '<'} {high[1]}"


def _alternative(schema: dict) -> str:
    """One alternative of an ``anyOf`` in words: ``an integer >= 1``, ``'auto' or null``."""
    if "enum" in schema:
        return " or ".join("null" if v is None else repr(v) for v in schema["enum"])
    kind = "an integer" if "integer" in _types(schema) else "a number" if "number" in _types(schema) else \
        " or ".join(_types(schema)) or "a value"
    bounded = any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"))
    return f"{kind} {_range(schema)}" if bounded else kind


def explain(error, where: str = "") -> str:
    """One jsonschema error as a sentence naming the config key (``where`` + the error's path)."""
    import difflib

    key = _key(error.absolute_path, where)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(error.schema.get("properties", {}))
        msgs = []
        for name in sorted(set(error.instance) - set(allowed)):
            full = f"{key}.{name}" if key != "<top level>" else name
            hint = difflib.get_close_matches(name, allowed, n=1)
            did = f" (did you mean '{hint[0]}'?)" if hint else ""
            msgs.append(f"unknown config key '{full}'{did}; valid keys here: {', '.join(allowed) or '(none)'}")
        if msgs:
            return "; ".join(msgs)
    if error.validator == "required":
        return f"config key '{key}' is missing a required entry: {error.message}"
    if error.validator == "enum":
        hint = difflib.get_close_matches(str(error.instance), [str(v) for v in error.validator_value], n=1)
        did = f" (did you mean {hint[0]!r}?)" if hint else ""
        return f"config key '{key}': {error.instance!r} is not one of {error.validator_value}{did}"
    if error.validator in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        kind = "an integer" if "integer" in _types(error.schema) else "a number"
        null = " or null" if "null" in _types(error.schema) else ""
        return f"config key '{key}': must be {kind} {_range(error.schema)}{null}, got {error.instance!r}"
    if error.validator == "anyOf":
        allowed = " or ".join(map(_alternative, error.validator_value))
        return f"config key '{key}': must be {allowed}, got {error.instance!r}"
    if error.validator == "type" and isinstance(error.instance, str):
        try:
            float(error.instance)
            return (f"config key '{key}': {error.instance!r} is a string, expected "
                    f"{error.validator_value}; YAML reads 3e-5 as text, write 3.0e-5")
        except ValueError:
            pass
    if error.validator == "not" and error.validator_value == {}:
        return f"config key '{key}' is filled in by the workflow; a config does not set it"
    if error.validator == "propertyNames":
        return (f"config key '{key}': name {error.instance!r} may contain only letters, digits, "
                f"'.', '_' and '-'")
    return f"config key '{key}': {error.message}"
