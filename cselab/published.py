"""Published numbers, so every table shows the paper's value beside ours.

An entry applies to one of our rows only when the row's model, objective and the listed
options all match the paper's setting; otherwise the paper cell stays empty and ``note`` says
what the paper's row used, so a reproduction gap is never an apples-to-oranges comparison.
"""

from __future__ import annotations

STS_COLUMNS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R"]


def _sts(values: str) -> dict[str, float]:
    nums = [float(v) for v in values.split()]
    return dict(zip(STS_COLUMNS + ["Avg"], nums))


# CompCSE (Chanchani & Huang, 2023), Table 1 (SimCSE rows imported from Gao et al., 2021).
COMPCSE_TABLE1 = [
    {"model": "bert-base-uncased", "objective": "simcse", "options": {}, "row": "SimCSE (Gao et al., 2021)",
     "scores": _sts("68.40 82.41 74.38 80.91 78.56 76.85 72.23 76.25")},
    {"model": "bert-base-uncased", "objective": "compcse", "options": {"aggregation": "avg", "partitions": 2},
     "row": "SimCSE (w/ comp.)", "scores": _sts("72.14 84.06 75.38 83.82 80.43 80.29 71.12 78.18")},
    {"model": "bert-large-uncased", "objective": "simcse", "options": {}, "row": "SimCSE (Gao et al., 2021)",
     "scores": _sts("70.88 84.16 76.43 84.50 79.76 79.26 73.88 78.41")},
    {"model": "bert-large-uncased", "objective": "compcse", "options": {"subsampling": "subsuming"},
     "row": "SimCSE (+ subsum.)", "scores": _sts("75.10 86.57 77.70 84.72 80.25 80.17 73.21 79.67")},
    {"model": "roberta-base", "objective": "simcse", "options": {}, "row": "SimCSE (Gao et al., 2021)",
     "scores": _sts("70.16 81.77 73.24 81.36 80.65 80.22 68.56 76.57")},
    {"model": "roberta-base", "objective": "compcse", "options": {"aggregation": "concat_halves", "partitions": 2},
     "row": "SimCSE (w/ comp.)", "scores": _sts("72.56 83.33 73.67 83.36 81.14 80.71 70.39 77.88")},
    {"model": "roberta-large", "objective": "simcse", "options": {}, "row": "SimCSE (Gao et al., 2021)",
     "scores": _sts("72.86 83.99 75.62 84.77 81.80 81.98 71.26 78.90")},
    {"model": "roberta-large", "objective": "compcse", "options": {"aggregation": "concat_halves", "partitions": 2},
     "row": "SimCSE (w/ comp.)", "scores": _sts("72.32 84.19 75.00 84.83 81.27 82.10 70.99 78.67")},
]

# DiffCSE (Chuang et al., 2022), Table 11: alignment / uniformity on the STS-B test set.
# (Its "Avg. BERT" row uses average pooling, which our untrained [CLS] row is not.)
DIFFCSE_TABLE11 = [
    {"model": "bert-base-uncased", "objective": "simcse", "options": {}, "row": "SimCSE-BERT_base",
     "scores": {"alignment": 0.177, "uniformity": -2.313}},
    {"model": "bert-base-uncased", "objective": "diffcse", "options": {}, "row": "DiffCSE-BERT_base",
     "scores": {"alignment": 0.097, "uniformity": -1.438}},
]

PUBLISHED = {("compcse", "table1"): COMPCSE_TABLE1, ("diffcse", "table11"): DIFFCSE_TABLE11}


def _register_other_tables() -> None:
    from cselab import published_retrieval, published_transfer

    for module in (published_transfer, published_retrieval):
        for key, entries in module.ENTRIES.items():
            PUBLISHED.setdefault(key, entries)


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


def lookup(paper: str, table: str, model: str, objective: str, options: dict) -> tuple[dict | None, str]:
    """Return (the published entry matching this setting or None, a note for the reader)."""
    note = ""
    for entry in PUBLISHED.get((paper, table), []):
        if entry["model"] != model or entry["objective"] != objective:
            continue
        mismatched = {k: v for k, v in entry["options"].items() if options.get(k) != v}
        if not mismatched:
            return entry, f"paper row: {entry['row']}"
        note = f"paper row '{entry['row']}' uses {mismatched}; not comparable"
    return None, note


_register_other_tables()
