"""The papers' published numbers, so every table shows the paper's value beside ours.

The numbers live in one YAML file per paper next to this module (``compcse.yaml``, ...):
``tables.<table>.columns`` and ``rows`` of ``{row, model, objective, options, scores}``, each
file's comments saying how the table was transcribed. A published row stands beside one of our
experiments only when its model, objective and every option it lists match (``subsampling`` is
matched like an option: the experiment's ``training.subsampling``); otherwise the paper cell stays
empty and the note says "no published row", so a reproduction gap is never an apples-to-oranges
comparison and a note never names a row that is not beside ours.

Each row also carries the *training setting* that produced it (``setting``: precision, lr,
batch size, epochs, max_len, corpus, segmenter): the file's ``setting``, updated by its table's
and then by the row's own. A value may be a mapping by model (``lr: {bert-base-uncased: 3e-5,
...}``). :func:`setting_differences` compares it with ours, so the note beside a published row
says where our run differs from the paper's. A row marked ``record_only`` is transcribed for the
record but never stands beside an experiment (a second printing of a row the lookup meets first).
"""

from __future__ import annotations

import functools
from importlib import resources

from cselab.io import load_yaml

#: the setting keys a note compares, in the order it names them
SETTING_KEYS = ("precision", "lr", "batch_size", "epochs", "max_steps", "max_len", "corpus", "segmenter")
#: a setting value the paper does not give (not compared)
NOT_STATED = "not stated"


def _resolve(setting: dict, model: str) -> dict:
    """A row's setting with per-model values (``{model: value}``) picked for ``model``."""
    return {k: (v.get(model) if isinstance(v, dict) else v) for k, v in setting.items()}


@functools.cache
def published() -> dict[tuple[str, str], list[dict]]:
    """``(paper, table) -> entries`` with ``scores`` as ``{column: value}``, from every YAML file."""
    out: dict[tuple[str, str], list[dict]] = {}
    for item in sorted(resources.files(__name__).iterdir(), key=lambda p: p.name):
        if not item.name.endswith(".yaml"):
            continue
        doc = load_yaml(item.read_text())
        for table, spec in doc["tables"].items():
            entries = []
            for row in spec["rows"]:
                if len(row["scores"]) != len(spec["columns"]):
                    raise ValueError(f"{item.name} {table} row {row['row']!r}: {len(row['scores'])} scores "
                                     f"for {len(spec['columns'])} columns")
                setting = {**doc.get("setting", {}), **spec.get("setting", {}), **row.get("setting", {})}
                entries.append({"model": row["model"], "objective": row["objective"],
                                "options": row.get("options") or {}, "row": row["row"],
                                "scores": dict(zip(spec["columns"], row["scores"])),
                                "setting": _resolve(setting, row["model"]),
                                "record_only": bool(row.get("record_only", False))})
            out[(doc["paper"], table)] = entries
    return out


def columns(paper: str, table: str) -> list[str]:
    return list(published()[(paper, table)][0]["scores"])


def lookup(paper: str, table: str, model: str, objective: str, options: dict) -> tuple[dict | None, str]:
    """Return (the published entry matching this setting or None, a note for the reader)."""
    for entry in published().get((paper, table), []):
        if entry["record_only"] or entry["model"] != model or entry["objective"] != objective:
            continue
        if all(options.get(k) == v for k, v in entry["options"].items()):
            return entry, f"paper row: {entry['row']}"
    return None, ""


def lookup_any(sources, model: str, objective: str, options: dict,
               setting: dict | None = None) -> tuple[dict | None, str]:
    """The first of ``sources`` ((paper, table) pairs) with a matching published setting, and the
    note: the row and, given ``setting`` (ours), where it differs from the paper's; "no published
    row" when none matches."""
    for paper, table in sources:
        entry, note = lookup(paper, table, model, objective, options)
        if entry:
            if setting is not None:
                note += "; " + setting_note(entry["setting"], setting)
            return entry, f"{note} [{paper} {table}]"
    return None, "no published row" if sources else ""


def _show(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return "none" if value is None else str(value)


def compared_keys(paper: dict, ours: dict) -> list[str]:
    """The setting keys a note compares: named by both, and stated by the paper."""
    return [k for k in SETTING_KEYS if k in paper and k in ours and paper[k] != NOT_STATED]


def setting_note(paper: dict, ours: dict) -> str:
    """Where our training setting differs from the paper's row, or that it does not: "same training
    setting as the paper's" when the paper states every key we name, else the same where it is
    stated and which keys it leaves out; "paper setting not stated" when it states none."""
    diff = setting_differences(paper, ours)
    if diff:
        return "ours differs: " + ", ".join(diff)
    compared = compared_keys(paper, ours)
    unstated = [k.replace("_", " ") for k in SETTING_KEYS if k in ours and k not in compared]
    if not compared:
        return "paper setting not stated"
    if not unstated:
        return "same training setting as the paper's"
    return f"same training setting as the paper's where it is stated (not stated: {', '.join(unstated)})"


def setting_differences(paper: dict, ours: dict) -> list[str]:
    """``["lr 3e-05 (paper 7e-06)", ...]`` for every key both settings name where ours differs from
    the paper's (a value the paper does not state, :data:`NOT_STATED`, is not compared)."""
    out = []
    for key in compared_keys(paper, ours):
        mine, theirs = ours.get(key), paper[key]
        if mine != theirs and not (isinstance(mine, (int, float)) and isinstance(theirs, (int, float))
                                   and abs(mine - theirs) <= 1e-12 * max(abs(mine), abs(theirs))):
            out.append(f"{key.replace('_', ' ')} {_show(mine)} (paper {_show(theirs)})")
    return out


def retrieval_examples(paper: str) -> list[dict]:
    """A paper's printed retrieval examples (DiffCSE Table 9): ``[{query, <method>: [top-k]}]``."""
    item = resources.files(__name__) / f"{paper}.yaml"
    return list(load_yaml(item.read_text()).get("retrieval_examples", [])) if item.is_file() else []
