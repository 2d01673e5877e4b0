"""Jobs of the training rules: ``train`` (an experiment) and ``pretrain`` (a pretraining stage
for one PLM), both the shared training loop; resumable from ``training.checkpoint_steps``.

A job killed after a checkpoint resumes from it and continues its own MLflow run (the run id is
kept in the job's folder until it completes); one that restarts from scratch marks the
interrupted run KILLED, pointing to the new one."""

from __future__ import annotations

import contextlib
import math
from functools import lru_cache, partial
from pathlib import Path

from cselab.io import write_json
from cselab.pipeline import outputs, tracking
from cselab.data.integrity import verify_senteval_inputs
from cselab.models.checkpoints import keep_training_copies
from cselab.pipeline.jobs import operations, run, time_breakdown
from cselab.settings.spec import ExperimentSpec



def owner(out_dir: Path, smk, spec: ExperimentSpec):
    """The experiment folder's lock for the job's whole life (:mod:`cselab.pipeline.locks`)."""
    from cselab.pipeline.locks import experiment_owner

    out_dir.mkdir(parents=True, exist_ok=True)
    return experiment_owner(out_dir, f"rule {smk.rule} for {spec.id}", wait_s=spec.training.owner_wait_s)


def _artifacts(smk) -> dict[str, Path]:
    return {role: Path(p) for role, p in smk.params.artifacts.items()}


@contextlib.contextmanager
def _job_run(smk, spec: ExperimentSpec, ops: dict, out_dir: Path, **run_kwargs):
    """The job's MLflow run: the interrupted attempt's run when the loop will resume its
    checkpoint, else a new one (the interrupted one retired)."""
    from cselab.training.checkpoints import Checkpoints, fingerprint

    previous = tracking.previous_run(out_dir)  # read under the folder's lock: never another live job's run
    # reopen the interrupted run only when the loop will resume a sound checkpoint (not start over inside it)
    resumable = previous is not None and Checkpoints(
        out_dir / "resume", fingerprint(spec.to_dict(), Path(smk.input.corpus), _artifacts(smk))).peek() is not None
    params = {**spec.to_dict(), "operational": ops, "world_size": spec.training.devices * spec.training.nodes}
    tracking.limit_http_retries()
    with run(smk, experiment_id=spec.id, params=params, resume=previous if resumable else None,
             buffer=out_dir / tracking.BUFFER_NAME, **run_kwargs) as r:
        if previous is not None and previous != r.run_id:
            tracking.retire(previous, successor=r.run_id)
        tracking.remember_run(out_dir, r.run_id)
        yield r
    tracking.forget_run(out_dir)


def _loop(smk, spec: ExperimentSpec, out_dir: Path, dev_score, r):
    """The training loop on ``training.devices`` processes per node of ``training.nodes`` (one:
    in this process); rank 0 reports every curve row to this job's MLflow run."""
    from cselab.pipeline.tracking import RunMetrics
    from cselab.training import compiled, distributed
    from cselab.training.loop import train_job

    _check_corpus(Path(smk.input.corpus))
    _check_stages(_artifacts(smk))
    compiled.share_cache(Path(outputs.COMPILE_CACHE))
    kwargs = {"spec": spec, "corpus_path": Path(smk.input.corpus), "dev_score": dev_score,
              "out_dir": out_dir, "on_log": RunMetrics.of(r), "checkpoint_dir": out_dir / "resume",
              "artifacts": _artifacts(smk), "token_cache": Path(outputs.TOKEN_CACHE)}
    world = spec.training
    devices, nodes = world.devices, world.nodes
    if devices * nodes == 1:
        return train_job(kwargs)
    return distributed.launch("cselab.pipeline.jobs.train:train_job_with_plugins",
                              {**kwargs, "plugins": list(smk.cselab_operations.plugins)}, devices=devices, nodes=nodes,
                              workdir=out_dir / "launch",
                              timeout_s=world.dist_timeout_s,
                              log_file=smk.log[0] if smk.log else None, threads=int(smk.threads))


def train_job_with_plugins(kwargs: dict):
    """:func:`cselab.training.loop.train_job` in a worker process, the config's plugins imported
    first (a method of one's own is built from its declaration there too)."""
    from cselab.pipeline.config import load_plugins
    from cselab.training.loop import train_job

    load_plugins(kwargs.pop("plugins"))
    return train_job(kwargs)


def _check_stages(artifacts: dict[str, Path]) -> None:
    """The pretraining stages this training starts from, against the records their training
    wrote, before anything loads them: a damaged one is one message naming it and what to do,
    not the traceback of the library that reads its weights."""
    from cselab.errors import ModelError
    from cselab.models.checkpoints import damaged_model, damaged_stage_message

    for stage_dir in artifacts.values():
        problem = damaged_model(stage_dir)
        if problem:
            raise ModelError(damaged_stage_message(stage_dir, problem))


def _check_corpus(corpus: Path) -> None:
    """The training corpus, checked against what wrote it: the prepared corpus against the sha256
    rule prepare_corpus recorded, a split or subsampled one against the record beside it."""
    from cselab.data.integrity import verify_corpus
    from cselab.evaluation.records import check_recorded

    if corpus.resolve() == Path(outputs.CORPUS).resolve():
        verify_corpus(outputs.CORPUS_MANIFEST, corpus)
    else:
        check_recorded(corpus)


def stsb_dev_score(encoder, senteval: Path, batch_size: int) -> dict:
    """STS-B dev metrics of ``encoder`` (the checkpoint-selection score); a module-level
    function, so a multi-process job can carry it to rank 0."""
    from cselab.evaluation.sts import dev_metrics
    from cselab.models.encoder import DEFAULT_MAX_TOKENS

    return dev_metrics(partial(encoder.encode, batch_size=batch_size, max_tokens=DEFAULT_MAX_TOKENS),
                       _stsb_dev(senteval))


@lru_cache(maxsize=4)
def _stsb_dev(senteval: Path):
    from cselab.data.tasks import stsb_dev

    return stsb_dev(senteval)


def _summary(result, r, scored: bool) -> dict:
    """The run's summary metrics and JSON; a job that scored no STS-B dev (a pretraining stage, or
    no evaluation step) reports no score (never NaN, which is not JSON)."""
    metrics = {"train_seconds": result.train_seconds, "train_sentences_per_s": result.sentences_per_s,
               "resumed_from_step": result.resumed_from}
    summary = {"steps": result.steps, "train_seconds": result.train_seconds,
               "sentences_per_s": result.sentences_per_s, "tokens_per_s": result.tokens_per_s,
               "resumed_from_step": result.resumed_from, "diagnostics": last_diagnostics(result.curve),
               "collapse_alarms": result.alarms}
    metrics["train_tokens_per_s"] = result.tokens_per_s
    if result.alarms:  # never silent: the run's tag, the summary, the tables' notes
        r.set_tags({COLLAPSE_TAG: "; ".join(f"step {a['step']}: {a['reason']}" for a in result.alarms)})
    if scored:
        best = None if math.isnan(result.best_dev) else result.best_dev
        metrics.update(best_stsb_dev_spearman=best, best_step=result.best_step)
        summary.update(best_step=result.best_step, stsb_dev_spearman=best)
    summary["job_seconds"] = time_breakdown(result.phases, "where the job's time went")
    metrics.update({f"job.{k}_s": v for k, v in summary["job_seconds"].items()})
    r.log_metrics({k: v for k, v in metrics.items() if v is not None and not (isinstance(v, float) and math.isnan(v))})
    return {**summary, "mlflow_run_id": r.run_id}


#: the MLflow tag of a run whose dev metrics looked like a collapse (training.collapse)
COLLAPSE_TAG = "cselab.collapse_alarm"
DIAGNOSTICS = ("view_cosine", "duplicate_rate", "tokens_per_s", "mfu", "anisotropy", "effective_rank", "alignment",
               "uniformity")


def last_diagnostics(curve: list[dict]) -> dict:
    """Each training diagnostic's last logged value (:mod:`cselab.training.diagnostics`)."""
    out = {}
    for row in curve:
        out.update({k: row[k] for k in DIAGNOSTICS if row.get(k) is not None and not math.isnan(row[k])})
    return out


def train(smk) -> None:
    # operational settings (checkpoint_steps, devices...) come from the config, not from params:
    # changing them must not retrain; the spec is typed once, with them
    ops = operations(smk, exp_id=smk.params.spec["id"]).training
    spec = ExperimentSpec.from_dict(smk.params.spec, operational=ops)
    out_dir = Path(smk.output.summary).parent
    dev_score = partial(stsb_dev_score, senteval=verify_senteval_inputs(smk.input),
                        batch_size=spec.training.dev_batch_size)
    with owner(out_dir, smk, spec), _job_run(smk, spec, ops, out_dir) as r:
        result = _loop(smk, spec, out_dir, dev_score, r)
        write_json(smk.output.summary, {"experiment": spec.id, **_summary(result, r, scored=True),
                                        "model_dir": str(smk.output.model)})
        keep_training_copies(smk.output.model, [smk.output.curve, smk.output.summary])
        r.log_artifact(smk.output.curve)
        r.log_artifact(smk.output.summary)


def pretrain(smk) -> None:
    """A pretraining stage: the loop without dev scoring; the stage's method exports its final
    state to ``model/`` beside a ``manifest.json`` (the spec), which later jobs fingerprint."""
    ops = operations(smk, stage=smk.params.spec["name"]).training
    spec = ExperimentSpec.from_dict(smk.params.spec, operational=ops)
    out_dir = Path(smk.output.model).parent
    with owner(out_dir, smk, spec), _job_run(smk, spec, ops, out_dir, label=spec.id) as r:
        result = _loop(smk, spec, out_dir, None, r)
        write_json(Path(smk.output.model) / "manifest.json",
                   {"stage": spec.name, "spec": spec.to_dict(), "steps": result.steps})
        write_json(smk.output.summary, {"stage": spec.id, **_summary(result, r, scored=False)})
        import pandas as pd

        from cselab.reporting.figures import figure_loss_terms

        figure_loss_terms(pd.read_csv(smk.output.curve), smk.output.plot, title=f"{spec.id}: loss terms")
        keep_training_copies(smk.output.model, [smk.output.curve, smk.output.plot, smk.output.summary])
        r.log_artifact(smk.output.curve)
        r.log_artifact(smk.output.plot)
        r.log_artifact(smk.output.summary)
