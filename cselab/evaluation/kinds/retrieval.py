"""Retrieval kinds: BEIR datasets (nDCG@10; InfoCSE Table 3) and the STS-B in-domain retrieval
(recall@k; DiffCSE Table 10), one code path (:mod:`cselab.evaluation.retrieval`).

One BEIR job per checkpoint and corpus: datasets that share a corpus
(``evaluation.beir.shared_corpora``: FEVER and Climate-FEVER) are one job that encodes it once.
Memory and disk follow from the dataset's published size (:func:`cselab.data.beir.retrieval_resources`)."""

from __future__ import annotations

from pathlib import Path

from cselab.evaluation.kinds import config_section, evaluation


def _scored(cfg: dict) -> dict:
    """What can change a result (the job's params); precision, query_block, shared_corpora and
    resources only change how it runs, so the job reads them from the config: a change reruns nothing."""
    from cselab.data.beir import retrieval_params

    return retrieval_params(config_section(cfg, "beir"))


def _sized(key: str):
    def size(datasets: list[str], cfg: dict) -> int:
        from cselab.data.beir import retrieval_resources

        return retrieval_resources(datasets, config_section(cfg, "beir"))[key]
    return size


@evaluation("beir", results={"beir": "beir/{dataset}.json"}, inputs={"model": "model", "dataset": "beir_dataset"},
            params={"retrieval": _scored, "metric": "ndcg@10"},
            resources={"mem_mb": _sized("mem_mb"), "disk_mb": _sized("disk_mb"),
                       "runtime": lambda datasets, cfg: 12 * 60 if len(datasets) == 1 else 24 * 60})
def beir(smk):
    return retrieval_job(smk)


@evaluation("stsb_retrieval", results={"stsb_retrieval": "stsb_retrieval.json"},
            inputs={"model": "model", "dataset": "stsb_retrieval_dataset"},
            params={"retrieval": _scored, "metric": "recall"},
            resources={"mem_mb": 8000, "disk_mb": 200, "runtime": 60})
def stsb_retrieval(smk):
    return retrieval_job(smk)


def retrieval_job(smk):
    """BEIR datasets (nDCG@10) and the STS-B in-domain retrieval (recall@1/5/10), one code path:
    the datasets of one corpus (FEVER and Climate-FEVER share one) in one pass that encodes each
    document once, one result file per dataset."""
    from cselab.data.beir import beir_settings
    from cselab.data.integrity import verify_retrieval_dataset
    from cselab.evaluation import retrieval
    from cselab.io import lines_sha256

    manifests = [verify_retrieval_dataset(f) for f in _as_list(smk.input.dataset)]
    names = ([smk.wildcards.dataset] if "dataset" in smk.wildcards.keys() else
             [Path(o).stem for o in smk.output] if "_shared_" in smk.rule else ["stsb_retrieval"])
    # the spec's settings, with how to run them (the job shell's operational section); logged as given
    opts = {**smk.params.retrieval, **smk.cselab_operations.beir, "datasets": names}
    beir = beir_settings(opts)
    roots = {name: Path(m["root"]) for name, m in zip(names, manifests)}
    group = "+".join(names)

    def compute(m) -> dict:
        import torch

        cuda = torch.cuda.is_available()
        precision = beir.precision
        check_cache_disk(smk, manifests, names, m.dim(), beir)
        res = retrieval.evaluate_shared(
            roots, lambda name, texts: m.encode_fn(f"beir-{name}-queries-{len(texts)}-{lines_sha256(texts)[:12]}",
                                                   max_len=beir.max_len)(texts),
            m.encode_fn(f"beir-{group}-corpus", max_len=beir.max_len, sequence=True, dtype="float16")
            if beir.corpus_cache else m.encode_fn(None, max_len=beir.max_len),
            k=beir.k, chunk_size=beir.chunk_size, score=beir.score, k_values=(1, 5, 10, 100),
            precision=("fp16" if cuda else "fp32") if precision == "auto" else precision,
            device="cuda" if cuda else None, query_block=beir.query_block)
        per = {name: {"dataset": name, **r, "scores": retrieval.table_scores(name, r["metrics"], smk.params.metric)}
               for name, r in res.items()}
        if len(per) == 1:
            return next(iter(per.values()))
        return {"datasets": per, "scores": {k: v for r in per.values() for k, v in r["scores"].items()}}

    return compute, {"retrieval": opts, "dataset": group}


def _as_list(x) -> list:
    return [x] if isinstance(x, str) else list(x)


def check_cache_disk(smk, manifests: list[dict], names: list[str], dim: int, beir) -> None:
    """One message, before encoding, when the corpus embedding cache would outgrow the disk the
    job declares (``resources.disk_mb``); ``beir``: the ``evaluation.beir`` settings."""
    from cselab.data.beir import beir_settings
    from cselab.errors import DataError

    declared = smk.resources.get("disk_mb") if hasattr(smk.resources, "get") else None
    if not beir_settings(beir).corpus_cache or not declared:
        return
    docs = max(m["counts"]["docs"] for m in manifests)
    need = docs * dim * 2 / 1e6
    if need > declared:
        corpus = Path(manifests[0]["root"]) / "corpus.jsonl"
        raise DataError(f"BEIR dataset {names[0]!r}: the fp16 embedding cache of {corpus} ({docs:,} documents x "
                        f"{dim}) needs {need:,.0f} MB, more than the {declared:,} MB of disk the job declares; set "
                        f"evaluation.beir.corpus_cache: false (stream the corpus, no cache) or "
                        f"evaluation.beir.resources.{names[0]}.disk_mb to at least {need * 1.1:,.0f}.")
