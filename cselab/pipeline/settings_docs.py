"""Write the config's JSON schema and its documentation from the settings dataclasses:
``python -m cselab.pipeline.settings_docs`` (``--check``: exit 1 when a checked-in file is stale)."""

from __future__ import annotations

import dataclasses
import json
import sys
import typing
from pathlib import Path

from cselab.settings import base
from cselab.settings.config import Config

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "cselab" / "schema" / "config.schema.json"
DOCS_PATH = ROOT / "docs" / "settings.md"
COMMAND = "python -m cselab.pipeline.settings_docs"
HEADER = (f"generated from the dataclasses of cselab/settings by `{COMMAND}`; do not edit: change the dataclasses "
          "and regenerate")


def schema() -> dict:
    """The config's schema: the top level from :class:`Config`, the partial settings under ``$defs``."""
    top = base.schema_of(Config)
    out = {"$comment": HEADER, "$schema": top.pop("$schema"), "title": top.pop("title"), **top}
    out["$defs"] = {name: base.schema_of(cls, partial=True) for name, cls in base.DEFS.items()}
    return out


def schema_text() -> str:
    return json.dumps(schema(), indent=2, ensure_ascii=False) + "\n"


# -- docs ---------------------------------------------------------------------------------------------

def _type_name(tp) -> str:
    inner, nullable = base._non_null(tp)
    origin, args = typing.get_origin(inner), typing.get_args(inner)
    if origin is typing.Annotated:
        partial = next((a for a in args[1:] if isinstance(a, base._Partial)), None)
        name = f"overrides of {partial.cls.__name__}" if partial else _type_name(args[0])
    elif origin is typing.Literal:
        name = " \\| ".join(json.dumps(a) for a in args)
    elif origin in (list, tuple):
        name = f"list of {_type_name(args[0])}"
    elif origin is dict:
        name = f"map of {_type_name(args[1])}" if args and args[1] is not typing.Any else "mapping"
    elif dataclasses.is_dataclass(inner):
        name = "section"
    else:
        name = {int: "integer", float: "number", str: "string", bool: "boolean"}.get(inner, str(inner))
    return f"{name} or null" if nullable else name


def _default_text(f: dataclasses.Field) -> str:
    if f.metadata.get("required"):
        return "required"
    value = base.default_of(f)
    if not f.metadata.get("fill"):
        return "unset" if value in (None, {}, []) else f"unset ({json.dumps(base.to_plain(value))})"
    if dataclasses.is_dataclass(value):
        return "(its keys')"
    return f"`{json.dumps(base.to_plain(value))}`"


def _sections(cls: type, prefix: str) -> list[tuple[str, type]]:
    """(dotted name, class) of ``cls`` and every settings class under it (entries as ``<name>``)."""
    out = [(prefix, cls)]
    for f, tp in base.fields(cls):
        inner, _ = base._non_null(tp)
        origin, args = typing.get_origin(inner), typing.get_args(inner)
        if origin is dict and args:
            inner, _ = base._non_null(args[1])
            name = f"{prefix}.{f.name}.<name>" if prefix else f"{f.name}.<name>"
        else:
            name = f"{prefix}.{f.name}" if prefix else f.name
        if isinstance(inner, type) and dataclasses.is_dataclass(inner) and inner is not Config:
            out.extend(_sections(inner, name))
    return out


def docs_text() -> str:
    lines = [f"<!-- {HEADER} -->", "", "# Settings", "",
             "Every key of the workflow's config, by section: its type, its default (the paper config's, "
             "`config.yaml`) and what it does. *required*: no default; *unset*: the key may be left out, and its "
             "absence means what the description says. A config may leave out any key with a default: it is filled "
             "in when the config is validated. Generated from the dataclasses of `cselab/settings/` (the schema, "
             f"`cselab/schema/config.schema.json`, too): change them and run `{COMMAND}`.", ""]
    seen = set()
    for name, cls in _sections(Config, ""):
        if (name, cls) in seen:
            continue
        seen.add((name, cls))
        doc = getattr(cls, "DOC", "") or (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        lines += [f"## {name or 'top level'}", ""] + ([doc, ""] if doc and not doc.startswith(cls.__name__ + "(")
                                                       else [])
        lines += ["| key | type | default | description |", "|---|---|---|---|"]
        for f, tp in base.fields(cls):
            desc = f.metadata.get("doc", "").replace("|", "\\|").replace("\n", " ")
            key = f"{name}.{f.name}" if name else f.name
            kind = _type_name(tp).replace("map of section", f"map of `{key}.<name>`").replace("section", f"`{key}`")
            lines.append(f"| `{f.name}` | {kind} | {_default_text(f)} | {desc} |")
        lines.append("")
    return "\n".join(lines + _figure_kind_lines())


def _figure_kind_lines() -> list[str]:
    """A table per figure kind: the options its figures may set beside ``kind``, ``title``,
    ``experiments`` and ``table`` (its options dataclass, declared with the kind)."""
    from cselab.reporting.kinds import figure_kinds

    lines = ["## figures.<name>: each kind's options", "",
             "A figure sets its kind's options beside the keys above, declared with the kind (its `options` dataclass "
             "in `cselab/reporting/figures/`).", ""]
    for name, kind in sorted(figure_kinds().items()):
        if kind.draw.__module__.endswith("_test"):  # a contract test's toy kind, there while the test runs
            continue
        doc = (kind.draw.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        lines += [f"### kind `{name}`", ""] + ([doc, ""] if doc else [])
        rows = base.fields(kind.options)
        if not rows:
            lines += ["No options.", ""]
            continue
        lines += ["| key | type | default | description |", "|---|---|---|---|"]
        for f, tp in rows:
            desc = f.metadata.get("doc", "").replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{f.name}` | {_type_name(tp)} | {_default_text(f)} | {desc} |")
        lines.append("")
    return lines


def stale() -> list[Path]:
    """The checked-in files that differ from what the dataclasses generate."""
    return [path for path, text in ((SCHEMA_PATH, schema_text()), (DOCS_PATH, docs_text()))
            if not path.is_file() or path.read_text() != text]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        old = stale()
        for path in old:
            print(f"{path.relative_to(ROOT)} is stale: run `{COMMAND}`", file=sys.stderr)
        return 1 if old else 0
    SCHEMA_PATH.write_text(schema_text())
    DOCS_PATH.write_text(docs_text())
    print(f"wrote {SCHEMA_PATH.relative_to(ROOT)} and {DOCS_PATH.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
