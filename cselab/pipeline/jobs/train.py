"""Jobs of the training rules: ``train`` (an experiment) and ``pretrain`` (a pretraining stage
for one PLM), both the shared training loop; resumable from ``training.checkpoint_steps``."""

from __future__ import annotations

from functools import lru_cache, partial
from pathlib import Path

import pandas as pd

from cselab.io import write_json
from cselab.pipeline import outputs
from cselab.pipeline.jobs import run, senteval_root

JOBS = ("train", "pretrain")


def _loop(smk, spec: dict, ops: dict, out_dir: Path, dev_score, r):
    """The training loop on ``training.devices`` processes per node of ``training.nodes`` (one:
    in this process); rank 0 reports every curve row to this job's MLflow run."""
    from cselab.pipeline.tracking import RunMetrics
    from cselab.training import distributed
    from cselab.training.loop import train_job

    artifacts = {role: Path(p) for role, p in smk.params.artifacts.items()}
    kwargs = {"spec": {**spec, "training": {**spec["training"], **ops}}, "corpus_path": Path(smk.input.corpus),
              "dev_score": dev_score, "out_dir": out_dir, "on_log": RunMetrics.of(r),
              "checkpoint_dir": out_dir / "resume", "artifacts": artifacts, "token_cache": Path(outputs.TOKEN_CACHE)}
    devices, nodes = ops.get("devices", 1), ops.get("nodes", 1)
    if devices * nodes == 1:
        return train_job(kwargs)
    return distributed.launch("cselab.training.loop:train_job", kwargs, devices=devices, nodes=nodes,
                              workdir=out_dir / "launch",
                              timeout_s=ops.get("dist_timeout_s", distributed.DEFAULT_TIMEOUT_S),
                              log_file=smk.log[0] if smk.log else None, threads=int(smk.threads))


def stsb_dev_score(encoder, senteval: Path, batch_size: int) -> dict:
    """STS-B dev metrics of ``encoder`` (the checkpoint-selection score); a module-level
    function, so a multi-process job can carry it to rank 0."""
    from cselab.evaluation.sts import dev_metrics
    from cselab.training.encoder import DEFAULT_MAX_TOKENS

    return dev_metrics(partial(encoder.encode, batch_size=batch_size, max_tokens=DEFAULT_MAX_TOKENS),
                       _stsb_dev(senteval))


@lru_cache(maxsize=4)
def _stsb_dev(senteval: Path):
    from cselab.data.tasks import stsb_dev

    return stsb_dev(senteval)


def world_params(ops: dict) -> dict:
    return {"world_size": ops.get("devices", 1) * ops.get("nodes", 1)}


def _summary(result, r) -> dict:
    r.log_metrics({"best_stsb_dev_spearman": result.best_dev, "best_step": result.best_step,
                   "train_seconds": result.train_seconds, "train_sentences_per_s": result.sentences_per_s})
    return {"best_step": result.best_step, "stsb_dev_spearman": result.best_dev, "steps": result.steps,
            "train_seconds": result.train_seconds, "sentences_per_s": result.sentences_per_s,
            "resumed_from_step": result.resumed_from, "mlflow_run_id": r.run_id}


def train(smk) -> None:
    from cselab.pipeline.config import operational_settings, validate

    spec = smk.params.spec
    # operational settings (checkpoint_steps, devices...) are read here, not from params: changing them must not retrain
    ops = operational_settings(validate(smk.config), spec["id"])
    out_dir = Path(smk.output.summary).parent
    dev_score = partial(stsb_dev_score, senteval=senteval_root(smk.input.senteval),
                        batch_size=spec["training"].get("dev_batch_size", 128))
    with run(smk, experiment_id=spec["id"], params={**spec, "operational": ops, **world_params(ops)}) as r:
        result = _loop(smk, spec, ops, out_dir, dev_score, r)
        write_json(smk.output.summary, {"experiment": spec["id"], **_summary(result, r),
                                        "model_dir": str(smk.output.model)})
        r.log_artifact(smk.output.curve)
        r.log_artifact(smk.output.summary)


def pretrain(smk) -> None:
    """A pretraining stage: the loop without dev scoring; the stage's method exports its final
    state to ``model/`` beside a ``manifest.json`` (the spec), which later jobs fingerprint."""
    from cselab.pipeline.config import operational_settings, validate

    spec = smk.params.spec
    ops = operational_settings(validate(smk.config), stage=spec["name"])
    out_dir = Path(smk.output.model).parent
    with run(smk, experiment_id=spec["id"], params={**spec, "operational": ops, **world_params(ops)},
             label=spec["id"]) as r:
        result = _loop(smk, spec, ops, out_dir, None, r)
        write_json(Path(smk.output.model) / "manifest.json",
                   {"stage": spec["name"], "spec": spec, "steps": result.steps})
        write_json(smk.output.summary, {"stage": spec["id"], **_summary(result, r)})
        from cselab.reporting.figures import figure_loss_terms

        figure_loss_terms(pd.read_csv(smk.output.curve), smk.output.plot, title=f"{spec['id']}: loss terms")
        r.log_artifact(smk.output.curve)
        r.log_artifact(smk.output.plot)
        r.log_artifact(smk.output.summary)
