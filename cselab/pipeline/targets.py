"""Target wiring: what each table and figure of the config reads and shows, as file paths
(:mod:`cselab.pipeline.outputs`) and row descriptions for the report jobs; the kinds themselves
are declared in :mod:`cselab.reporting` (:mod:`~cselab.reporting.tables`,
:mod:`~cselab.reporting.kinds`)."""

from __future__ import annotations

from pathlib import Path

from cselab.pipeline import outputs
from cselab.pipeline.config import experiment_ids, experiment_spec, full_options, is_trained
from cselab.reporting.kinds import figure_kinds
from cselab.reporting.tables import EXTRA_COLUMNS, TABLE_KINDS, kind_columns


def table_columns(cfg: dict, name: str) -> list[str]:
    """A table's columns: its kind's (from the evaluation settings), then its extra columns."""
    table = cfg["tables"][name]
    return kind_columns(table["kind"], cfg["evaluation"], table.get("extra_columns", []))


def table_inputs(cfg: dict, name: str) -> dict[str, list[str]]:
    """Result files per experiment id that a table reads (Snakemake builds what is missing)."""
    table = cfg["tables"][name]
    results = dict.fromkeys([*TABLE_KINDS[table["kind"]].results,
                             *(EXTRA_COLUMNS[c] for c in table.get("extra_columns", []))])
    datasets = cfg["evaluation"]["beir"]["datasets"]
    out = {}
    for exp in experiment_ids(cfg, table["experiments"]):
        files = []
        for result in results:
            pattern = outputs.RESULT[result]
            files += ([outputs.path(pattern, exp=exp, dataset=d) for d in datasets] if "{dataset}" in pattern
                      else [outputs.path(pattern, exp=exp)])
        out[exp] = files
    return out


def table_rows(cfg: dict, name: str) -> list[dict]:
    """What the table job needs to know about each experiment id (a rerun trigger too).

    ``options`` carries ``subsampling`` too: published settings are matched on it. ``setting``
    is what the note compares with the paper's training setting (:func:`training_setting`).
    """
    keep = ("name", "plm", "model", "method", "seed")
    rows = []
    for exp_id, files in table_inputs(cfg, name).items():
        spec = experiment_spec(cfg, exp_id)
        trained = spec["seed"] is not None
        options = {**full_options(spec), "subsampling": spec["training"]["subsampling"]} if trained else {}
        rows.append({**{k: spec[k] for k in keep}, "objective": spec["signature"], "options": options,
                     "setting": training_setting(cfg, spec) if trained else None, "id": exp_id, "files": files,
                     "summary": outputs.path(outputs.TRAIN_SUMMARY, exp=exp_id) if trained else None})
    return rows


def table_summaries(cfg: dict, name: str) -> list[str]:
    """The training summaries of a table's trained experiments (their collapse alarms go into its notes)."""
    return [outputs.path(outputs.TRAIN_SUMMARY, exp=e) for e in table_inputs(cfg, name) if is_trained(cfg, e)]


def training_setting(cfg: dict, spec: dict) -> dict:
    """An experiment's training setting as a table note compares it with a paper's
    (:data:`cselab.reporting.published.SETTING_KEYS`)."""
    t = spec["training"]
    out = {"precision": t["precision"], "lr": t["lr"], "batch_size": t["batch_size"], "epochs": t["epochs"],
           "max_steps": t["max_steps"] or None, "max_len": t["max_len"], "corpus": corpus_label(cfg, spec)}
    if t["subsampling"] != "none":
        out["segmenter"] = cfg["spans"]["segmenter"]
    return out


def corpus_label(cfg: dict, spec: dict) -> str:
    """The training corpus in words: its file name, ``first N lines`` when capped, the held-out
    slice it leaves out."""
    corpus = cfg["data"]["corpus"]
    label = Path(corpus.get("path") or corpus["url"]).name
    if corpus.get("max_lines"):
        label += f", first {corpus['max_lines']:,} lines"
    if spec["training"]["holdout"]:
        label += f", without a {spec['training']['holdout']:g} held-out slice"
    return label


def leakage_corpora(cfg: dict) -> dict[str, str]:
    """The training files the leakage audit reads, by label: the corpus and each subsampled set
    a configured experiment trains on (a held-out split trains on part of the corpus)."""
    out = {"corpus": outputs.CORPUS}
    for name in cfg["experiments"]:
        first = experiment_ids(cfg, [name])[0]
        if is_trained(cfg, first):
            strategy = experiment_spec(cfg, first)["training"]["subsampling"]
            if strategy != "none":
                out[f"subsampled ({strategy})"] = outputs.path(outputs.SUBSAMPLED, strategy=strategy)
    return out


def seed_power_inputs(cfg: dict) -> dict[str, dict[str, list[str]]]:
    """The seed planner's inputs (``evaluation.seed_power``): per trained experiment of its table,
    per metric, the per-item predictions of every seed."""
    from cselab.reporting.power import METRICS

    opts = cfg["evaluation"]["seed_power"]
    out = {}
    for name in cfg["tables"][opts["table"]]["experiments"]:
        ids = experiment_ids(cfg, [name])
        if is_trained(cfg, ids[0]):
            out[name] = {m: [outputs.path(outputs.RESULT[METRICS[m][0]], exp=e) for e in ids] for m in opts["metrics"]}
    return out


def seed_power_baseline(cfg: dict) -> str:
    """The planner's baseline: ``evaluation.seed_power.baseline``, else its table's first trained experiment."""
    return cfg["evaluation"]["seed_power"]["baseline"] or next(iter(seed_power_inputs(cfg)))


def protocol_checkpoints(cfg: dict) -> dict[str, str]:
    """The protocol table's checkpoints (``evaluation.protocols.table``): every seed of every
    experiment of the table (an untrained one: its PLM), by experiment id."""
    table = cfg["tables"][cfg["evaluation"]["protocols"]["table"]]
    return {e: model_input(cfg, e) for e in experiment_ids(cfg, table["experiments"])}


def figure_experiments(cfg: dict, name: str) -> dict[str, str]:
    """Legend label -> experiment id (the first seed of each trained experiment)."""
    return {label: experiment_ids(cfg, [exp])[0] for label, exp in cfg["figures"][name].get("experiments", {}).items()}


def model_input(cfg: dict, exp_id: str) -> str:
    """What an evaluation reads: a trained experiment's best checkpoint, or the resolved PLM."""
    if is_trained(cfg, exp_id):
        return outputs.path(outputs.MODEL, exp=exp_id)
    return outputs.path(outputs.PLM, plm=experiment_spec(cfg, exp_id)["plm"])


def figure_inputs(cfg: dict, name: str) -> dict[str, dict[str, str]]:
    """Label -> {what the figure's kind reads: the file} (:mod:`cselab.reporting.kinds`)."""
    kind = figure_kinds()[cfg["figures"][name]["kind"]]
    where = {"curve": lambda e: outputs.path(outputs.CURVE, exp=e), "model": lambda e: model_input(cfg, e),
             "stsb_dev": lambda e: outputs.path(outputs.RESULT["stsb_dev"], exp=e)}
    return {label: {read: where[read](exp_id) for read in kind.reads}
            for label, exp_id in figure_experiments(cfg, name).items()} if kind.reads else {}


def figure_values(cfg: dict, name: str) -> dict[str, float]:
    """A sweep's x values: label -> the kind's value of the experiment (e.g. its swept option)."""
    fig = cfg["figures"][name]
    kind = figure_kinds()[fig["kind"]]
    if kind.values is None:
        return {}
    return {label: kind.values(fig, experiment_spec(cfg, exp_id))
            for label, exp_id in figure_experiments(cfg, name).items()}


def heldout_file(cfg: dict, name: str) -> str | None:
    fig = cfg["figures"][name]
    if not figure_kinds()[fig["kind"]].heldout:
        return None
    return outputs.path(outputs.CORPUS_HELDOUT_SPLIT, fraction=fig["holdout"])


# -- sharing: MTEB result files, model cards, ONNX, export folders (target `exports`) -----------

def export_experiments(cfg: dict) -> list[str]:
    """The experiment ids of ``export.tables`` (every table when null), in table order."""
    tables = cfg["export"]["tables"] or list(cfg["tables"])
    return list(dict.fromkeys(e for t in tables for e in table_inputs(cfg, t)))


def mteb_sources(cfg: dict, exp_id: str) -> list[tuple[str, str, str]]:
    """(kind, result file, data manifest) of what goes into ``results/mteb/<exp>/``: its STS
    evaluation always; its transfer and BEIR evaluations where they have been computed (a table
    that reads them built them). One computed later changes the rule's input set, which reruns it."""
    sources = [("sts", outputs.path(outputs.RESULT["sts"], exp=exp_id), outputs.SENTEVAL_MANIFEST)]
    transfer = outputs.path(outputs.RESULT["transfer"], exp=exp_id)
    if Path(transfer).is_file():
        sources.append(("transfer", transfer, outputs.SENTEVAL_MANIFEST))
    for d in cfg["evaluation"]["beir"]["datasets"]:
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
            **res, "senteval": outputs.SENTEVAL_MANIFEST, "corpus": corpus_file(experiment_spec(cfg, exp_id))}


def mteb_check_inputs(cfg: dict) -> dict[str, dict[str, str]]:
    """Per experiment id of ``export.mteb_check.experiments``: its checkpoint and STS results."""
    ids = experiment_ids(cfg, cfg["export"]["mteb_check"]["experiments"])
    return {e: {"model": model_input(cfg, e), "sts": outputs.path(outputs.RESULT["sts"], exp=e)} for e in ids}


def export_targets(cfg: dict) -> list[str]:
    """Target `exports`: MTEB files of every exported experiment, the export folder of every
    trained one, the MTEB check."""
    ids = export_experiments(cfg)
    return ([outputs.path(outputs.MTEB_DIR, exp=e) for e in ids]
            + [outputs.path(outputs.EXPORT, exp=e) for e in ids if is_trained(cfg, e)]
            + [outputs.MTEB_CHECK_CSV])
