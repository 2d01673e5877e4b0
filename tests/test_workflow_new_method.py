"""The method contract end to end: a new method is one module dropped into
cselab/training/methods/ plus config entries, and nothing else; so is a new figure kind (one
module in cselab/reporting/figures/ plus its config entry). The modules are dropped into a
private copy of the checkout, which the test's Snakemake runs from: the other test worker,
planning from this checkout at the same time, never scans them.

The toy method has its own head (with its own learning rate), a frozen extra network loaded
from a declared upstream artifact, and that artifact is a pretraining stage of the same module.
Snakemake plans the stage before the training (the rule dependency comes from the declaration),
a crash after the first checkpoint shows what the resumable state holds (not the frozen net;
the optimizer not its parameters), and a rerun resumes and finishes the table.
"""

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from tests.built import PREPARED_DATA, prepared_project
from tests.helpers import private_checkout, read_yaml
from tests.test_workflow import ROOT
from tests.test_workflow import snakemake as snakemake_in

METHODS_DIR = Path("cselab") / "training" / "methods"
MODULE = "toy_contract_test.py"
FIGURES_DIR = Path("cselab") / "reporting" / "figures"
FIGURE_MODULE = "toy_figure_test.py"

TOY_FIGURE = '''"""A toy figure kind for the contract test (written and removed by the test)."""

import pandas as pd
from matplotlib.figure import Figure

from cselab.reporting.figures import save_figure
from cselab.reporting.kinds import figure_kind
from cselab.settings.base import setting, settings


@settings
class ToyLossOptions:
    scale: float = setting(1.0, doc="the factor the loss is drawn times", exclusiveMinimum=0)


@figure_kind("toy_loss", reads="curve", trained=True, options=ToyLossOptions)
def draw_toy_loss(inputs, options: ToyLossOptions, out):
    rows = [pd.DataFrame({"label": label, "step": curve["step"], "scaled_loss": options.scale * curve["loss"]})
            for label, curve in inputs.curves().items()]
    df = pd.concat(rows).dropna()
    fig = Figure(figsize=(4, 3))
    ax = fig.add_subplot()
    for label, part in df.groupby("label"):
        ax.plot(part["step"], part["scaled_loss"], label=label)
    return save_figure(fig, df, out.png, out.csv)
'''

TOY = '''"""A toy method for the contract test (the file is written and removed by the test). Like
every module of the folder it imports no torch at its top: the plan scans it."""

import dataclasses
import os
import signal

from cselab.models.heads import make_head
from cselab.training.methods import MethodConfig, Output


class ToyTeacher(MethodConfig):
    """Pretraining stage: fits a linear probe on the encoder's [CLS] to the sentence length."""

    name = "toy_teacher"

    def __init__(self, ctx):
        from torch import nn

        super().__init__(ctx)
        self.probe = nn.Linear(ctx.hidden_size, 1)

    def forward(self, batch, shared):
        pooled = self.ctx.encoder(batch["input_ids"], batch["attention_mask"])
        target = batch["attention_mask"].sum(1, keepdim=True).float() / 10
        return Output({"length": (self.probe(pooled) - target).pow(2).mean()})

    def export(self, out_dir):
        import torch

        out_dir.mkdir(parents=True, exist_ok=True)
        torch.save(self.probe.state_dict(), out_dir / "probe.pt")


class Toy(MethodConfig):
    """SimCSE views through a linear head, plus agreement of a frozen teacher probe."""

    name = "toy"

    @dataclasses.dataclass
    class Options:
        teacher: str = "toy-teacher"
        head_lr_scale: float = 10.0

    @classmethod
    def requires(cls, options):
        return {"teacher": options.teacher}

    def __init__(self, ctx):
        import torch
        from torch import nn

        super().__init__(ctx)
        self.head = make_head("linear", ctx.hidden_size, ctx.encoder.initializer_range)
        probe = nn.Linear(ctx.hidden_size, 1)
        probe.load_state_dict(torch.load(ctx.artifacts["teacher"] / "probe.pt"))
        self.teacher = self.freeze("teacher", probe)
        self.calls = 0

    def param_groups(self, lr):
        return [{"params": list(self.head.parameters()), "lr": lr * self.options.head_lr_scale}]

    def forward(self, batch, shared):
        from cselab.training.losses import info_nce

        self.calls += 1
        if self.calls == int(os.environ.get("TOY_KILL_AT_CALL", "0")):
            os.kill(os.getpid(), signal.SIGKILL)  # a hard kill: no exception handler, no MLflow cleanup
        n = batch["input_ids"].size(0)
        pooled = self.ctx.encoder(batch["input_ids"].repeat(2, 1), batch["attention_mask"].repeat(2, 1))
        z = self.head(pooled)
        t = self.teacher(pooled)
        return Output({"contrastive": info_nce(z[:n], z[n:], 0.05), "teacher": (t[:n] - t[n:]).pow(2).mean()},
                      {"teacher_mean": t.mean()})
'''


@pytest.fixture
def checkout(tmp_path_factory):
    """A private copy of the checkout with the toy method and the toy figure kind dropped in."""
    root = private_checkout(tmp_path_factory.mktemp("checkout"))
    (root / METHODS_DIR / MODULE).write_text(TOY)
    (root / FIGURES_DIR / FIGURE_MODULE).write_text(TOY_FIGURE)
    return root


def train_runs(workdir: Path) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{workdir}/results/mlflow.db")
    exp = client.get_experiment_by_name("cselab-toy")
    return client.search_runs([exp.experiment_id], "tags.rule = 'train'")


def write_config(workdir: Path) -> None:
    cfg = {
        **PREPARED_DATA,
        "mlflow": {"experiment_name": "cselab-toy"},
        "seeds": [42],
        "training": {"batch_size": 16, "max_len": 32, "max_steps": 6, "lr": 1e-4, "eval_steps": 3, "log_steps": 2,
                     "checkpoint_steps": 2, "precision": "fp32"},
        "methods": {"toy": {"objective": "toy", "auxiliaries": {}}},
        "pretraining": {"toy-teacher": {"method": "toy_teacher", "training": {"max_steps": 4, "eval_steps": None}}},
        "experiments": {"toy-tiny": {"plm": "tiny", "method": "toy"}},
        "tables": {"toy_table": {"kind": "stsb_dev", "experiments": ["toy-tiny"]}},
        "figures": {"toy_fig": {"kind": "toy_loss", "scale": 2.0, "experiments": {"toy": "toy-tiny"}}},
    }
    (workdir / "test.yaml").write_text(yaml.safe_dump(cfg))


def test_a_new_method_is_one_module_and_config(checkout, tmp_path_factory, tmp_path):
    def snakemake(*args, **kwargs):
        return snakemake_in(*args, root=checkout, **kwargs)

    workdir = prepared_project(tmp_path_factory, tmp_path)
    write_config(workdir)

    plan = snakemake(workdir, "-n", "results/toy_table.csv").stdout
    assert "rule pretrain:" in plan and "stage=toy-teacher" in plan and "plm=tiny" in plan
    assert "resources/pretrained/toy-teacher/tiny/model" in plan
    assert plan.index("rule pretrain:") < plan.index("rule train:")

    # First run: killed (SIGKILL) at the third step of the training job, after the checkpoint of step 2.
    crash = snakemake(workdir, "--cores", "1", "results/toy_table.csv", check=False,
                      env={"TOY_KILL_AT_CALL": "3"})
    log = workdir / "logs/train/toy-tiny-s42.log"
    assert crash.returncode != 0 and log.is_file(), crash.stderr[-3000:]
    (killed,) = train_runs(workdir)
    assert killed.info.status == "RUNNING"  # nothing could close it
    probe = torch.load(workdir / "resources/pretrained/toy-teacher/tiny/model/probe.pt")
    assert set(probe) == {"weight", "bias"}
    (ckpt,) = (workdir / "results/experiments/toy-tiny-s42/resume").glob("step-*")
    state = torch.load(ckpt / "state.pt", weights_only=False)
    assert set(state["objective"]) == {"components.0.head.weight", "components.0.head.bias"}  # no teacher
    groups = state["optimizer"]["param_groups"]
    encoder_tensors = len(state["encoder"])
    assert [len(g["params"]) for g in groups] == [encoder_tensors, 2]  # encoder, head: not the teacher
    assert groups[1]["initial_lr"] == pytest.approx(10 * groups[0]["initial_lr"])

    # Rerun: resumes from step 2, builds the table; the pretraining stage is not repeated.
    done = snakemake(workdir, "--cores", "1", "results/toy_table.csv")
    started = [x.split("] start  ")[1] for x in done.stderr.splitlines() if "] start  " in x]
    assert "train exp=toy-tiny-s42" in started and not any(x.startswith("pretrain ") for x in started), started
    summary = json.loads((workdir / "results/experiments/toy-tiny-s42/train_summary.json").read_text())
    assert summary["resumed_from_step"] == 2 and summary["steps"] == 6
    (resumed,) = train_runs(workdir)  # the killed job's own run, continued: not a second one
    assert resumed.info.run_id == killed.info.run_id == summary["mlflow_run_id"]
    assert resumed.info.status == "FINISHED" and resumed.data.tags["cselab.resumed"] == "1"
    assert resumed.data.metrics["resumed_from_step"] == 2
    assert not (workdir / "results/experiments/toy-tiny-s42/mlflow_run.json").exists()
    curve = pd.read_csv(workdir / "results/experiments/toy-tiny-s42/curve.csv")
    assert {"loss.contrastive", "loss.teacher", "teacher_mean"} <= set(curve.columns)
    table = pd.read_csv(workdir / "results/toy_table.csv")
    assert list(table["experiment"]) == ["toy-tiny"] and table["STS-B dev"].notna().all()
    stage = json.loads((workdir / "resources/pretrained/toy-teacher/tiny/model/manifest.json").read_text())
    assert stage["stage"] == "toy-teacher" and stage["spec"]["objective"] == "toy_teacher"

    # the new figure kind: its module and its config entry, nothing else; its options checked against it
    snakemake(workdir, "--cores", "1", "results/toy_fig.png")
    drawn = pd.read_csv(workdir / "results/toy_fig.csv")
    assert list(drawn["step"]) == list(curve.dropna(subset=["loss"])["step"])
    assert drawn["scaled_loss"].tolist() == pytest.approx((2 * curve.dropna(subset=["loss"])["loss"]).tolist())
    cfg = read_yaml(workdir / "test.yaml")
    cfg["figures"]["toy_fig"]["scal"] = 3.0
    (workdir / "test.yaml").write_text(yaml.safe_dump(cfg))
    proc = snakemake(workdir, "-n", "results/toy_fig.png", check=False)
    assert proc.returncode != 0 and "unknown config key 'figures.toy_fig.scal' (did you mean 'scale'?)" in proc.stdout + proc.stderr

    copied = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True).stdout.split()
    assert all((checkout / name).read_bytes() == (ROOT / name).read_bytes()
               for name in copied if (ROOT / name).is_file())  # no other file of the checkout touched
