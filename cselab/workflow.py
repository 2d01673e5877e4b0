"""Glue between Snakemake jobs and the library: one function per rule, each one MLflow run.

``workflow_scripts/<rule>.py`` is a two-line file calling :func:`main`. Everything here takes
plain paths and dicts from the ``snakemake`` object and calls the library; a user error
(:class:`CselabError`) becomes one clear line on stderr and in the job's log, not a traceback.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Callable

from cselab.config import tracking_uri
from cselab.errors import CselabError
from cselab.tracking import mlflow_run

log = logging.getLogger("cselab")


def _write_json(path: str | Path, obj) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    tmp.replace(path)


def _run(smk, experiment_id: str | None = None, params: dict | None = None, label: str | None = None):
    return mlflow_run(uri=tracking_uri(smk.config), experiment_name=smk.config["mlflow"]["experiment_name"],
                      rule=smk.rule, experiment_id=experiment_id, params=params, label=label,
                      tags={"snakemake.jobid": getattr(smk, "jobid", "")})


def _senteval_root(manifest: str) -> Path:
    return Path(json.loads(Path(manifest).read_text())["root"])


def prepare_corpus(smk) -> None:
    from cselab.data import prepare_corpus as prepare

    src = smk.params.source
    with _run(smk, params={"corpus": src}) as run:
        manifest = prepare(url=src.get("url"), path=src.get("path"), out_txt=Path(smk.output.corpus),
                           manifest=Path(smk.output.manifest), max_lines=src.get("max_lines"),
                           sha256=src.get("sha256"), download_dir=Path(smk.params.download_dir))
        run.log_metrics({"lines": manifest["out_lines"]})
        run.log_artifact(smk.output.manifest)


def prepare_senteval(smk) -> None:
    from cselab.data import prepare_senteval as prepare

    src = smk.params.source
    with _run(smk, params={"senteval": src}) as run:
        manifest = prepare(url=src.get("url"), path=src.get("path"), extract_dir=Path(smk.params.extract_dir),
                           manifest=Path(smk.output.manifest), tasks=smk.params.tasks,
                           strict_counts=src.get("strict_counts", True), download_dir=Path(smk.params.download_dir))
        for task, info in manifest["tasks"].items():
            run.log_metrics({f"rows.{task}": sum(f["rows"] for f in info["files"].values())})
        run.log_artifact(smk.output.manifest)


def resolve_plm(smk) -> None:
    from transformers import AutoConfig

    from cselab.models import resolve_model

    with _run(smk, params={"plm": smk.wildcards.plm, "model": smk.params.model}, label=smk.wildcards.plm) as run:
        path = resolve_model(smk.params.model)
        cfg = AutoConfig.from_pretrained(path)
        info = {"plm": smk.wildcards.plm, "model": smk.params.model, "path": str(path),
                "model_type": cfg.model_type, "hidden_size": cfg.hidden_size,
                "num_hidden_layers": getattr(cfg, "num_hidden_layers", None)}
        run.set_tags({"model_path": path})
        _write_json(smk.output[0], info)


def train(smk) -> None:
    from cselab import sts
    from cselab.train import train as train_loop

    spec = smk.params.spec
    out_dir = Path(smk.output.summary).parent
    dev = sts.stsb_dev(_senteval_root(smk.input.senteval))
    dev_batch = spec["training"].get("dev_batch_size", 128)
    with _run(smk, experiment_id=spec["id"], params=spec) as run:
        def dev_score(encoder) -> float:
            return sts.spearman_on_subset(lambda s: encoder.encode(s, batch_size=dev_batch), dev)

        def on_log(row: dict) -> None:
            run.log_metrics({k: v for k, v in row.items() if k not in ("step", "epoch")}, step=row["step"])

        result = train_loop(spec, Path(smk.input.corpus), dev_score, out_dir, on_log=on_log)
        summary = {"experiment": spec["id"], "best_step": result.best_step, "stsb_dev_spearman": result.best_dev,
                   "steps": result.steps, "train_seconds": result.train_seconds,
                   "sentences_per_s": result.sentences_per_s, "model_dir": str(smk.output.model),
                   "mlflow_run_id": run.run_id}
        run.log_metrics({"best_stsb_dev_spearman": result.best_dev, "best_step": result.best_step,
                         "train_seconds": result.train_seconds, "train_sentences_per_s": result.sentences_per_s})
        run.log_artifact(smk.output.curve)
        _write_json(smk.output.summary, summary)
        run.log_artifact(smk.output.summary)


def evaluate_sts(smk) -> None:
    from cselab import sts
    from cselab.encoder import load_encoder
    from cselab.models import resolve_model

    settings, exp_id = smk.params.settings, smk.params.experiment
    model_input = Path(smk.input.model)
    model_dir = resolve_model(json.loads(model_input.read_text())["model"]) if model_input.is_file() else model_input
    with _run(smk, experiment_id=exp_id, params={"evaluation": settings, "model_dir": str(model_dir)}) as run:
        encoder = load_encoder(model_dir, pooler=settings["pooler"], mlp_head=False)
        calls = []

        def encode(sentences):
            tic = time.perf_counter()
            out = encoder.encode(sentences, batch_size=settings["batch_size"], max_len=settings["max_len"])
            calls.append((len(sentences), time.perf_counter() - tic))
            return out

        tic = time.perf_counter()
        result = sts.evaluate_sts(encode, _senteval_root(smk.input.senteval))
        result.update(experiment=exp_id, model_dir=str(model_dir), settings=settings,
                      seconds=time.perf_counter() - tic,
                      encode_sentences_per_s=sum(n for n, _ in calls) / max(1e-9, sum(s for _, s in calls)))
        run.log_metrics({**{f"sts.{k}": v for k, v in result["scores"].items()}, "sts.avg": result["avg"],
                         "seconds": result["seconds"], "encode_sentences_per_s": result["encode_sentences_per_s"]})
        _write_json(smk.output[0], result)
        run.log_artifact(smk.output[0])


def sts_table(smk) -> None:
    from cselab import tables

    table = smk.params.table
    with _run(smk, params={"table": table["name"], "experiments": table["experiments"]}, label=table["name"]) as run:
        rows = []
        for spec, path in zip(smk.params.rows, smk.input.results):
            rows.append({**spec, "scores": json.loads(Path(path).read_text())["scores"]})
        df = tables.sts_table(rows, paper=table.get("paper", ""), table=table["name"])
        tables.write(df, smk.output.csv, smk.output.md, table.get("title", table["name"]))
        for _, r in df.iterrows():
            run.log_metrics({f"{r['experiment']}.avg": r["Avg"]})
        run.log_artifact(smk.output.csv)
        run.log_artifact(smk.output.md)


JOBS: dict[str, Callable] = {f.__name__: f for f in
                             (prepare_corpus, prepare_senteval, resolve_plm, train, evaluate_sts, sts_table)}


def main(smk, job: str) -> None:
    """Run ``job`` for a Snakemake ``script:``: log to the rule's log file, clear user errors."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if smk.log:
        Path(smk.log[0]).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(smk.log[0], mode="w"))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        handlers=handlers, force=True)
    for noisy in ("alembic", "mlflow", "urllib3", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    import torch

    torch.set_num_threads(max(1, int(smk.threads)))
    try:
        JOBS[job](smk)
    except CselabError as e:
        log.error("%s", e)
        print(f"\ncselab error in rule {smk.rule}: {e}\n", file=sys.stderr)
        sys.exit(1)
