"""Target wiring: what each table and figure of the config reads and shows, as file paths
(:mod:`cselab.pipeline.outputs`) and row descriptions for the report jobs; the kinds themselves
are declared in :mod:`cselab.reporting` (:mod:`~cselab.reporting.tables`,
:mod:`~cselab.reporting.kinds`)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from cselab.pipeline import outputs
from cselab.pipeline.config import experiment_ids, full_options, is_trained
from cselab.pipeline.experiments import entry_sweep, typed_spec
from cselab.reporting.kinds import figure_kinds
from cselab.reporting.tables import EXTRA_COLUMNS, TABLE_KINDS, kind_columns
from cselab.settings import Training, typed_config
from cselab.settings.entries import Sweep


def table_columns(cfg: dict, name: str) -> list[str]:
    """A table's columns: its kind's (from the evaluation settings), then its extra columns."""
    table = typed_config(cfg).tables[name]
    return kind_columns(table.kind, cfg["evaluation"], table.extra_columns)  # the kinds read the plain section


#: a sweep's winner as a table learns it: sweep name -> :func:`cselab.reporting.sweeps.read_winner`'s
#: answer, or None while the sweep has not run (the workflow asks its checkpoint, rules/sweeps.smk)
Winners = Callable[[str], "dict | None"]


def table_sweeps(cfg: dict, name: str) -> list[str]:
    """The sweeps whose winner table ``name`` shows (its ``sweep:<s>`` entries), in row order."""
    sweeps = typed_config(cfg).sweeps
    mine = [s for s, sweep in sweeps.items() if name in (sweep.rows or {})]
    return sorted(mine, key=lambda s: sweeps[s].rows[name])


def resolve_entries(entries, winners: Winners | None = None) -> list[str]:
    """Experiment names for ``entries`` (experiment names, or ``sweep:<s>`` for sweep s's winner),
    in order and once each: a ``sweep:<s>`` entry is the winner's experiment once it is known
    (``winners``, which the workflow answers through the sweep checkpoint, rules/sweeps.smk), and
    left out before. The one place a winner replaces its entry: tables, exports, the MTEB check,
    the seed planner and the protocol table all ask here."""
    out = []
    for entry in entries:
        sweep = entry_sweep(entry)
        best = (winners(sweep) if winners else None) if sweep is not None else {"experiment": entry}
        if best is not None:
            out.append(best["experiment"])
    return list(dict.fromkeys(out))


def entry_sweep_reports(entries) -> list[str]:
    """The reports (``results/sweep_<s>.csv``) of the sweeps ``entries`` name: a job reading a
    winner takes them as inputs, so Snakemake plans it again once the sweep checkpoint has run."""
    sweeps = [s for s in map(entry_sweep, entries) if s is not None]
    return [outputs.path(outputs.SWEEP_CSV, sweep=s) for s in dict.fromkeys(sweeps)]


def table_entries(cfg: dict, name: str) -> list[str]:
    """A table's experiment entries in row order, each ``sweep:<s>`` back at its place (validation
    takes them out of ``experiments`` and records the place in ``sweeps.<s>.rows``)."""
    from cselab.pipeline.experiments import TABLE_ENTRY

    entries = list(typed_config(cfg).tables[name].experiments or [])
    for sweep in table_sweeps(cfg, name):  # in row order: each index counts the entries before it
        entries.insert(sweep_entry(cfg, sweep).rows[name], TABLE_ENTRY + sweep)
    return entries


def table_experiments(cfg: dict, name: str, winners: Winners | None = None) -> list[str]:
    """A table's experiments in row order: its configured ones and, at the place of each
    ``sweep:<s>`` entry, the sweep's winner once it is known (``winners``; without it, or before
    the sweep has run, the entry is left out: :func:`resolve_entries`)."""
    return resolve_entries(table_entries(cfg, name), winners)


def table_inputs(cfg: dict, name: str, winners: Winners | None = None) -> dict[str, list[str]]:
    """Result files per experiment id that a table reads (Snakemake builds what is missing); a
    sweep's winner's too once it is known (``winners``, :func:`table_experiments`)."""
    settings = typed_config(cfg)
    table = settings.tables[name]
    results = dict.fromkeys([*TABLE_KINDS[table.kind].results, *(EXTRA_COLUMNS[c] for c in table.extra_columns)])
    datasets = settings.evaluation.beir.datasets
    out = {}
    for exp in experiment_ids(cfg, table_experiments(cfg, name, winners)):
        files = []
        for result in results:
            pattern = outputs.RESULT[result]
            files += ([outputs.path(pattern, exp=exp, dataset=d) for d in datasets] if "{dataset}" in pattern
                      else [outputs.path(pattern, exp=exp)])
        out[exp] = files
    return out


def table_rows(cfg: dict, name: str, winners: Winners | None = None) -> list[dict]:
    """What the table job needs to know about each experiment id (a rerun trigger too).

    ``options`` carries ``subsampling`` too: published settings are matched on it. ``setting``
    is what the note compares with the paper's training setting (:func:`training_setting`).
    """
    rows = []
    for exp_id, files in table_inputs(cfg, name, winners).items():
        spec = typed_spec(cfg, exp_id)
        trained, t = spec.trained, spec.training
        options = {**full_options(spec), "subsampling": t.subsampling} if trained else {}
        rows.append({"name": spec.name, "plm": spec.plm, "model": spec.model, "method": spec.method,
                     "seed": spec.seed, "objective": spec.signature, "options": options,
                     "setting": training_setting(cfg, t) if trained else None, "id": exp_id, "files": files,
                     "summary": outputs.path(outputs.TRAIN_SUMMARY, exp=exp_id) if trained else None})
    return rows


def table_summaries(cfg: dict, name: str, winners: Winners | None = None) -> list[str]:
    """The training summaries of a table's trained experiments (their collapse alarms go into its notes)."""
    return [outputs.path(outputs.TRAIN_SUMMARY, exp=e) for e in table_inputs(cfg, name, winners) if is_trained(cfg, e)]


def table_sweep_reports(cfg: dict, name: str) -> list[str]:
    """The reports of the sweeps whose winner a table shows (``results/sweep_<s>.csv``: the
    table waits for them, and is planned again once they have run)."""
    return entry_sweep_reports(table_entries(cfg, name))


def table_params(cfg: dict, name: str, winners: Winners | None = None) -> dict:
    """The table job's entry: ``{"name", **tables.<name>}``; a table showing a sweep's winner has
    it among its ``experiments`` (where ``sweep:<s>`` stood) and a note saying so (:func:`winner_note`)."""
    entry = {"name": name, **cfg["tables"][name]}
    sweeps = table_sweeps(cfg, name)
    if not sweeps:
        return entry
    found = {s: winners(s) if winners else None for s in sweeps}
    return {**entry, "experiments": table_experiments(cfg, name, winners),
            "notes": [*entry.get("notes", []), *(winner_note(cfg, s, w) for s, w in found.items() if w is not None)]}


def winner_note(cfg: dict, sweep: str, winner: dict) -> str:
    """A table's note on a row that is a sweep's winner: its grid values, how it was chosen, and
    whether the sweep told it apart from the other points."""
    from cselab.pipeline.sweeps import format_value, short_keys
    from cselab.reporting.sweeps import metric_of

    entry = sweep_entry(cfg, sweep)
    short = short_keys(list(entry.grid))
    values = next((p["values"] for p in entry.points if p["experiment"] == winner["experiment"]), {})
    shown = ", ".join(f"{short[k]}={format_value(v, k)}" for k, v in values.items())
    metric = entry.metric
    n, k = winner["compared"], winner["distinguishable"]
    versus = ("the grid's only point" if len(entry.points) < 2 else
              "compared with no other point (no per-item predictions)" if not n else
              f"distinguishable from {k} of the {n} other points compared at these seeds")
    return (f"Row {winner['experiment']}: the winner of sweep {sweep} ({shown}), chosen on "
            f"{metric_of(metric).label} ({metric}; a development split) over seeds "
            f"{', '.join(map(str, entry.seeds))}, mean {winner['mean']:.2f}; {versus} "
            f"(results/sweep_{sweep}.md).")


def training_setting(cfg: dict, t: Training) -> dict:
    """An experiment's training setting (``t``: its spec's) as a table note compares it with a
    paper's (:data:`cselab.reporting.published.SETTING_KEYS`)."""
    out = {"precision": t.precision, "lr": t.lr, "batch_size": t.batch_size, "epochs": t.epochs,
           "max_steps": t.max_steps or None, "max_len": t.max_len, "corpus": corpus_label(cfg, t)}
    if t.subsampling != "none":
        out["segmenter"] = typed_config(cfg).spans.segmenter
    return out


def corpus_label(cfg: dict, t: Training) -> str:
    """The training corpus in words (``t``: an experiment's training settings): its file name,
    ``first N lines`` when capped, the held-out slice it leaves out."""
    corpus = typed_config(cfg).data.corpus
    label = Path(corpus.path or corpus.url).name
    if corpus.max_lines:
        label += f", first {corpus.max_lines:,} lines"
    if t.holdout:
        label += f", without a {t.holdout:g} held-out slice"
    return label


def leakage_corpora(cfg: dict) -> dict[str, str]:
    """The training files the leakage audit reads, by label: the corpus and each subsampled set
    a configured experiment trains on (a held-out split trains on part of the corpus)."""
    out = {"corpus": outputs.CORPUS}
    for name in typed_config(cfg).experiments:
        first = experiment_ids(cfg, [name])[0]
        if is_trained(cfg, first):
            strategy = typed_spec(cfg, first).training.subsampling
            if strategy != "none":
                out[f"subsampled ({strategy})"] = outputs.path(outputs.SUBSAMPLED, strategy=strategy)
    return out


def seed_power_inputs(cfg: dict, winners: Winners | None = None) -> dict[str, dict[str, list[str]]]:
    """The seed planner's inputs (``evaluation.seed_power``): per trained experiment of its table
    (a ``sweep:<s>`` entry: the winner once known, :func:`table_experiments`), per metric, the
    per-item predictions of every seed."""
    from cselab.reporting.power import METRICS

    planner = typed_config(cfg).evaluation.seed_power
    out = {}
    for name in table_experiments(cfg, planner.table, winners):
        ids = experiment_ids(cfg, [name])
        if is_trained(cfg, ids[0]):
            out[name] = {m: [outputs.path(outputs.RESULT[METRICS[m][0]], exp=e) for e in ids] for m in planner.metrics}
    return out


def seed_power_baseline(cfg: dict, winners: Winners | None = None) -> str | None:
    """The planner's baseline: ``evaluation.seed_power.baseline`` (``sweep:<s>``: the winner, once
    known), else its table's first trained experiment."""
    baseline = typed_config(cfg).evaluation.seed_power.baseline
    if baseline:
        return next(iter(resolve_entries([baseline], winners)), None)
    return next(iter(seed_power_inputs(cfg, winners)), None)


def seed_power_sweep_reports(cfg: dict) -> list[str]:
    """The reports of the sweeps whose winner the planner plans with (its table's ``sweep:<s>``
    entries and a ``sweep:<s>`` baseline): its job waits for them and is planned again after."""
    planner = typed_config(cfg).evaluation.seed_power
    return entry_sweep_reports([*table_entries(cfg, planner.table), *([planner.baseline] if planner.baseline else [])])


def protocol_checkpoints(cfg: dict, winners: Winners | None = None) -> dict[str, str]:
    """The protocol table's checkpoints (``evaluation.protocols.table``): every seed of every
    experiment of the table (an untrained one: its PLM; a ``sweep:<s>`` entry: the winner's, once
    known), by experiment id."""
    table = typed_config(cfg).evaluation.protocols.table
    return {e: model_input(cfg, e) for e in experiment_ids(cfg, table_experiments(cfg, table, winners))}


def protocol_sweep_reports(cfg: dict) -> list[str]:
    """The reports of the sweeps whose winner the protocol table evaluates (its table's ``sweep:<s>``)."""
    return table_sweep_reports(cfg, typed_config(cfg).evaluation.protocols.table)


def figure_experiments(cfg: dict, name: str) -> dict[str, str]:
    """Legend label -> experiment id (the first seed of each trained experiment)."""
    return {label: experiment_ids(cfg, [exp])[0] for label, exp in typed_config(cfg).figures[name].experiments.items()}


def model_input(cfg: dict, exp_id: str) -> str:
    """What an evaluation reads: a trained experiment's best checkpoint, or the resolved PLM."""
    if is_trained(cfg, exp_id):
        return outputs.path(outputs.MODEL, exp=exp_id)
    return outputs.path(outputs.PLM, plm=typed_spec(cfg, exp_id).plm)


def figure_inputs(cfg: dict, name: str) -> dict[str, dict[str, str]]:
    """Label -> {what the figure's kind reads: the file} (:mod:`cselab.reporting.kinds`)."""
    kind = figure_kinds()[typed_config(cfg).figures[name].kind]
    where = {"curve": lambda e: outputs.path(outputs.CURVE, exp=e), "model": lambda e: model_input(cfg, e),
             "stsb_dev": lambda e: outputs.path(outputs.RESULT["stsb_dev"], exp=e)}
    return {label: {read: where[read](exp_id) for read in kind.reads}
            for label, exp_id in figure_experiments(cfg, name).items()} if kind.reads else {}


def figure_values(cfg: dict, name: str) -> dict[str, float]:
    """A sweep's x values: label -> the kind's value of the experiment (e.g. its swept option)."""
    kind = figure_kinds()[typed_config(cfg).figures[name].kind]
    if kind.values is None:
        return {}
    options = kind.typed(cfg["figures"][name])  # the kind's own options: its options dataclass
    return {label: kind.values(options, typed_spec(cfg, exp_id))
            for label, exp_id in figure_experiments(cfg, name).items()}


def heldout_file(cfg: dict, name: str) -> str | None:
    kind = figure_kinds()[typed_config(cfg).figures[name].kind]
    if not kind.heldout:
        return None
    options = kind.typed(cfg["figures"][name])  # a heldout kind's own options: its options dataclass
    return outputs.path(outputs.CORPUS_HELDOUT_SPLIT, fraction=options.holdout)


# -- sharing: MTEB result files, model cards, ONNX, export folders (target `exports`) -----------

def export_experiments(cfg: dict, winners: Winners | None = None) -> list[str]:
    """The experiment ids of ``export.tables`` (every table when null), in table order, then those
    of ``export.experiments``; a ``sweep:<s>`` entry (a table's or there): the winner's, once known."""
    settings = typed_config(cfg)
    tables = settings.export.tables or list(settings.tables)
    ids = [e for t in tables for e in table_inputs(cfg, t, winners)]
    return list(dict.fromkeys([*ids, *experiment_ids(cfg, resolve_entries(settings.export.experiments, winners))]))


def export_sweep_reports(cfg: dict) -> list[str]:
    """The reports of the sweeps whose winner target ``exports`` exports (or checks with MTEB's
    evaluator): the target waits for them and is planned again once they have run."""
    settings = typed_config(cfg)
    tables = settings.export.tables or list(settings.tables)
    return entry_sweep_reports([*(e for t in tables for e in table_entries(cfg, t)), *settings.export.experiments,
                                *settings.export.mteb_check.experiments])


def mteb_sources(cfg: dict, exp_id: str) -> list[tuple[str, str, str]]:
    """(kind, result file, data manifest) of what goes into ``results/mteb/<exp>/``: its STS
    evaluation always; its transfer and BEIR evaluations where they have been computed (a table
    that reads them built them). One computed later changes the rule's input set, which reruns it."""
    sources = [("sts", outputs.path(outputs.RESULT["sts"], exp=exp_id), outputs.SENTEVAL_MANIFEST)]
    transfer = outputs.path(outputs.RESULT["transfer"], exp=exp_id)
    if Path(transfer).is_file():
        sources.append(("transfer", transfer, outputs.SENTEVAL_MANIFEST))
    for d in typed_config(cfg).evaluation.beir.datasets:
        beir = outputs.path(outputs.RESULT["beir"], exp=exp_id, dataset=d)
        if Path(beir).is_file():
            sources.append(("beir", beir, outputs.path(outputs.BEIR_MANIFEST, dataset=d)))
    return sources


def card_inputs(cfg: dict, exp_id: str) -> dict[str, str]:
    """What a trained experiment's model card reads: checkpoint, training summary, STS (with
    per-item predictions), STS-B dev, transfer where computed, the data manifests and corpus."""
    from cselab.pipeline.config import corpus_file

    res = {k: outputs.path(outputs.RESULT[k], exp=exp_id) for k in ("sts", "sts_pairs", "stsb_dev")}
    if any(kind == "transfer" for kind, _, _ in mteb_sources(cfg, exp_id)):
        res.update({k: outputs.path(outputs.RESULT[k], exp=exp_id) for k in ("transfer", "transfer_pairs")})
    return {"model": outputs.path(outputs.MODEL, exp=exp_id), "summary": outputs.path(outputs.TRAIN_SUMMARY, exp=exp_id),
            **res, "senteval": outputs.SENTEVAL_MANIFEST, "corpus": corpus_file(typed_spec(cfg, exp_id))}


def mteb_check_inputs(cfg: dict, winners: Winners | None = None) -> dict[str, dict[str, str]]:
    """Per experiment id of ``export.mteb_check.experiments`` (``sweep:<s>``: the winner's, once
    known): its checkpoint and STS results."""
    ids = experiment_ids(cfg, resolve_entries(typed_config(cfg).export.mteb_check.experiments, winners))
    return {e: {"model": model_input(cfg, e), "sts": outputs.path(outputs.RESULT["sts"], exp=e)} for e in ids}


def mteb_check_sweep_reports(cfg: dict) -> list[str]:
    """The reports of the sweeps whose winner the MTEB check reads."""
    return entry_sweep_reports(typed_config(cfg).export.mteb_check.experiments)


def sweep_push_receipts(cfg: dict, sweep: str, winners: Winners | None = None) -> list[str]:
    """Rule push_sweep's inputs: the Hub receipt (rule push) of every seed of sweep ``sweep``'s
    winner, once known (none before: the rule waits for the sweep's report)."""
    sweep_entry(cfg, sweep)
    ids = experiment_ids(cfg, resolve_entries([f"sweep:{sweep}"], winners))
    return [outputs.path(outputs.PUSH_RECEIPT, exp=e) for e in ids]


def export_targets(cfg: dict, winners: Winners | None = None) -> list[str]:
    """Target `exports`: MTEB files of every exported experiment, the export folder of every
    trained one, the MTEB check; a sweep's winner once known (``winners``)."""
    ids = export_experiments(cfg, winners)
    return ([outputs.path(outputs.MTEB_DIR, exp=e) for e in ids]
            + [outputs.path(outputs.EXPORT, exp=e) for e in ids if is_trained(cfg, e)]
            + [outputs.MTEB_CHECK_CSV])


def sweep_entry(cfg: dict, name: str) -> Sweep:
    """A resolved sweep, typed (``sweeps.<name>`` after validation: ``points``, ``seeds``, ``metric``,
    ``grid``, ``rows``); a user error for an unknown one."""
    from cselab.errors import ConfigError

    from cselab.settings import from_dict

    sweeps = cfg.get("sweeps") or {}
    if name not in sweeps:
        raise ConfigError(f"no sweep named {name!r} under sweeps: ({', '.join(sorted(sweeps)) or 'none configured'})")
    return from_dict(Sweep, sweeps[name], where=f"sweeps.{name}")


def sweep_points(cfg: dict, name: str) -> list[dict]:
    """What the sweep report reads, in grid order: per point its experiment, grid values and, per
    seed, the selection metric's score file, its per-item predictions (None for a metric without) and the
    training summary."""
    from cselab.reporting.sweeps import metric_of

    sweep = sweep_entry(cfg, name)
    metric = metric_of(sweep.metric)
    out = []
    for point in sweep.points:
        runs = []
        for seed in sweep.seeds:
            exp_id = f"{point['experiment']}-s{seed}"
            runs.append({"id": exp_id, "seed": seed, "score": outputs.path(outputs.RESULT[metric.score], exp=exp_id),
                         "pairs": metric.pairs and outputs.path(outputs.RESULT[metric.pairs], exp=exp_id),
                         "summary": outputs.path(outputs.TRAIN_SUMMARY, exp=exp_id)})
        out.append({"experiment": point["experiment"], "values": point["values"], "runs": runs})
    return out


def sweep_inputs(cfg: dict, name: str) -> list[str]:
    """Every file :func:`sweep_points` names (Snakemake builds what is missing)."""
    return [run[k] for point in sweep_points(cfg, name) for run in point["runs"] for k in ("score", "pairs", "summary")
            if run[k]]


def sweep_params(cfg: dict, name: str) -> dict:
    """The sweep report job's settings: the sweep (name, metric, seeds, grid) and the experiment
    entry of each point (the selected one becomes ``results/sweep_<name>.best.yaml``)."""
    sweep = sweep_entry(cfg, name)
    return {"name": name, "metric": sweep.metric, "seeds": list(sweep.seeds),
            "grid": {key: list(values) for key, values in sweep.grid.items()},
            "entries": {p["experiment"]: cfg["experiments"][p["experiment"]] for p in sweep.points}}
