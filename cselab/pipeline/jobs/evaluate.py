"""Jobs of the evaluation rules: a trained checkpoint or an untrained PLM on STS, STS-B dev,
transfer, retrieval and alignment/uniformity, through the embedding cache."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from cselab.evaluation.encoding import ModelEncoder
from cselab.io import lines_sha256, write_json
from cselab.models.checkpoints import model_path
from cselab.pipeline import outputs
from cselab.pipeline.jobs import run, senteval_root, time_breakdown


def _evaluate(smk, compute: Callable[[ModelEncoder], dict], params: dict | None = None) -> None:
    """Shared shell of the evaluation rules: one MLflow run, result JSON with timing and cache
    stats; per-item predictions (``pairs``) to the rule's ``pairs`` output."""
    from cselab.reporting.stats import save_pairs

    exp_id = smk.params.experiment
    with run(smk, experiment_id=exp_id, params={"evaluation": smk.params.settings, **(params or {})}) as r:
        model = ModelEncoder(model_path(smk.input.model), smk.params.settings, Path(outputs.EMBEDDING_CACHE))
        tic = time.perf_counter()
        result = compute(model)
        if "pairs" in result:
            save_pairs(smk.output.pairs, result.pop("pairs"))
        wall = time.perf_counter() - tic
        common = dict(experiment=exp_id, settings=smk.params.settings, wall_seconds=wall, **model.stats(),
                      mlflow_run_id=r.run_id, job_seconds=time_breakdown({"evaluate": wall}, "where the job's time went"))
        result.update(common)
        prefix = smk.rule.split("_shared_")[0].removeprefix("evaluate_")
        r.log_metrics({**{f"{prefix}.{k}": v for k, v in result["scores"].items()},
                       **({"avg": result["avg"]} if result.get("avg") is not None else {}),
                       **{k: result[k] for k in ("wall_seconds", "encode_seconds", "encode_sentences_per_s",
                                                 "cache_hits", "cache_misses") if result.get(k) is not None},
                       **{f"job.{k}_s": v for k, v in result["job_seconds"].items()}})
        written = ([(path, {**result["datasets"][Path(path).stem], **common}) for path in smk.output]
                   if "datasets" in result else [(smk.output[0], result)])  # a shared corpus: a file a dataset
        for path, one in written:
            write_json(path, one)
            r.log_artifact(path)


def evaluate(smk) -> None:
    """Every evaluation rule's job: what it computes is the rule's (:data:`EVALUATIONS`); one
    MLflow run, one result JSON, per-item predictions where there are."""
    compute, params = EVALUATIONS[smk.rule if smk.rule in EVALUATIONS else smk.rule.split("_shared_")[0]](smk)
    _evaluate(smk, compute, params)


def _sts(smk):
    from cselab.evaluation import sts

    root = senteval_root(smk.input.senteval)
    return (lambda m: sts.evaluate_sts(m.encode_fn("sts"), root)), None


def _stsb_dev(smk):
    from cselab.evaluation import sts

    root = senteval_root(smk.input.senteval)
    return (lambda m: sts.evaluate_stsb_dev(m.encode_fn("stsb-dev"), root)), None


def _stsb_dev_head(smk):
    """STS-B dev through the method's training head (SimCSE's "cls" pooler, InfoCSE Table 9), on
    the cached raw [CLS] embeddings: nothing is encoded twice."""
    from cselab.evaluation import sts
    from cselab.models.heads import load_head

    root = senteval_root(smk.input.senteval)
    head = load_head(model_path(smk.input.model))

    def compute(m):
        raw = m.encode_fn("stsb-dev")
        result = sts.evaluate_stsb_dev(lambda sentences: head(raw(sentences)), root)
        result["scores"] = {"cls": result["scores"]["STS-B dev"]}
        result.pop("pairs", None)
        return result

    return compute, None


def _transfer(smk):
    from cselab.evaluation import transfer

    root, opts = senteval_root(smk.input.senteval), smk.params.transfer
    return (lambda m: transfer.evaluate_transfer(m.encode_fn("transfer"), root, **opts)), {"transfer": opts}


def _transfer_dev(smk):
    """The transfer tasks' development accuracies under SentEval's dev protocol (the "fast"
    parameters SimCSE's and DiffCSE's ``--mode dev`` use): DiffCSE Tables 3-6 and 15's
    "Avg. transfer". The embeddings are the test-mode evaluation's cached ones."""
    from cselab.evaluation import transfer

    root, opts = senteval_root(smk.input.senteval), {**smk.params.transfer, "mode": transfer.DEV_MODE}

    def compute(m):
        result = transfer.evaluate_transfer(m.encode_fn("transfer"), root, **opts)
        result.pop("pairs")
        return {**result, "scores": transfer.dev_scores(result), "avg": None}

    return compute, {"transfer": opts}


def _retrieval(smk):
    """BEIR datasets (nDCG@10) and the STS-B in-domain retrieval (recall@1/5/10), one code path:
    the datasets of one corpus (``params.datasets``; FEVER and Climate-FEVER share one) in one
    pass that encodes each document once, one result file per dataset."""
    from cselab.evaluation import retrieval

    opts = {**smk.params.retrieval, **_retrieval_operational(smk.config)}
    manifests = [json.loads(Path(f).read_text()) for f in _as_list(smk.input.dataset)]
    names = ([smk.wildcards.dataset] if "dataset" in smk.wildcards.keys() else
             [Path(o).stem for o in smk.output] if "_shared_" in smk.rule else ["stsb_retrieval"])
    roots = {name: Path(m["root"]) for name, m in zip(names, manifests)}
    group = "+".join(names)

    def compute(m: ModelEncoder) -> dict:
        import torch

        cuda = torch.cuda.is_available()
        precision = opts["precision"]
        _check_cache_disk(smk, manifests, names, m.dim(), opts)
        res = retrieval.evaluate_shared(
            roots, lambda name, texts: m.encode_fn(f"beir-{name}-queries-{len(texts)}-{lines_sha256(texts)[:12]}",
                                                   max_len=opts["max_len"])(texts),
            m.encode_fn(f"beir-{group}-corpus", max_len=opts["max_len"], sequence=True, dtype="float16")
            if opts.get("corpus_cache") else m.encode_fn(None, max_len=opts["max_len"]),
            k=opts["k"], chunk_size=opts["chunk_size"], score=opts["score"], k_values=(1, 5, 10, 100),
            precision=("fp16" if cuda else "fp32") if precision == "auto" else precision,
            device="cuda" if cuda else None, query_block=opts["query_block"])
        per = {name: {"dataset": name, **r, "scores": retrieval.table_scores(name, r["metrics"], smk.params.metric)}
               for name, r in res.items()}
        if len(per) == 1:
            return next(iter(per.values()))
        return {"datasets": per, "scores": {k: v for r in per.values() for k, v in r["scores"].items()}}

    return compute, {"retrieval": opts, "dataset": group}


def _retrieval_operational(config: dict) -> dict:
    """The ``evaluation.beir`` settings that change how retrieval runs, not its result (read
    from the config, not the job's params, so that changing them reruns nothing)."""
    from cselab.data.beir import RETRIEVAL_SCORED

    beir = (config.get("evaluation") or {}).get("beir") or {}
    return {k: v for k, v in beir.items() if k not in RETRIEVAL_SCORED}


def _as_list(x) -> list:
    return [x] if isinstance(x, str) else list(x)


def _check_cache_disk(smk, manifests: list[dict], names: list[str], dim: int, opts: dict) -> None:
    """One message, before encoding, when the corpus embedding cache would outgrow the disk the
    job declares (``resources.disk_mb``)."""
    from cselab.errors import DataError

    declared = smk.resources.get("disk_mb") if hasattr(smk.resources, "get") else None
    if not opts.get("corpus_cache") or not declared:
        return
    docs = max(m["counts"]["docs"] for m in manifests)
    need = docs * dim * 2 / 1e6
    if need > declared:
        corpus = Path(manifests[0]["root"]) / "corpus.jsonl"
        raise DataError(f"BEIR dataset {names[0]!r}: the fp16 embedding cache of {corpus} ({docs:,} documents x "
                        f"{dim}) needs {need:,.0f} MB, more than the {declared:,} MB of disk the job declares; set "
                        f"evaluation.beir.corpus_cache: false (stream the corpus, no cache) or "
                        f"evaluation.beir.resources.{names[0]}.disk_mb to at least {need * 1.1:,.0f}.")


def _geometry(smk):
    from cselab.data.tasks import load_stsb
    from cselab.evaluation.geometry import align_uniform

    root, opts = senteval_root(smk.input.senteval), smk.params.geometry

    def compute(m: ModelEncoder) -> dict:
        res = align_uniform(m.encode_fn(f"stsb-{opts['split']}"), load_stsb(root, split=opts["split"]),
                            threshold=opts["threshold"])
        return {**res, "scores": {"alignment": res["alignment"], "uniformity": res["uniformity"]}}

    return compute, {"geometry": opts}


#: evaluation rule -> what its job computes on a model, and the params it logs
EVALUATIONS = {"evaluate_sts": _sts, "evaluate_stsb_dev": _stsb_dev, "evaluate_stsb_dev_head": _stsb_dev_head,
               "evaluate_transfer": _transfer, "evaluate_transfer_dev": _transfer_dev, "evaluate_beir": _retrieval,
               "evaluate_stsb_retrieval": _retrieval, "evaluate_geometry": _geometry}
