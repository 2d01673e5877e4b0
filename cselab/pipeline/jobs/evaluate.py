"""Jobs of the evaluation rules: a trained checkpoint or an untrained PLM evaluated by one
evaluation kind (:mod:`cselab.evaluation.kinds`: STS, STS-B dev, transfer, retrieval,
alignment/uniformity, a plugin's), through the embedding cache."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from cselab.evaluation.encoding import ModelEncoder
from cselab.evaluation.records import record_result
from cselab.io import write_json
from cselab.models.checkpoints import model_path
from cselab.pipeline import outputs
from cselab.pipeline.jobs import encoder_settings, run, time_breakdown


def _evaluate(smk, compute: Callable[[ModelEncoder], dict], params: dict | None = None) -> None:
    """Shared shell of the evaluation rules: one MLflow run, result JSON with timing and cache
    stats; per-item predictions (``pairs``) to the rule's ``pairs`` output."""
    exp_id, settings = smk.params.experiment, encoder_settings(smk)
    with run(smk, experiment_id=exp_id, params={"evaluation": settings, **(params or {})}) as r:
        model = ModelEncoder(model_path(smk.input.model), settings, Path(outputs.EMBEDDING_CACHE))
        tic = time.perf_counter()
        result = compute(model)
        if "pairs" in result:
            from cselab.reporting.stats import save_pairs  # scipy: only where a kind has per-item pairs

            save_pairs(smk.output.pairs, result.pop("pairs"))
        wall = time.perf_counter() - tic
        common = dict(experiment=exp_id, settings=settings, wall_seconds=wall, **model.stats(),
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
        for path in smk.output:  # what a table or an export checks it against (cselab.evaluation.records)
            record_result(path, smk.rule)


def evaluate(smk) -> None:
    """Every evaluation rule's job: what it computes is its kind's job function
    (:mod:`cselab.evaluation.kinds`, plugins included); one MLflow run, one result JSON,
    per-item predictions where there are."""
    from cselab.errors import ConfigError
    from cselab.evaluation.kinds import kind_of_rule

    kind = kind_of_rule(smk.rule)  # a plugin's kind: the job shell imported the config's plugins

    if kind is None:
        raise ConfigError(f"rule {smk.rule!r} is no evaluation kind's (cselab.evaluation.kinds)")
    compute, params = kind.job(smk)
    _evaluate(smk, compute, params)
