"""Result tables: our numbers (mean ± std over seeds) with the paper's number beside each, and
for every method its paired difference to SimCSE on the same PLM with a bootstrap confidence
interval over the evaluation pairs (the papers report single runs; this says whether a
difference is real)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from cselab.errors import DataError
from cselab.io import open_atomic, write_text
from cselab.reporting.published import lookup_any
from cselab.settings import Evaluation, evaluation_settings


def score_table(rows: list[dict], columns: Sequence[str], sources: Sequence[tuple[str, str]],
                average: bool = True, digits: int = 2, extras: Sequence[str] = ()) -> pd.DataFrame:
    """One row per experiment name (PLM x method), averaged over its seeds.

    ``rows``: one dict per experiment id with keys ``name``, ``plm``, ``model``, ``method``,
    ``objective``, ``options``, ``seed`` and ``scores`` (column -> value). ``sources``: the
    (paper, table) pairs whose published numbers may stand beside ours; the first matching
    setting wins. Columns: each metric, then ``<metric>_paper``; with ``average``, also
    ``Avg``, ``Avg_std`` (over seeds), ``Avg_paper`` and ``Avg_gap`` (ours - paper), the average
    over ``columns`` except ``extras`` (columns shown beside the kind's own, not averaged).
    """
    out, order = [], list(dict.fromkeys(r["name"] for r in rows))
    for name in order:
        group = [r for r in rows if r["name"] == name]
        first = group[0]
        entry, note = lookup_any(sources, first["model"], first["objective"], first["options"], first.get("setting"))
        paper = entry["scores"] if entry else {}
        rec = {"plm": first["plm"], "model": first["model"], "method": first["method"], "experiment": name,
               "seeds": " ".join(str(r["seed"]) for r in group if r["seed"] is not None) or "-"}
        for col in columns:
            rec.update(_seed_spread(col, [r["scores"][col] for r in group], digits))
            rec[f"{col}_paper"] = paper.get(col)
        if average:
            rec.update(_seed_spread("Avg", [float(np.mean([r["scores"][c] for c in columns if c not in extras]))
                                            for r in group], digits))
            rec["Avg_paper"] = paper.get("Avg")
            rec["Avg_gap"] = round(rec["Avg"] - paper["Avg"], digits) if paper.get("Avg") is not None else None
        rec["note"] = note
        out.append(rec)
    return pd.DataFrame(out)


def _seed_spread(col: str, values: list[float], digits: int) -> dict:
    """``col`` (the mean over seeds) and, with >= 2 seeds, ``col_std`` / ``col_min`` / ``col_max``."""
    several = len(values) > 1
    return {col: round(float(np.mean(values)), digits),
            f"{col}_std": round(float(np.std(values, ddof=1)), digits) if several else None,
            f"{col}_min": round(float(np.min(values)), digits) if several else None,
            f"{col}_max": round(float(np.max(values)), digits) if several else None}


@dataclass(frozen=True)
class Comparison:
    """One paired-bootstrap comparison against SimCSE: over ``columns`` (their average, or the
    single column), with ``metric`` (``spearman`` for STS pairs, ``accuracy`` for transfer
    items); its columns are ``<prefix>diff``, ``<prefix>diff_ci_low``, ... ."""

    label: str
    columns: tuple[str, ...]
    metric: str = "spearman"
    prefix: str = ""


def add_comparisons(df: pd.DataFrame, rows: list[dict], comparisons: Sequence[Comparison],
                    n_boot: int = 1000, confidence: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Each trained non-SimCSE experiment against SimCSE on the same PLM (the table's first such row).

    Adds ``baseline`` and, per comparison, ``diff`` (ours - baseline: the mean over the
    comparison's columns, mean over seeds), ``diff_ci_low``/``diff_ci_high``, ``p_value`` and
    ``significant`` (the interval excludes 0) of :func:`cselab.reporting.stats.paired_bootstrap`
    (evaluation items resampled within each task, the same resamples for both models and all
    seeds; with >= 2 seeds each, seeds resampled too, as pairs when both ran the same seeds), and
    ``ci_counts``: what the interval counts (``seeds+items`` or ``items``). Rows need ``pairs``:
    column -> (gold, pred). Each baseline's resamples are computed once per comparison and shared
    by the experiments compared with it (:func:`cselab.reporting.stats.paired_bootstraps`).
    """
    by_name: dict[str, list[dict]] = {}
    for r in rows:
        by_name.setdefault(r["name"], []).append(r)
    baselines = _baselines(list(df["experiment"]), by_name)
    out: dict[str, list] = {"baseline": [baselines.get(name) for name in df["experiment"]]}
    for c in comparisons:
        results = _compare(c, baselines, by_name, n_boot=n_boot, seed=seed, confidence=confidence)
        cells = [_cells(results.get(name)) for name in df["experiment"]]
        out.update({c.prefix + k: [row[k] for row in cells] for k in _CELLS})
    return df.assign(**out)


#: a comparison's columns (after its prefix)
_CELLS = ("diff", "diff_ci_low", "diff_ci_high", "p_value", "significant", "ci_counts")


def _cells(res: dict | None) -> dict:
    """A comparison's cells (:data:`_CELLS`, rounded as the table keeps them); all None for a row
    without a comparison."""
    if res is None:
        return dict.fromkeys(_CELLS)
    return {"diff": round(res["diff"], 2), "diff_ci_low": round(res["ci_low"], 2),
            "diff_ci_high": round(res["ci_high"], 2), "p_value": round(res["p_value"], 4),
            "significant": bool(res["significant"]), "ci_counts": res["interval"]}


def _baselines(names: list[str], by_name: dict[str, list[dict]]) -> dict[str, str]:
    """Experiment -> its baseline (the first SimCSE experiment with per-item predictions on the
    same PLM), for the trained non-SimCSE experiments with per-item predictions."""
    simcse = {}
    for name, group in by_name.items():
        if group[0]["objective"] == "simcse" and all(r["pairs"] is not None for r in group):
            simcse.setdefault(group[0]["plm"], name)
    out = {}
    for name in names:
        group, base = by_name[name], simcse.get(by_name[name][0]["plm"])
        if not (base is None or base == name or group[0]["seed"] is None or group[0]["objective"] == "simcse"
                or any(r["pairs"] is None for r in group)):
            out[name] = base
    return out


def _compare(c: Comparison, baselines: dict[str, str], by_name: dict[str, list[dict]], **bootstrap) -> dict[str, dict]:
    """Experiment -> its comparison with its baseline (paired when they ran the same seeds); one
    :func:`~cselab.reporting.stats.paired_bootstraps` per baseline, so the baseline's resamples
    are drawn and scored once."""
    from cselab.reporting.stats import paired_bootstraps

    cols = list(c.columns)
    out = {}
    for base in dict.fromkeys(baselines.values()):
        names = [name for name, b in baselines.items() if b == base]
        groups = [sorted(by_name[name], key=lambda r: r["seed"]) for name in names]
        base_rows = sorted(by_name[base], key=lambda r: r["seed"])
        gold = {col: base_rows[0]["pairs"][col][0] for col in cols}
        paired = [[r["seed"] for r in group] == [r["seed"] for r in base_rows] for group in groups]
        results = paired_bootstraps(gold, [[{col: r["pairs"][col][1] for col in cols} for r in group]
                                           for group in groups],
                                    [{col: r["pairs"][col][1] for col in cols} for r in base_rows],
                                    metric=c.metric, average=True, paired_seeds=paired, **bootstrap)
        out.update(zip(names, results))
    return out


def to_markdown(df: pd.DataFrame, columns: Sequence[str], title: str = "", digits: int = 2,
                comparisons: Sequence[Comparison] = (), notes: Sequence[str] = (),
                extras: Sequence[str] = ()) -> str:
    """Render with 'ours (paper)' cells and one 'vs SimCSE [CI]' column per comparison; the
    average follows the averaged columns, ``extras`` come after it."""
    own = [c for c in columns if c not in extras]
    cols = own + (["Avg"] if "Avg" in df.columns else []) + [c for c in columns if c in extras]
    shown = [c for c in comparisons if f"{c.prefix}diff" in df.columns and df[f"{c.prefix}diff"].notna().any()]
    spread = next((c for c in ("Avg", *own) if f"{c}_min" in df.columns and df[f"{c}_min"].notna().any()), None)
    header = (["PLM", "method", "experiment"] + cols + ([f"{spread} over seeds [min, max]"] if spread else [])
              + [f"vs SimCSE{': ' + c.label if c.label else ''} [CI]" for c in shown] + ["note"])
    lines = [f"# {title}", ""] if title else []
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def cell(row, col):
        ours = f"{row[col]:.{digits}f}"
        std = row.get(f"{col}_std")
        if std is not None and pd.notna(std):
            ours += f" ± {std:.{digits}f}"
        paper = row.get(f"{col}_paper")
        return f"{ours} ({paper:.{digits}f})" if paper is not None and pd.notna(paper) else ours

    def versus(row, p):
        if pd.isna(row[f"{p}diff"]):
            return ""
        return (f"{row[p + 'diff']:+.2f} [{row[p + 'diff_ci_low']:+.2f}, {row[p + 'diff_ci_high']:+.2f}]"
                + ("*" if row[p + "significant"] else ""))

    for _, row in df.iterrows():
        cells = [row["plm"], row["method"], row["experiment"]] + [cell(row, c) for c in cols]
        if spread:
            cells.append(f"[{row[spread + '_min']:.{digits}f}, {row[spread + '_max']:.{digits}f}]"
                         if pd.notna(row[f"{spread}_min"]) else "")
        cells += [versus(row, c.prefix) for c in shown]
        lines.append("| " + " | ".join(str(c) for c in cells + [row["note"] or ""]) + " |")
    lines += ["", "Cells: ours (paper). Ours is the mean over seeds ± standard deviation over seeds."]
    lines += _interval_legend(df, shown)
    lines += [f"Note: {n}" for n in notes]
    return "\n".join(lines) + "\n"


def _interval_legend(df: pd.DataFrame, shown: Sequence[Comparison]) -> list[str]:
    """What the 'vs SimCSE' intervals count, for the kinds of interval the table holds."""
    if not shown:
        return []
    counts = {v for c in shown for v in df[f"{c.prefix}ci_counts"].dropna()}
    lines = ["vs SimCSE: ours minus SimCSE on the same PLM (the average over the compared columns, or the single "
             "column), with a 95% confidence interval; * = the interval excludes 0."]
    if "seeds+items" in counts:
        lines.append("Rows with >= 2 seeds per method: the interval counts training randomness and the evaluation "
                     "items (a two-level bootstrap resampling seeds, paired when both ran the same seeds, and items "
                     "together; Student's t at Satterthwaite's degrees of freedom, the small-sample correction).")
    if "items" in counts:
        lines.append("Rows with one seed: the interval counts the evaluation items only (a paired bootstrap over "
                     "them), not training randomness; a seed can move a score by more than it shows.")
    return lines


def read_results(rows: list[dict]) -> list[dict]:
    """Load each row's result files: ``scores`` from the JSONs, ``pairs`` from the ``.npz`` files."""
    from cselab.evaluation.records import read_result
    from cselab.reporting.stats import load_pairs

    out = []
    for row in rows:
        scores, pairs, caps = {}, None, set()
        for path in row["files"]:
            if str(path).endswith(".npz"):
                pairs = {**(pairs or {}), **load_pairs(path)}
            else:
                result = read_result(path)
                scores.update(result["scores"])
                caps.add(result.get("max_items"))
        out.append({**row, "scores": scores, "pairs": pairs, "max_items": sorted(caps - {None})})
    return out


def read_summary(path: str) -> dict:
    """A training's summary (``train_summary.json``), or one message naming it when it is damaged."""
    try:
        summary = json.loads(Path(path).read_text())
        if not isinstance(summary, dict):
            raise ValueError(f"a JSON {type(summary).__name__}, not an object")
        return summary
    except ValueError as e:
        raise DataError(f"the training summary {path} is damaged ({e}); rule train wrote it: train again with "
                        f"snakemake --force {path} --cores <n>, then build the tables") from None


def collapse_notes(rows: list[dict]) -> list[str]:
    """A note for each experiment whose training raised the collapse alarm (``training.collapse``,
    :mod:`cselab.training.diagnostics`), read from its training summary (``row["summary"]``)."""
    notes = []
    for row in rows:
        if row.get("summary") and Path(row["summary"]).is_file():
            alarms = read_summary(row["summary"]).get("collapse_alarms") or []
            if alarms:
                where = "; ".join(f"step {a['step']}: {a['reason']}" for a in alarms)
                notes.append(f"collapse alarm in {row['id']} ({where}): its embeddings looked collapsed on "
                             "STS-B dev; read its row with care.")
    return notes


def subset_notes(rows: list[dict]) -> list[str]:
    """A note when a transfer result of the table scored a random subset of each task
    (``evaluation.transfer.max_items``, as :func:`read_results` found it): such numbers are not
    the paper's protocol."""
    caps = sorted({cap for row in rows for cap in row.get("max_items", ())})
    if not caps:
        return []
    return [f"transfer columns scored at most {', '.join(map(str, caps))} items per split of each task, a seeded "
            "random subset (evaluation.transfer.max_items, a smoke-scale bound): not comparable with the "
            "papers' numbers, which use every item."]


def _methods_scores(rows: list[dict]) -> list[dict]:
    """The methods table's derived columns: the STS average and the transfer average."""
    from cselab.data.senteval import TRANSFER_TASKS
    from cselab.evaluation.sts import STS_COLUMNS

    return [{**r, "scores": {**r["scores"], "STS avg": float(np.mean([r["scores"][c] for c in STS_COLUMNS])),
                             "transfer avg": float(np.mean([r["scores"][t] for t in TRANSFER_TASKS
                                                            if t in r["scores"]]))}} for r in rows]


def _methods_comparisons(columns: Sequence[str], rows: list[dict]) -> list[Comparison]:
    from cselab.data.senteval import TRANSFER_TASKS
    from cselab.evaluation.sts import STS_COLUMNS

    tasks = tuple(t for t in TRANSFER_TASKS if t in rows[0]["scores"])
    return [Comparison("STS avg", tuple(STS_COLUMNS), prefix="sts_"),
            Comparison("STS-B dev", ("STS-B dev",), prefix="dev_"),
            Comparison("transfer avg", tasks, "accuracy", prefix="transfer_")]


def _pooler_scores(rows: list[dict]) -> list[dict]:
    """The pooler table: the plain STS-B dev score is the one without the head."""
    return [{**r, "scores": {**r["scores"], "cls_before_pooler": r["scores"]["STS-B dev"]}} for r in rows]


@dataclass(frozen=True)
class TableKind:
    """What a table kind reads per experiment and how it is shown (declared once, by :func:`table_kind`).

    ``results``: the result names a row reads (a score file, then optional per-item predictions
    for the paired bootstrap; :mod:`cselab.pipeline.outputs` maps them to files); ``columns``:
    its columns from the evaluation settings; ``average``: report their mean; ``digits``:
    decimals shown; ``derive``: scores computed from the loaded ones; ``comparisons``: the
    paired bootstraps against SimCSE (default: the average, or the first column, by Spearman);
    ``metric``: the bootstrap's per-item metric; ``trained_only``: only trained experiments."""

    results: tuple[str, ...]
    columns: Callable[[dict], list[str]]
    average: bool = False
    digits: int = 2
    derive: Callable[[list[dict]], list[dict]] | None = None
    comparisons: Callable[[Sequence[str], list[dict]], list[Comparison]] | None = None
    metric: str = "spearman"
    trained_only: bool = False


TABLE_KINDS: dict[str, TableKind] = {}


def table_kind(name: str, results: Sequence[str], **how) -> Callable:
    """Register the decorated function (a table's columns from the evaluation settings) as table
    kind ``name`` reading ``results`` (the other :class:`TableKind` fields as keywords). A plugin
    module (the config's ``plugins:``) registers its own the same way."""
    def register(columns: Callable[[dict], list[str]]) -> Callable[[dict], list[str]]:
        if name in TABLE_KINDS:
            raise ValueError(f"table kind {name!r} is registered twice")
        TABLE_KINDS[name] = TableKind(tuple(results), columns, **how)
        return columns
    return register


@table_kind("sts", ("sts", "sts_pairs"), average=True)
def sts_columns(evaluation: dict) -> list[str]:
    from cselab.evaluation.sts import STS_COLUMNS

    return list(STS_COLUMNS)


@table_kind("stsb_dev", ("stsb_dev", "stsb_dev_pairs"))
def stsb_dev_columns(evaluation: dict) -> list[str]:
    return ["STS-B dev"]


def typed_evaluation(evaluation: dict) -> Evaluation:
    """The plain ``evaluation`` section a kind's columns get (:func:`kind_columns`), typed; a
    plugin evaluation kind's own section is left out."""
    known = {f.name for f in dataclasses.fields(Evaluation)}
    return evaluation_settings({k: v for k, v in evaluation.items() if k in known})


@table_kind("transfer", ("transfer", "transfer_pairs"), average=True, metric="accuracy")
def transfer_columns(evaluation: dict) -> list[str]:
    from cselab.data.senteval import TRANSFER_TASKS

    return [t for t in TRANSFER_TASKS if t in typed_evaluation(evaluation).transfer.tasks]


@table_kind("beir", ("beir",), average=True, digits=4)
def beir_columns(evaluation: dict) -> list[str]:
    return list(typed_evaluation(evaluation).beir.datasets)


@table_kind("retrieval", ("stsb_retrieval",))
def retrieval_columns(evaluation: dict) -> list[str]:
    return ["R@1", "R@5", "R@10"]


@table_kind("geometry", ("geometry",), digits=3)
def geometry_columns(evaluation: dict) -> list[str]:
    return ["alignment", "uniformity"]


@table_kind("methods", ("sts", "sts_pairs", "stsb_dev", "stsb_dev_pairs", "transfer", "transfer_pairs"),
            derive=_methods_scores, comparisons=_methods_comparisons)
def methods_columns(evaluation: dict) -> list[str]:
    """Every configured method on one PLM and budget: STS, STS-B dev and the transfer average."""
    return [*sts_columns(evaluation), "STS avg", "STS-B dev", "transfer avg"]


@table_kind("pooler", ("stsb_dev_head", "stsb_dev"), derive=_pooler_scores, trained_only=True)
def pooler_columns(evaluation: dict) -> list[str]:
    """STS-B dev with ("cls") and without ("cls_before_pooler") the training head: trained experiments only."""
    return ["cls", "cls_before_pooler"]


#: columns any table may add after its kind's own (``tables.<t>.extra_columns``): the result each reads
EXTRA_COLUMNS: dict[str, str] = {"STS-B dev": "stsb_dev", "transfer avg (dev)": "transfer_dev"}


def kind_columns(kind: str, evaluation: dict, extras: Sequence[str] = ()) -> list[str]:
    """A table's columns: its kind's (from the evaluation settings), then its extra columns."""
    own = TABLE_KINDS[kind].columns(evaluation)
    return own + [c for c in extras if c not in own]


def build_table(kind: str, rows: list[dict], columns: Sequence[str], sources: Sequence[tuple[str, str]],
                bootstrap: dict | None = None, extras: Sequence[str] = ()) -> tuple[pd.DataFrame, list[Comparison]]:
    """The table of ``kind`` (:data:`TABLE_KINDS`) from loaded ``rows``; ``extras`` are columns
    after the kind's own (not averaged, not compared)."""
    spec = TABLE_KINDS[kind]
    if spec.derive:
        rows = spec.derive(rows)
    if spec.comparisons:
        comparisons = spec.comparisons(columns, rows)
    else:
        own = tuple(c for c in columns if c not in extras)
        comparisons = [Comparison("", own if spec.average else own[:1], spec.metric)]
    df = score_table(rows, columns, sources, average=spec.average, digits=spec.digits, extras=extras)
    if any(r["pairs"] is not None for r in rows):
        df = add_comparisons(df, rows, comparisons, **(bootstrap or {}))
    return df, comparisons


def write(df: pd.DataFrame, columns: Sequence[str], csv_path: Path, md_path: Path, title: str, digits: int = 2,
          comparisons: Sequence[Comparison] = (), notes: Sequence[str] = (), extras: Sequence[str] = ()) -> None:
    with open_atomic(csv_path) as fh:
        df.to_csv(fh, index=False)
    write_text(md_path, to_markdown(df, columns, title, digits, comparisons, notes, extras))


def write_leakage(rows: list[dict], csv_path: Path, md_path: Path, ngram: int) -> None:
    """The leakage audit's table (:func:`cselab.evaluation.leakage.audit` rows) as CSV and markdown."""
    df = pd.DataFrame(rows, columns=["corpus", "set", "sentences", "exact", "exact_pct", "ngram", "ngram_pct"])
    with open_atomic(csv_path) as fh:
        df.to_csv(fh, index=False)
    lines = ["# Leakage audit: evaluation sentences found in the training corpora", "",
             f"| corpus | evaluation set | sentences | exact | exact % | shares a {ngram}-gram | {ngram}-gram % |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.corpus} | {r.set} | {r.sentences} | {r.exact} | {r.exact_pct:.3f} | {r.ngram} | {r.ngram_pct:.3f} |"
              for r in df.itertuples()]
    lines += ["", "Sentences: distinct after normalisation (lower case, words only). Exact: the whole sentence is "
              f"a line of the corpus. Shares a {ngram}-gram: at least one run of {ngram} words in common with a "
              f"line (includes the exact ones; a sentence under {ngram} words counts only when exact)."]
    write_text(md_path, "\n".join(lines) + "\n")


def write_protocols(rows: list[dict], csv_path: Path, md_path: Path) -> None:
    """The protocol-sensitivity table (:mod:`cselab.evaluation.protocols` rows with ``experiment``)
    as CSV and markdown: every protocol's scores per checkpoint, the papers' protocol marked, and
    each checkpoint's spread over protocols."""
    from cselab.evaluation.sts import STS_COLUMNS

    df = pd.DataFrame(rows)
    df["truncation"] = df["truncation"].map(lambda t: "none" if t is None or pd.isna(t) else str(int(t)))
    with open_atomic(csv_path) as fh:
        df.to_csv(fh, index=False)
    head = ["experiment", "pooler", "truncation", "aggregation", *STS_COLUMNS, "avg", "STS-B dev"]
    lines = ["# Protocol sensitivity: STS (Spearman x100) of each checkpoint under the literature's protocols", "",
             "| " + " | ".join(head) + " | protocol of |", "|" + "---|" * (len(head) + 1)]
    for r in df.to_dict("records"):
        cells = [str(r[c]) if isinstance(r[c], str) else f"{r[c]:.2f}" for c in head]
        lines.append("| " + " | ".join(cells) + f" | {r['papers']} |")
    lines += ["", "## Spread per checkpoint (STS average over every protocol)", "",
              "| experiment | min | max | spread | papers' protocol |", "|---|---|---|---|---|"]
    for exp, group in df.groupby("experiment", sort=False):
        first = group.iloc[0]
        lines.append(f"| {exp} | {first['avg_min']:.2f} | {first['avg_max']:.2f} | {first['spread']:.2f} | "
                     f"{first['papers_avg']:.2f} |")
    lines += ["", "Aggregation: how STS12-16's subsets combine (all: one Spearman over their concatenation; mean: "
              "the subsets' mean; wmean: weighted by size); STS-B and SICK-R have one subset. Poolers: cls = [CLS] "
              "through the training head (SimCSE's exported MLP; an untrained PLM: its pooler layer), "
              "cls_before_pooler = raw final-layer [CLS], avg = mean of the final layer, avg_top2 = of the last "
              "two layers, avg_first_last = of the embedding output and the final layer (DiffCSE's and InfoCSE's "
              "code), avg_first_last_layer1 = of the first transformer layer and the final layer (SimCSE's "
              "script). Truncation: evaluation sentences cut at that many "
              "tokens (none: the model's limit). STS-B dev beside the test split's STS-B column. 'protocol of': "
              "the papers that declare the row's protocol."]
    write_text(md_path, "\n".join(lines) + "\n")
