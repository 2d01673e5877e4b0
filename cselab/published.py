"""Published numbers, so every table shows the paper's value beside ours.

An entry applies to one of our rows only when the row's model, objective and the listed
options all match the paper's setting (``subsampling`` is matched like an option: the row's
``training.subsampling``); otherwise the paper cell stays empty and ``note`` says
what the paper's row used, so a reproduction gap is never an apples-to-oranges comparison.
"""

from __future__ import annotations

STS_COLUMNS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R"]


def _sts(values: str) -> dict[str, float]:
    nums = [float(v) for v in values.split()]
    return dict(zip(STS_COLUMNS + ["Avg"], nums))


# CompCSE's settings: composition alone = k = 2, compose z+, loss on all coordinates, no subsampling.
_COMP = {"partitions": 2, "aggregation": "avg", "compose": "z+", "d0": None, "subsampling": "none"}
_BEST_BERT_BASE = {**_COMP, "d0": 256}
_COMP_ROBERTA = {**_COMP, "aggregation": "concat_halves"}
_DEV = "STS-B dev"

# CompCSE (Chanchani & Huang, 2023), Table 1 (SimCSE rows imported from Gao et al., 2021).
COMPCSE_TABLE1 = [
    {"model": "bert-base-uncased", "objective": "simcse", "options": {}, "row": "SimCSE (Gao et al., 2021)",
     "scores": _sts("68.40 82.41 74.38 80.91 78.56 76.85 72.23 76.25")},
    {"model": "bert-base-uncased", "objective": "compcse", "options": _BEST_BERT_BASE,
     "row": "SimCSE (w/ comp.)", "scores": _sts("72.14 84.06 75.38 83.82 80.43 80.29 71.12 78.18")},
    {"model": "bert-large-uncased", "objective": "simcse", "options": {}, "row": "SimCSE (Gao et al., 2021)",
     "scores": _sts("70.88 84.16 76.43 84.50 79.76 79.26 73.88 78.41")},
    {"model": "bert-large-uncased", "objective": "compcse", "options": {**_COMP, "subsampling": "subsuming"},
     "row": "SimCSE (+ subsum.)", "scores": _sts("75.10 86.57 77.70 84.72 80.25 80.17 73.21 79.67")},
    {"model": "roberta-base", "objective": "simcse", "options": {}, "row": "SimCSE (Gao et al., 2021)",
     "scores": _sts("70.16 81.77 73.24 81.36 80.65 80.22 68.56 76.57")},
    {"model": "roberta-base", "objective": "compcse", "options": _COMP_ROBERTA,
     "row": "SimCSE (w/ comp.)", "scores": _sts("72.56 83.33 73.67 83.36 81.14 80.71 70.39 77.88")},
    {"model": "roberta-large", "objective": "simcse", "options": {}, "row": "SimCSE (Gao et al., 2021)",
     "scores": _sts("72.86 83.99 75.62 84.77 81.80 81.98 71.26 78.90")},
    {"model": "roberta-large", "objective": "compcse", "options": _COMP_ROBERTA,
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



def _dev(model: str, objective: str, options: dict, row: str, value: float) -> dict:
    return {"model": model, "objective": objective, "options": options, "row": row, "scores": {_DEV: value}}


def _table2() -> list[dict]:
    """CompCSE Table 2: subsampling strategy x PLM, STS-B dev (RoBERTa composes by concat halves)."""
    out = []
    for model, base, values in (("bert-base-uncased", _COMP, "81.47 83.97 83.39 83.18 82.97"),
                                ("bert-large-uncased", _COMP, "84.41 84.79 84.84 85.01 85.06"),
                                ("roberta-base", _COMP_ROBERTA, "83.91 84.14 84.00 84.10 82.92"),
                                ("roberta-large", _COMP_ROBERTA, "85.07 84.80 83.91 82.74 83.33")):
        v = [float(x) for x in values.split()]
        out.append(_dev(model, "simcse", {}, "SimCSE", v[0]))
        for strategy, value in zip(("none", "adjacent", "overlapping", "subsuming"), v[1:]):
            row = "w/ composition" if strategy == "none" else f"+ {strategy}"
            out.append(_dev(model, "compcse", {**base, "subsampling": strategy}, row, value))
    return out


def _sweep(model: str, base: dict, key: str, values: dict, label: str) -> list[dict]:
    return [_dev(model, "compcse", {**base, key: k}, f"{label} = {'d' if k is None else k}", v) for k, v in values.items()]


COMPCSE_TABLE2 = _table2()
# Table 3: aggregation of the part embeddings (STS-B dev).
_AGG = ("sum", "avg", "concat_halves", "concat_project", "concat_absdiff_project")
COMPCSE_TABLE3 = (_sweep("bert-base-uncased", _COMP, "aggregation", dict(zip(_AGG, (83.92, 83.97, 83.01, 69.24, 68.79))), "aggregation")
                  + _sweep("roberta-base", _COMP, "aggregation", dict(zip(_AGG, (84.00, 84.08, 84.14, 65.02, 65.44))), "aggregation"))
# Table 4: what is composed (BERT-base, STS-B dev).
COMPCSE_TABLE4 = _sweep("bert-base-uncased", _COMP, "compose", {"z": 83.61, "z+": 83.97, "both": 83.81}, "compose")
# Table 5: number of partitions (BERT-base, STS-B dev).
COMPCSE_TABLE5 = _sweep("bert-base-uncased", _COMP, "partitions", {2: 83.97, 3: 83.48, 4: 83.52}, "partitions")
# Table 6: d0 (BERT-base: composition alone; BERT-large: + subsuming). d0 = d is our d0: null.
COMPCSE_TABLE6 = (_sweep("bert-base-uncased", _COMP, "d0", {192: 83.88, 256: 84.11, 384: 83.17, None: 83.97}, "d0")
                  + _sweep("bert-large-uncased", {**_COMP, "subsampling": "subsuming"}, "d0",
                           {320: 84.61, 384: 84.94, 512: 84.98, None: 85.06}, "d0"))

PUBLISHED = {("compcse", "table1"): COMPCSE_TABLE1, ("compcse", "table2"): COMPCSE_TABLE2,
             ("compcse", "table3"): COMPCSE_TABLE3, ("compcse", "table4"): COMPCSE_TABLE4,
             ("compcse", "table5"): COMPCSE_TABLE5, ("compcse", "table6"): COMPCSE_TABLE6,
             ("diffcse", "table11"): DIFFCSE_TABLE11}


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
