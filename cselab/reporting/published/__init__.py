"""The papers' published numbers, so every table shows the paper's value beside ours.

The numbers live in one YAML file per paper next to this module (``compcse.yaml``, ...):
``tables.<table>.columns`` and ``rows`` of ``{row, model, objective, options, scores}``, each
file's comments saying how the table was transcribed. A published row stands beside one of our
experiments only when its model, objective and every option it lists match (``subsampling`` is
matched like an option: the experiment's ``training.subsampling``); otherwise the paper cell stays
empty and the note says what the paper's row used, so a reproduction gap is never an
apples-to-oranges comparison.
"""

from __future__ import annotations

import functools
from importlib import resources

import yaml


@functools.cache
def published() -> dict[tuple[str, str], list[dict]]:
    """``(paper, table) -> entries`` with ``scores`` as ``{column: value}``, from every YAML file."""
    out: dict[tuple[str, str], list[dict]] = {}
    for item in sorted(resources.files(__name__).iterdir(), key=lambda p: p.name):
        if not item.name.endswith(".yaml"):
            continue
        doc = yaml.safe_load(item.read_text())
        for table, spec in doc["tables"].items():
            entries = []
            for row in spec["rows"]:
                if len(row["scores"]) != len(spec["columns"]):
                    raise ValueError(f"{item.name} {table} row {row['row']!r}: {len(row['scores'])} scores "
                                     f"for {len(spec['columns'])} columns")
                entries.append({"model": row["model"], "objective": row["objective"],
                                "options": row.get("options") or {}, "row": row["row"],
                                "scores": dict(zip(spec["columns"], row["scores"]))})
            out[(doc["paper"], table)] = entries
    return out


def columns(paper: str, table: str) -> list[str]:
    return list(published()[(paper, table)][0]["scores"])


def lookup(paper: str, table: str, model: str, objective: str, options: dict) -> tuple[dict | None, str]:
    """Return (the published entry matching this setting or None, a note for the reader)."""
    note = ""
    for entry in published().get((paper, table), []):
        if entry["model"] != model or entry["objective"] != objective:
            continue
        mismatched = {k: v for k, v in entry["options"].items() if options.get(k) != v}
        if not mismatched:
            return entry, f"paper row: {entry['row']}"
        note = f"paper row '{entry['row']}' uses {mismatched}; not comparable"
    return None, note


def lookup_any(sources, model: str, objective: str, options: dict) -> tuple[dict | None, str]:
    """The first of ``sources`` ((paper, table) pairs) with a matching published setting."""
    notes = []
    for paper, table in sources:
        entry, note = lookup(paper, table, model, objective, options)
        if entry:
            return entry, f"{note} [{paper} {table}]"
        if note:
            notes.append(f"{note} [{paper} {table}]")
    return None, "; ".join(notes)


def retrieval_examples(paper: str) -> list[dict]:
    """A paper's printed retrieval examples (DiffCSE Table 9): ``[{query, <method>: [top-k]}]``."""
    item = resources.files(__name__) / f"{paper}.yaml"
    return list(yaml.safe_load(item.read_text()).get("retrieval_examples", [])) if item.is_file() else []
