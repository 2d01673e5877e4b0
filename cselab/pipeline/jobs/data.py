"""Jobs of the data rules: corpus, SentEval, BEIR, the resolved PLM, spans and subsampling.
(``segment_shard``, ``segment_corpus`` and ``subsample`` run in the spans environment, which has no torch.)"""

from __future__ import annotations

from pathlib import Path

from cselab.io import write_json
from cselab.data.integrity import verify_senteval_inputs
from cselab.pipeline.jobs import run



def prepare_corpus(smk) -> None:
    from cselab.data.corpus import prepare_corpus as prepare

    src = smk.params.source
    with run(smk, params={"corpus": src}) as r:
        manifest = prepare(url=src.get("url"), path=src.get("path"), out_txt=Path(smk.output.corpus),
                           manifest=Path(smk.output.manifest), max_lines=src.get("max_lines"),
                           sha256=src.get("sha256"), download_dir=Path(smk.params.download_dir))
        r.log_metrics({"lines": manifest["out_lines"], "dropped_control_lines": manifest["dropped_control_lines"],
                       "truncated_lines": manifest["truncated_lines"]})
        r.log_artifact(smk.output.manifest)


def split_corpus(smk) -> None:
    from cselab.data.corpus import split_corpus as split

    fraction = float(smk.wildcards.fraction)
    with run(smk, params={"fraction": fraction}, label=f"holdout-{fraction}") as r:
        r.log_metrics(split(Path(smk.input.corpus), fraction, Path(smk.output.train), Path(smk.output.heldout)))
    record_derived(smk, smk.output.train, smk.output.heldout)


def prepare_senteval(smk) -> None:
    from cselab.data.senteval import prepare_senteval as prepare

    src = smk.params.source
    with run(smk, params={"senteval": src}) as r:
        manifest = prepare(url=src.get("url"), path=src.get("path"), extract_dir=Path(smk.params.extract_dir),
                           manifest=Path(smk.output.manifest), tasks=smk.params.tasks,
                           strict_counts=src["strict_counts"], download_dir=Path(smk.params.download_dir))
        for task, info in manifest["tasks"].items():
            r.log_metrics({f"rows.{task}": sum(f["rows"] for f in info["files"].values())})
        r.log_artifact(smk.output.manifest)


def senteval_reads(smk) -> None:
    """The SentEval files that jobs read under one name (``reads``: STS-B dev, STS, ...),
    verified as rule prepare_senteval verifies the tree and recorded: what those jobs check them
    against (:mod:`cselab.data.integrity`)."""
    import json

    from cselab.data.senteval import local_root, verify_sets

    src, name = smk.params.source, smk.wildcards.reads
    with run(smk, params={"senteval": src, "sets": smk.params.sets}, label=name) as r:
        root = local_root(src.get("path")) or Path(json.loads(Path(smk.input.manifest).read_text())["root"])
        record = verify_sets(root, smk.params.sets, src["strict_counts"])
        write_json(smk.output[0], {"reads": name, **record})
        r.log_metrics({"files": len(record["files"]), "rows": sum(f["rows"] for f in record["files"].values())})
        r.log_artifact(smk.output[0])


def resolve_plm(smk) -> None:
    from cselab.models.checkpoints import checkpoint_shape, resolve_model

    with run(smk, params={"plm": smk.wildcards.plm, "model": smk.params.model}, label=smk.wildcards.plm) as r:
        path = resolve_model(smk.params.model)
        info = {"plm": smk.wildcards.plm, "model": smk.params.model, "path": str(path), **checkpoint_shape(path)}
        r.set_tags({"model_path": path})
        write_json(smk.output[0], info)


def prepare_beir(smk) -> None:
    from cselab.data.beir import prepare_beir as prepare

    name = smk.wildcards.dataset
    with run(smk, params={"dataset": name, "url": smk.params.url, "path": smk.params.path}, label=name) as r:
        manifest = prepare(name, url=smk.params.url, path=smk.params.path, out_dir=Path(smk.params.out_dir),
                           manifest=Path(smk.output.manifest), download_dir=Path(smk.params.download_dir),
                           disk_mb=smk.resources.get("disk_mb"))
        r.log_metrics({k: v for k, v in manifest.get("counts", {}).items() if isinstance(v, (int, float))})
        r.log_artifact(smk.output.manifest)


def prepare_stsb_retrieval(smk) -> None:
    from cselab.data.beir import prepare_beir as prepare
    from cselab.data.beir import stsb_retrieval_dataset

    with run(smk, label="stsb") as r:
        root = stsb_retrieval_dataset(verify_senteval_inputs(smk.input), Path(smk.params.out_dir))
        manifest = prepare("stsb_retrieval", url=None, path=str(root), out_dir=Path(smk.params.out_dir),
                           manifest=Path(smk.output.manifest), download_dir=Path(smk.params.download_dir))
        r.log_metrics({k: v for k, v in manifest.get("counts", {}).items() if isinstance(v, (int, float))})
        r.log_artifact(smk.output.manifest)


def segment_shard(smk) -> None:
    """One shard of the corpus's segmentation, with spaCy processes = the job's threads (params
    leave operational settings out); no MLflow run of its own (rule segment_corpus, which gathers
    the shards, logs the corpus's statistics)."""
    from cselab.data.span_shards import segment_shard as segment

    segment(Path(smk.input.corpus), smk.wildcards.shard, Path(smk.output.spans), Path(smk.output.record),
            {**smk.params.settings, "n_process": int(smk.threads)})


def segment_corpus(smk) -> None:
    """Gather the shards' spans in corpus order into the spans file and its statistics."""
    from cselab.data.span_shards import gather_spans

    settings = smk.params.settings
    with run(smk, params={"spans": settings, "spans_shards": len(smk.input.spans)}, label="corpus") as r:
        stats = gather_spans(Path(smk.input.corpus), list(smk.input.spans), list(smk.input.records),
                             Path(smk.output.spans), stats_path=Path(smk.output.stats))
        hist = stats.get("units_per_sentence", {})
        r.log_metrics({"sentences": stats["n_sentences"], "sentences_per_s": stats["sentences_per_s"],
                       "mean_units": stats["mean_units"], **{f"units_hist.{k}": v for k, v in hist.items()}})
        r.log_artifact(smk.output.stats)
    record_derived(smk, smk.output.spans)


def subsample(smk) -> None:
    from cselab.data.subsample import expand_corpus

    strategy = smk.wildcards.strategy
    with run(smk, params={"strategy": strategy, "min_words": smk.params.min_words}, label=strategy) as r:
        stats = expand_corpus(Path(smk.input.spans), strategy, Path(smk.output.corpus),
                              min_words=smk.params.min_words)
        write_json(smk.output.stats, stats)
        r.log_metrics({k: v for k, v in stats.items() if isinstance(v, (int, float))})
        r.log_artifact(smk.output.stats)
    record_derived(smk, smk.output.corpus)


def record_derived(smk, *paths: str) -> None:
    """Record data derived from the prepared corpus (a split, the spans, a subsampled corpus)
    beside each file, as an evaluation records its result: planning checks them
    (:func:`cselab.pipeline.invocation.check_derived`), as Snakemake would otherwise retrain what
    reads a damaged one."""
    from cselab.evaluation.records import record_result

    for path in paths:
        record_result(path, smk.rule)



