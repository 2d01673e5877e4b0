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
from functools import partial
from pathlib import Path
from typing import Callable

from cselab.config import tracking_uri
from cselab.data import write_json_atomic
from cselab.errors import CselabError
from cselab.tracking import mlflow_run

log = logging.getLogger("cselab")


def _run(smk, experiment_id: str | None = None, params: dict | None = None, label: str | None = None):
    """The job's MLflow run; it checks a remote tracking server first (``mlflow.fallback``)."""
    mlcfg = smk.config["mlflow"]
    return mlflow_run(uri=tracking_uri(smk.config), fallback=mlcfg.get("fallback", "none"),
                      experiment_name=mlcfg["experiment_name"], rule=smk.rule, experiment_id=experiment_id,
                      params=params, label=label, tags={"snakemake.jobid": getattr(smk, "jobid", "")})


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
        write_json_atomic(smk.output[0], info)


def train(smk) -> None:
    from cselab import sts
    from cselab.train import dev_metrics
    from cselab.train import train as train_loop

    from cselab.config import operational_settings, validate

    spec = smk.params.spec
    # checkpoint_steps is read here, not from params: changing it must not retrain
    ops = operational_settings(validate(smk.config), spec["id"])
    out_dir = Path(smk.output.summary).parent
    dev = sts.stsb_dev(_senteval_root(smk.input.senteval))
    dev_batch = spec["training"].get("dev_batch_size", 128)
    with _run(smk, experiment_id=spec["id"], params={**spec, "operational": ops}) as run:
        def dev_score(encoder) -> dict:
            return dev_metrics(encoder, dev, dev_batch)

        def on_log(row: dict) -> None:
            run.log_metrics({k: v for k, v in row.items() if k not in ("step", "epoch")}, step=row["step"])

        result = train_loop({**spec, "training": {**spec["training"], **ops}}, Path(smk.input.corpus), dev_score,
                            out_dir, on_log=on_log, checkpoint_dir=out_dir / "resume")
        summary = {"experiment": spec["id"], "best_step": result.best_step, "stsb_dev_spearman": result.best_dev,
                   "steps": result.steps, "train_seconds": result.train_seconds,
                   "sentences_per_s": result.sentences_per_s, "model_dir": str(smk.output.model),
                   "resumed_from_step": result.resumed_from, "mlflow_run_id": run.run_id}
        run.log_metrics({"best_stsb_dev_spearman": result.best_dev, "best_step": result.best_step,
                         "train_seconds": result.train_seconds, "train_sentences_per_s": result.sentences_per_s})
        run.log_artifact(smk.output.curve)
        write_json_atomic(smk.output.summary, summary)
        run.log_artifact(smk.output.summary)


def _model_dir(model_input: str | Path) -> Path:
    """A rule's model input: a trained checkpoint dir, or the resolved-PLM JSON of an untrained one."""
    from cselab.models import resolve_model

    path = Path(model_input)
    return resolve_model(json.loads(path.read_text())["model"]) if path.is_file() else path


class _Model:
    """The model an evaluation rule scores: encoder, timing and the embedding cache."""

    def __init__(self, smk):
        from cselab.cache import EmbeddingCache
        from cselab.encoder import load_encoder

        self.settings = smk.params.settings
        self.dir = _model_dir(smk.input.model)
        self.encoder = load_encoder(self.dir, pooler=self.settings["pooler"], mlp_head=False)
        key = {k: v for k, v in self.settings.items() if k in ("pooler", "max_len")}
        self.cache = (EmbeddingCache(Path("results/cache/embeddings"), self.dir, key)
                      if self.settings.get("cache", True) else None)
        self.encoded, self.encode_seconds = 0, 0.0

    def encode_fn(self, dataset: str, max_len: int | None = None, sequence: bool = False) -> Callable:
        """An ``encode`` for evaluators, through the cache under ``dataset``.

        ``sequence=True`` is for evaluators that call ``encode`` several times (retrieval: the
        queries, then corpus chunks): the n-th call is cached as ``<dataset>.<n>``.
        """
        def encode(sentences):
            tic = time.perf_counter()
            out = self.encoder.encode(sentences, batch_size=self.settings["batch_size"],
                                      max_len=max_len or self.settings["max_len"])
            self.encoded += len(sentences)
            self.encode_seconds += time.perf_counter() - tic
            return out

        if self.cache is None:
            return encode
        name = dataset + ("" if max_len in (None, self.settings["max_len"]) else f"-len{max_len}")
        if not sequence:
            return self.cache.encoder(name, encode)
        calls = iter(range(1 << 30))
        return lambda sentences: self.cache.get(f"{name}.{next(calls)}", list(sentences), encode)

    def stats(self) -> dict:
        return {"model_dir": str(self.dir), "encoded_sentences": self.encoded,
                "encode_seconds": self.encode_seconds,
                "encode_sentences_per_s": self.encoded / self.encode_seconds if self.encode_seconds else None,
                "cache_hits": self.cache.hits if self.cache else 0,
                "cache_misses": self.cache.misses if self.cache else 0}


def _evaluate(smk, compute: Callable[["_Model"], dict], params: dict | None = None) -> None:
    """Shared shell of the evaluation rules: one MLflow run, result JSON with timing and cache stats."""
    exp_id = smk.params.experiment
    with _run(smk, experiment_id=exp_id, params={"evaluation": smk.params.settings, **(params or {})}) as run:
        model = _Model(smk)
        tic = time.perf_counter()
        result = compute(model)
        result.update(experiment=exp_id, settings=smk.params.settings, wall_seconds=time.perf_counter() - tic,
                      **model.stats())
        prefix = smk.rule.removeprefix("evaluate_")
        run.log_metrics({**{f"{prefix}.{k}": v for k, v in result["scores"].items()},
                         **({"avg": result["avg"]} if result.get("avg") is not None else {}),
                         **{k: result[k] for k in ("wall_seconds", "encode_seconds", "encode_sentences_per_s",
                                                    "cache_hits", "cache_misses") if result.get(k) is not None}})
        write_json_atomic(smk.output[0], result)
        run.log_artifact(smk.output[0])


def _save_pairs(path: str, pairs: dict) -> None:
    """Per-pair gold and predictions (``<column>.gold`` / ``<column>.pred``) for the bootstrap."""
    import numpy as np

    arrays = {f"{col}.{k}": np.asarray(v) for col, (gold, pred) in pairs.items()
              for k, v in (("gold", gold), ("pred", pred))}
    tmp = Path(path).with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    tmp.replace(path)


def load_pairs(path: str | Path) -> dict[str, tuple]:
    import numpy as np

    with np.load(path) as z:
        cols = dict.fromkeys(k.rsplit(".", 1)[0] for k in z.files)
        return {c: (z[f"{c}.gold"], z[f"{c}.pred"]) for c in cols}


def evaluate_sts(smk) -> None:
    from cselab import sts

    root = _senteval_root(smk.input.senteval)

    def compute(m: _Model) -> dict:
        res = sts.evaluate_sts(m.encode_fn("sts"), root)
        _save_pairs(smk.output.pairs, res.pop("pairs"))
        return res

    _evaluate(smk, compute)


def evaluate_stsb_dev(smk) -> None:
    """The best checkpoint on STS-B dev (CompCSE Tables 2-6), with per-pair predictions."""
    import numpy as np

    from cselab import sts

    root = _senteval_root(smk.input.senteval)

    def compute(m: _Model) -> dict:
        subset = sts.stsb_dev(root)
        pred = sts.predict_subset(m.encode_fn("stsb-dev"), subset)
        gold = np.asarray(subset.gold, dtype=np.float64)
        spearman, pearson = sts._corr(pred, gold)
        _save_pairs(smk.output.pairs, {"STS-B dev": (gold, pred)})
        return {"scores": {"STS-B dev": spearman}, "pearson": pearson, "n_pairs": len(gold)}

    _evaluate(smk, compute)


def evaluate_transfer(smk) -> None:
    from cselab import transfer

    root, opts = _senteval_root(smk.input.senteval), smk.params.transfer
    _evaluate(smk, lambda m: transfer.evaluate_transfer(m.encode_fn("transfer"), root, tasks=opts["tasks"],
                                                        mode=opts["mode"], seed=opts["seed"]),
              params={"transfer": opts})


def evaluate_retrieval(smk) -> None:
    """BEIR datasets (nDCG@10) and the STS-B in-domain retrieval (recall@1/5/10), one code path."""
    from cselab import retrieval

    opts, manifest = smk.params.retrieval, json.loads(Path(smk.input.dataset).read_text())
    name = smk.wildcards.get("dataset", "stsb_retrieval")

    def compute(m: _Model) -> dict:
        res = retrieval.evaluate_beir(m.encode_fn(f"beir-{name}", max_len=opts["max_len"], sequence=True),
                                      Path(manifest["root"]), k=opts["k"], chunk_size=opts["chunk_size"],
                                      score=opts["score"], k_values=(1, 5, 10, 100))
        metrics = res["metrics"]
        if smk.params.metric == "ndcg@10":  # BEIR tables report fractions (InfoCSE Table 3)
            scores = {name: metrics["ndcg@10"]}
        else:  # in-domain retrieval tables report recall in percent
            scores = {f"R@{k}": 100 * metrics[f"recall@{k}"] for k in (1, 5, 10)}
        return {"dataset": name, **res, "scores": scores}

    _evaluate(smk, compute, params={"retrieval": opts, "dataset": name})


def evaluate_geometry(smk) -> None:
    from cselab import geometry, sts

    root, opts = _senteval_root(smk.input.senteval), smk.params.geometry

    def compute(m: _Model) -> dict:
        subset = sts.load_stsb(root, split=opts["split"])
        res = geometry.align_uniform(m.encode_fn(f"stsb-{opts['split']}"), subset, threshold=opts["threshold"])
        return {**res, "scores": {"alignment": res["alignment"], "uniformity": res["uniformity"]}}

    _evaluate(smk, compute, params={"geometry": opts})


def prepare_beir(smk) -> None:
    from cselab.retrieval import prepare_beir as prepare

    name = smk.wildcards.dataset
    with _run(smk, params={"dataset": name, "url": smk.params.url, "path": smk.params.path}, label=name) as run:
        manifest = prepare(name, url=smk.params.url, path=smk.params.path, out_dir=Path(smk.params.out_dir),
                           manifest=Path(smk.output.manifest), download_dir=Path(smk.params.download_dir))
        run.log_metrics({k: v for k, v in manifest.get("counts", {}).items() if isinstance(v, (int, float))})
        run.log_artifact(smk.output.manifest)


def prepare_stsb_retrieval(smk) -> None:
    from cselab.retrieval import prepare_beir as prepare
    from cselab.retrieval import stsb_retrieval_dataset

    with _run(smk, label="stsb") as run:
        root = stsb_retrieval_dataset(_senteval_root(smk.input.senteval), Path(smk.params.out_dir))
        manifest = prepare("stsb_retrieval", url=None, path=str(root), out_dir=Path(smk.params.out_dir),
                           manifest=Path(smk.output.manifest), download_dir=Path("resources/downloads"))
        run.log_metrics({k: v for k, v in manifest.get("counts", {}).items() if isinstance(v, (int, float))})
        run.log_artifact(smk.output.manifest)


def table(smk) -> None:
    from cselab import tables

    spec, columns = smk.params.table, smk.params.columns
    with _run(smk, params={"table": spec["name"], "kind": spec["kind"], "experiments": spec["experiments"]},
              label=spec["name"]) as run:
        rows = []
        for row in smk.params.rows:
            scores, pairs = {}, None
            for path in row["files"]:
                if path.endswith(".npz"):
                    pairs = load_pairs(path)
                else:
                    scores.update(json.loads(Path(path).read_text())["scores"])
            rows.append({**row, "scores": scores, "pairs": pairs})
        average = spec["kind"] in ("sts", "transfer", "beir")
        digits = {"geometry": 3, "beir": 4}.get(spec["kind"], 2)
        df = tables.score_table(rows, columns, [tuple(s) for s in spec.get("sources", [])],
                                average=average, digits=digits)
        if any(r["pairs"] is not None for r in rows):
            df = tables.add_comparisons(df, rows, columns, average=average, **smk.params.bootstrap)
            for _, r in df[df["baseline"].notna()].iterrows():
                run.log_metrics({f"{r['experiment']}.diff_vs_baseline": r["diff"],
                                 f"{r['experiment']}.diff_ci_low": r["diff_ci_low"],
                                 f"{r['experiment']}.diff_ci_high": r["diff_ci_high"]})
        tables.write(df, columns, smk.output.csv, smk.output.md, spec.get("title", spec["name"]), digits)
        if average:
            for _, r in df.iterrows():
                run.log_metrics({f"{r['experiment']}.avg": r["Avg"]})
        run.log_artifact(smk.output.csv)
        run.log_artifact(smk.output.md)


def segment_corpus(smk) -> None:
    from cselab.spans import segment_corpus as segment

    settings = smk.params.settings
    with _run(smk, params={"spans": settings}, label="corpus") as run:
        stats = segment(Path(smk.input.corpus), Path(smk.output.spans), settings, stats_path=Path(smk.output.stats))
        hist = stats.get("units_per_sentence", {})
        run.log_metrics({"sentences": stats["n_sentences"], "sentences_per_s": stats["sentences_per_s"],
                         "mean_units": stats["mean_units"], **{f"units_hist.{k}": v for k, v in hist.items()}})
        run.log_artifact(smk.output.stats)


def subsample(smk) -> None:
    from cselab.subsample import expand_corpus

    strategy = smk.wildcards.strategy
    with _run(smk, params={"strategy": strategy, "min_words": smk.params.min_words}, label=strategy) as run:
        stats = expand_corpus(Path(smk.input.spans), strategy, Path(smk.output.corpus),
                              min_words=smk.params.min_words)
        write_json_atomic(smk.output.stats, stats)
        run.log_metrics({k: v for k, v in stats.items() if isinstance(v, (int, float))})
        run.log_artifact(smk.output.stats)


def figure(smk) -> None:
    """CompCSE Figures 2-5 (config ``figures``): PNG plus the CSV it was drawn from."""
    import pandas as pd

    from cselab import figures

    fig, entries = smk.params.figure, smk.params.labels
    kind = fig["kind"]
    with _run(smk, params={"figure": fig}, label=fig["name"]) as run:
        out = {"out_png": smk.output.png, "out_csv": smk.output.csv, "title": fig.get("title")}
        if kind in ("alignment_uniformity", "dev_curve"):
            curves = {label: pd.read_csv(smk.input[key]) for label, _, key in entries}
            draw = figures.figure_alignment_uniformity if kind == "alignment_uniformity" else figures.figure_dev_curve
            draw(curves, max_step=fig.get("max_step", 500 if kind == "alignment_uniformity" else 1000), **out)
        else:
            from cselab import sts
            from cselab.encoder import load_encoder

            settings = smk.params.settings
            loaded = {label: load_encoder(_model_dir(smk.input[key]), pooler=settings["pooler"], mlp_head=False)
                      for label, _, key in entries}
            encoders = {label: partial(enc.encode, batch_size=settings["batch_size"], max_len=settings["max_len"])
                        for label, enc in loaded.items()}
            if kind == "similarity_heatmap":
                figures.figure_similarity_heatmap(encoders, sentences=fig.get("sentences"), **out)
            else:
                dev = sts.stsb_dev(_senteval_root(smk.input.senteval))
                sentences = list(dict.fromkeys([*dev.sent1, *dev.sent2]))
                embeddings = {label: encode(sentences) for label, encode in encoders.items()}
                figures.figure_umap(embeddings, sentences, seed=fig.get("seed", 42), **out)
        run.log_artifact(smk.output.png)
        run.log_artifact(smk.output.csv)


JOBS: dict[str, Callable] = {f.__name__: f for f in (
    prepare_corpus, prepare_senteval, resolve_plm, prepare_beir, prepare_stsb_retrieval, segment_corpus,
    subsample, train, evaluate_sts, evaluate_stsb_dev, evaluate_transfer, evaluate_retrieval, evaluate_geometry,
    table, figure)}


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
    try:  # rules in the spans environment run without torch
        import torch

        torch.set_num_threads(max(1, int(smk.threads)))
    except ImportError:
        pass
    try:
        JOBS[job](smk)
    except CselabError as e:
        log.error("%s", e)
        print(f"\ncselab error in rule {smk.rule}: {e}\n", file=sys.stderr)
        sys.exit(1)
    except BaseException:
        log.exception("rule %s failed", smk.rule)  # the traceback in the job's log file too
        raise
