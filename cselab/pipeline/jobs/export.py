"""Jobs of the sharing rules (:mod:`cselab.export`): MTEB result files, MTEB's evaluator beside
ours, the model card, the ONNX file, the export folder and the push to a Hub repository; each
one MLflow run. The MTEB files and the card are also attached to the runs of the evaluations
and the training they came from."""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
from pathlib import Path

from cselab.evaluation.records import read_result
from cselab.io import atomic_path, write_json, write_text
from cselab.models.checkpoints import model_path
from cselab.pipeline import outputs
from cselab.data.integrity import verify_senteval_inputs
from cselab.pipeline.jobs import encoder_settings, run
from cselab.settings import evaluation_settings, from_dict
from cselab.settings.evaluation import Bootstrap
from cselab.settings.sections import Card, MtebCheck, Onnx
from cselab.settings.spec import ExperimentSpec

log = logging.getLogger(__name__)

#: files of a checkpoint folder that an export leaves out: the training head, the copies of the
#: training's curve and summary (cselab.models.checkpoints.TRAINING_COPIES), and Snakemake's
#: timestamp of the directory output (a hard link to it would date the checkpoint by the export)
TRAINING_ONLY = ("head.pt", "head.json", "training", ".snakemake_timestamp")


def export(smk) -> None:
    """Every sharing rule's job: the rule's own (:data:`EXPORT_JOBS`)."""
    EXPORT_JOBS[smk.rule](smk)


def _attach(run_id: str | None, files: list[Path], artifact_path: str) -> None:
    """Log ``files`` into an earlier run too (an evaluation's, a training's), when it is known."""
    if not run_id:
        return
    import mlflow

    client = mlflow.MlflowClient()
    for f in files:
        client.log_artifact(run_id, str(f), artifact_path=artifact_path)


def mteb_results(smk) -> None:
    """``results/mteb/<exp>/``: the experiment's results as MTEB result files, read back with
    MTEB's own loader; artifacts of this run and of the evaluation runs they came from."""
    from cselab.evaluation.encoding import model_fingerprint
    from cselab.export.mteb_results import read_main_scores, write_mteb_results

    exp, sources = smk.wildcards.exp, smk.params.sources
    with run(smk, experiment_id=exp, params={"sources": [result for _, result, _ in sources]}) as r:
        revision = model_fingerprint(model_path(smk.input.model))
        evaluations = [(kind, read_result(result), json.loads(Path(manifest).read_text()))
                       for kind, result, manifest in sources]
        out = Path(smk.output[0])
        with atomic_path(out) as tmp:
            written = write_mteb_results(tmp, exp, revision, evaluations)
        scores = read_main_scores(out)
        r.log_metrics({f"mteb.{task}": score for task, score in scores.items()})
        r.log_artifact(out, artifact_path="mteb")
        for (_, result, _), files in zip(evaluations, written):
            _attach(result.get("mlflow_run_id"), [out / f.name for f in files], "mteb")
        log.info("%s: %d MTEB result files in %s", exp, len(scores), out)


def mteb_check(smk) -> None:
    """``results/mteb_check.csv``: MTEB's evaluator vs ours per STS task on each checkpoint of
    ``export.mteb_check.experiments``."""
    from cselab.export.mteb_check import check_experiment, write_check

    entries = smk.params.entries
    opts = from_dict(MtebCheck, smk.params.options, where="export.mteb_check")
    settings = evaluation_settings(encoder_settings(smk))
    logged = {"mteb_check": smk.params.options, "evaluation": encoder_settings(smk)}
    with run(smk, params=logged, label="mteb_check") as r:
        root, rows = verify_senteval_inputs(smk.input), []
        for exp, files in entries.items():
            sts = read_result(files["sts"])
            rows += check_experiment(exp, model_path(files["model"]), sts, root, settings, opts.tolerance)
        write_check(rows, Path(smk.output.csv), Path(smk.output.md))
        for exp in entries:
            r.log_metrics({f"{exp}.max_abs_diff": max(abs(x["diff"]) for x in rows if x["experiment"] == exp)})
        r.log_metrics({"disagreements": sum(not x["agree"] for x in rows)})
        r.log_artifact(smk.output.csv)
        r.log_artifact(smk.output.md)


def model_card(smk) -> None:
    """``results/cards/<exp>.md``: the export's ``README.md`` (:mod:`cselab.export.card`);
    also attached to the training run."""
    exp, spec = smk.wildcards.exp, ExperimentSpec.from_dict(smk.params.spec)
    with run(smk, experiment_id=exp, params={"card": smk.params.options}) as r:
        summary = json.loads(Path(smk.input.summary).read_text())
        card = _render_card(smk, spec, summary)
        write_text(smk.output[0], card)
        r.log_artifact(smk.output[0])
        _attach(summary.get("mlflow_run_id"), [Path(smk.output[0])], "card")


def _render_card(smk, spec: ExperimentSpec, summary: dict) -> str:
    from cselab.export.card import CardOptions, item_intervals, render_card, reproduce_command
    from cselab.export.mteb_results import data_revision
    from cselab.io import sha256_file
    from cselab.pipeline.tracking import COMMAND_ENV, git_commit
    from cselab.reporting.stats import load_pairs

    boot, inp = from_dict(Bootstrap, smk.params.bootstrap, where="evaluation.bootstrap"), smk.input
    n_boot, confidence = boot.n_boot, boot.confidence
    evaluation = {"sts": read_result(inp.sts),
                  "sts_ci": item_intervals(load_pairs(inp.sts_pairs), "spearman", n_boot, confidence),
                  "stsb_dev": read_result(inp.stsb_dev)["scores"]["STS-B dev"]}
    if "transfer" in inp.keys():
        evaluation.update(transfer=read_result(inp.transfer),
                          transfer_ci=item_intervals(load_pairs(inp.transfer_pairs), "accuracy", n_boot, confidence))
    revision = data_revision(json.loads(Path(inp.senteval).read_text()))
    invocation = os.environ.get(COMMAND_ENV, "snakemake")
    provenance = {"data": {"SentEval (manifest content)": revision, f"training corpus ({Path(inp.corpus).name})":
                           sha256_file(inp.corpus)},
                  "data_revision": revision, "commit": git_commit(), "invocation": invocation,
                  "command": reproduce_command(shlex.split(invocation)[1:], outputs.path(outputs.EXPORT, exp=spec.id))}
    card = from_dict(Card, smk.params.options, where="export.card")
    return render_card(spec, summary, evaluation, provenance,
                       CardOptions(card, evaluation_settings(smk.params.settings).pooler, confidence))


def export_onnx(smk) -> None:
    """``results/onnx/<exp>/model.onnx`` and ``check.json``: the encoder as ONNX; onnxruntime's
    embeddings of the STS-B dev sentences must equal PyTorch's within ``export.onnx.atol``."""
    from cselab.data.tasks import stsb_dev
    from cselab.errors import ExportError
    from cselab.export.onnx import compare_with_torch, export_onnx as write_onnx

    exp = smk.wildcards.exp
    opts = from_dict(Onnx, smk.params.options, where="export.onnx")
    settings = evaluation_settings(encoder_settings(smk))
    with run(smk, experiment_id=exp, params={"onnx": smk.params.options, "evaluation": encoder_settings(smk)}) as r:
        model_dir = model_path(smk.input.model)
        info = write_onnx(model_dir, Path(smk.output.onnx), opset=opts.opset)
        dev = stsb_dev(verify_senteval_inputs(smk.input))
        sentences = list(dict.fromkeys([*dev.sent1, *dev.sent2]))
        check = compare_with_torch(model_dir, Path(smk.output.onnx), sentences, settings.pooler,
                                   max_len=settings.max_len, atol=opts.atol)
        r.log_metrics({k: check[k] for k in ("max_abs_diff", "mean_abs_diff", "min_cosine")})
        if not check["equal"]:
            raise ExportError(f"ONNX export of {exp}: onnxruntime's STS-B dev embeddings differ from PyTorch's by "
                              f"{check['max_abs_diff']:.2e} > export.onnx.atol = {opts.atol}")
        write_json(smk.output.check, {**info, **check})
        r.log_artifact(smk.output.check)


def export_model(smk) -> None:
    """``results/export/<exp>/``: the sentence-transformers folder of the checkpoint (the
    training head left out), its card as ``README.md`` and ``onnx/model.onnx``."""
    from cselab.export.hub import check_export

    exp = smk.wildcards.exp
    with run(smk, experiment_id=exp) as r:
        model_dir, out = Path(smk.input.model), Path(smk.output[0])
        with atomic_path(out) as tmp:
            shutil.copytree(model_dir, tmp, ignore=shutil.ignore_patterns(*TRAINING_ONLY), copy_function=_link_or_copy)
            shutil.copyfile(smk.input.card, tmp / "README.md")
            (tmp / "onnx").mkdir()
            _link_or_copy(smk.input.onnx, tmp / "onnx" / "model.onnx")
            check_export(tmp)
        r.log_artifact(out / "README.md")
        r.set_tags({"cselab.export": str(out)})


def _link_or_copy(src, dst) -> None:
    """A hard link where the filesystem allows one (weights are not stored twice), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def push(smk) -> None:
    """``results/hub/<exp>.json``: the export folder uploaded to ``hub.repo_id``; the receipt
    (repository, commit, files; never the token)."""
    from cselab.export.hub import hub_settings, push_export

    exp = smk.wildcards.exp
    settings = hub_settings(smk.params.hub)  # no repo id or token: one message, nothing uploaded
    with run(smk, experiment_id=exp, params={"hub": settings.logged()}) as r:
        receipt = push_export(Path(smk.input.export), settings, exp)
        write_json(smk.output[0], receipt)
        r.set_tags({"cselab.hub_repo": receipt["repo_id"], "cselab.hub_commit": receipt.get("commit_oid") or ""})
        r.log_artifact(smk.output[0])


def push_sweep(smk) -> None:
    """``results/hub/sweeps/<s>.json``: sweep ``s``'s winner pushed, seed by seed (rule push
    wrote each receipt, the input); this receipt names the winner and holds theirs."""
    winner = smk.params.winner
    receipts = {Path(f).stem: json.loads(Path(f).read_text()) for f in smk.input.receipts}
    write_json(smk.output[0], {"sweep": smk.wildcards.sweep, "experiment": winner["experiment"],
                               "mean": winner["mean"], "receipts": receipts})
    log.info("sweep %s: winner %s pushed (%s)", smk.wildcards.sweep, winner["experiment"],
             ", ".join(r.get("repo_id", "?") for r in receipts.values()))


#: sharing rule -> its job
EXPORT_JOBS = {"mteb_results": mteb_results, "mteb_check": mteb_check, "model_card": model_card,
               "export_onnx": export_onnx, "export_model": export_model, "push": push, "push_sweep": push_sweep}
