"""Published retrieval numbers: BEIR nDCG@10 (InfoCSE Table 3) and STS-B in-domain retrieval
recall (DiffCSE Table 10, InfoCSE Table 11), in the entry format of :mod:`cselab.published`.

Scales differ as printed: Table 3 is nDCG@10 as a fraction (0.2509), Tables 10/11 are recall
in percent (80.41). :func:`cselab.retrieval.evaluate_run` returns fractions, so compare BEIR
numbers directly and multiply recall by 100 (:data:`SCALE` says which).

The BEIR columns use BEIR's download names (:data:`BEIR_DATASETS`, in the paper's row order)
plus ``"Avg"`` (the paper's "average" row: the unweighted mean of the 14 datasets). The two
retrieval tables use the columns ``R@1``, ``R@5``, ``R@10`` (DiffCSE prints them "@1", "@5",
"@10"). The paper's rows for "base" / "large" are BERT-base / BERT-large (uncased).
InfoCSE's Table 11 SimCSE and DiffCSE rows differ from DiffCSE's own Table 10 for the same
models (e.g. SimCSE R@1 74.23 vs 77.84): both are copied as printed.
"""

from __future__ import annotations

#: InfoCSE Table 3's 14 BEIR datasets, in its row order, as BEIR download names
#: (``https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/<name>.zip``).
#: All are public zips evaluated on ``qrels/test.tsv``, but:
#: * ``cqadupstack`` is not one dataset: its zip holds 12 StackExchange forums (android,
#:   english, gaming, gis, mathematica, physics, programmers, stats, tex, unix, webmasters,
#:   wordpress), each a separate corpus/queries/qrels; BEIR's score is the mean of the 12
#:   per-forum nDCG@10 (see :func:`cselab.retrieval.beir_subsets`).
#: * ``webis-touche2020``: the zip was re-issued in 2021 with the Touché v2 qrels
#:   (beir-cellar/beir issue #11); the paper does not say which it used.
#: * ``arguana`` and ``quora``: queries are also corpus documents with the same id; scores rely on
#:   BEIR's identical-id exclusion. ``arguana`` has one qrel for a document absent from its
#:   corpus (upstream defect, tolerated by :func:`cselab.retrieval.prepare_beir`).
#: * ``fever``, ``climate-fever`` (5.4M docs), ``hotpotqa`` (5.2M), ``dbpedia-entity`` (4.6M)
#:   and ``nq`` (2.7M) are large: they need the chunked :func:`cselab.retrieval.search`.
#: The four non-public BEIR datasets (bioasq, signal1m, trec-news, robust04) and MS MARCO are
#: not part of the table.
BEIR_DATASETS = [
    "trec-covid", "nfcorpus", "nq", "fiqa", "arguana", "webis-touche2020", "quora",
    "cqadupstack", "dbpedia-entity", "scidocs", "climate-fever", "scifact", "hotpotqa", "fever",
]
BEIR_COLUMNS = BEIR_DATASETS + ["Avg"]
RETRIEVAL_COLUMNS = ["R@1", "R@5", "R@10"]

# InfoCSE Table 3, one column per method and size, values in BEIR_COLUMNS order.
_TABLE3 = {
    ("SimCSE", "base"): "0.2750 0.1048 0.1628 0.0985 0.2796 0.1342 0.7375 0.1349 0.1662 0.0611 0.1420 0.2492 0.2382 0.2916 0.2197",
    ("SimCSE", "large"): "0.2264 0.1356 0.1671 0.0975 0.2078 0.0878 0.7511 0.1082 0.1495 0.0688 0.1065 0.2541 0.1896 0.1776 0.1948",
    ("ESimCSE", "base"): "0.2291 0.1149 0.0935 0.0731 0.3376 0.0786 0.7411 0.1276 0.1260 0.0657 0.0796 0.3013 0.1213 0.0756 0.1832",
    ("ESimCSE", "large"): "0.2829 0.1483 0.1705 0.1117 0.2604 0.1057 0.7615 0.1196 0.1650 0.0796 0.1302 0.2875 0.1970 0.1689 0.2135",
    ("DiffCSE", "base"): "0.2368 0.1204 0.1188 0.0924 0.2500 0.0912 0.7491 0.1197 0.1537 0.0673 0.1019 0.2666 0.1730 0.1416 0.1916",
    ("DiffCSE", "large"): "0.2291 0.1470 0.1556 0.1027 0.2572 0.0781 0.7471 0.1160 0.1571 0.0699 0.1087 0.2811 0.2068 0.1849 0.2030",
    ("InfoCSE", "base"): "0.3937 0.1358 0.2023 0.0991 0.3244 0.0935 0.8241 0.2097 0.2101 0.0837 0.0937 0.3269 0.3177 0.1978 0.2509",
    ("InfoCSE", "large"): "0.3166 0.1576 0.1790 0.1000 0.4133 0.0920 0.8268 0.1881 0.1838 0.0859 0.0840 0.3801 0.2781 0.1252 0.2436",
}
_MODELS = {"base": "bert-base-uncased", "large": "bert-large-uncased"}


def _scores(columns: list[str], values: str) -> dict[str, float]:
    nums = [float(v) for v in values.split()]
    if len(nums) != len(columns):
        raise ValueError(f"{len(nums)} values for {len(columns)} columns")
    return dict(zip(columns, nums))


#: ESimCSE is not one of the pipeline's objectives; its rows are kept for display only.
INFOCSE_TABLE3 = [
    {"model": _MODELS[size], "objective": method.lower(), "options": {}, "row": f"{method} {size}",
     "scores": _scores(BEIR_COLUMNS, values)}
    for (method, size), values in _TABLE3.items()
]

DIFFCSE_TABLE10 = [
    {"model": "bert-base-uncased", "objective": "simcse", "options": {}, "row": "SimCSE-BERT_base",
     "scores": _scores(RETRIEVAL_COLUMNS, "77.84 92.78 95.88")},
    {"model": "bert-base-uncased", "objective": "diffcse", "options": {}, "row": "DiffCSE-BERT_base",
     "scores": _scores(RETRIEVAL_COLUMNS, "78.87 95.36 97.42")},
]

INFOCSE_TABLE11 = [
    {"model": "bert-base-uncased", "objective": "simcse", "options": {}, "row": "SimCSE",
     "scores": _scores(RETRIEVAL_COLUMNS, "74.23 94.85 95.88")},
    {"model": "bert-base-uncased", "objective": "diffcse", "options": {}, "row": "DiffCSE",
     "scores": _scores(RETRIEVAL_COLUMNS, "79.38 96.91 98.97")},
    {"model": "bert-base-uncased", "objective": "infocse", "options": {}, "row": "InfoCSE",
     "scores": _scores(RETRIEVAL_COLUMNS, "80.41 100.00 100.00")},
]

ENTRIES = {
    ("infocse", "table3"): INFOCSE_TABLE3,
    ("diffcse", "table10"): DIFFCSE_TABLE10,
    ("infocse", "table11"): INFOCSE_TABLE11,
}

#: Multiply our fractions by this to compare with the printed numbers.
SCALE = {("infocse", "table3"): 1.0, ("diffcse", "table10"): 100.0, ("infocse", "table11"): 100.0}
