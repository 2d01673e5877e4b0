"""Planning stays light: ``snakemake -n`` on the paper config (and the smoke config) imports no
torch, scipy, matplotlib or transformers. The workflow reads the methods (the modules of
cselab/training/methods, whose training code imports torch when it runs), the figure kinds and
the table columns without them; the training, evaluation and figure jobs import them when they
run. And what the plan reads of a method is what its job trains with."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import read_yaml

ROOT = Path(__file__).resolve().parents[1]
#: packages a plan must not import (top-level names)
HEAVY = ("torch", "scipy", "matplotlib", "transformers", "sentence_transformers", "sklearn", "umap", "triton")

#: Snakemake's command line run in this interpreter behind a finder that records every import of
#: a HEAVY package (whether it then succeeds or not) with the project lines that asked for it;
#: writes those, the exit code and the HEAVY modules in sys.modules at the end as JSON.
PLAN = r"""
import json, sys, traceback
heavy, out, args = set(sys.argv[1].split(",")), sys.argv[2], sys.argv[3:]
asked = []

class Recorder:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in heavy:
            ours = [f"{f.filename}:{f.lineno}" for f in traceback.extract_stack()
                    if "/cselab/" in f.filename or f.filename.endswith((".smk", "Snakefile"))]
            asked.append({"module": name, "asked_by": ours[-3:]})
        return None

sys.meta_path.insert(0, Recorder())
from snakemake.cli import main
try:
    main(args)
    code = 0
except SystemExit as e:
    code = e.code
loaded = sorted(m for m in sys.modules if m.split(".")[0] in heavy)
with open(out, "w") as fh:
    json.dump({"code": code, "asked": asked, "loaded": loaded}, fh)
"""


def plan(workdir: Path, configfiles: list[str]) -> tuple[dict, subprocess.CompletedProcess]:
    """The recorded imports of ``snakemake -n`` (every job of ``all``, from nothing) in ``workdir``."""
    out = workdir / "imports.json"
    args = ["-s", str(ROOT / "Snakefile"), "--directory", str(workdir), "-n", "--cores", "8", "--quiet", "rules",
            *(["--configfile", *(str(ROOT / f) for f in configfiles)] if configfiles else [])]
    proc = subprocess.run([sys.executable, "-c", PLAN, ",".join(HEAVY), str(out), *args],
                          capture_output=True, text=True, timeout=600)
    assert out.is_file(), proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(out.read_text()), proc


@pytest.mark.parametrize("configfiles", [[], ["configs/smoke.yaml"]], ids=["paper", "smoke"])
def test_planning_imports_no_torch(tmp_path, configfiles):
    got, proc = plan(tmp_path, configfiles)
    assert got["code"] == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "train" in proc.stdout and "total" in proc.stdout  # it planned the experiments
    packages = sorted({m.split(".")[0] for m in got["loaded"] + [a["module"] for a in got["asked"]]})
    assert not packages, (f"the plan imported {packages}; first asked by {got['asked'][:2]}: import it inside "
                          "the function that needs it")


def test_each_method_trains_with_what_the_plan_reads():
    """The module a job trains with is the method's class with ``Method`` behind it, which
    overrides none of what the plan reads: the options the plan checks, the settings and
    artifacts it links are the ones training uses."""
    from cselab.training import method_config as mc
    from cselab.training.methods import registry
    from cselab.training.objective import Method, method_class

    surface = {name for name in vars(mc.MethodConfig) if not name.startswith("__")}
    declared = {name for name, cls in registry().items() if not issubclass(cls, Method)}
    assert shipped_methods() <= declared  # every method the shipped configs train plans from its class, torch-free
    for name in declared:
        impl = method_class(name)
        assert issubclass(impl, registry()[name]) and issubclass(impl, Method), name
        overridden = [f"{k.__name__}.{attr}" for k in impl.__mro__ if issubclass(k, Method)
                      for attr in surface & set(vars(k))]
        assert not overridden, f"{name}: declare {overridden} in the method's class"


def test_the_methods_folder_is_scanned_without_torch():
    """Every module of cselab/training/methods imports without torch (the plan scans the folder):
    in a fresh interpreter that records every import, the registry lists each method."""
    code = ("import sys, json; from cselab.training.methods import registry; names = sorted(registry()); "
            f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}); "
            "print(json.dumps([names, heavy]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names, heavy = json.loads(proc.stdout)
    assert {"simcse", "compcse", "rtd", "cmlm", "corrective_lm", "simcse_edits", "infocse_pretrain", "infocse_mlm",
            "paradigm"} <= set(names)
    assert not heavy, heavy


def shipped_methods() -> set[str]:
    """Every method the shipped configs train: each ``methods:`` entry's objective and auxiliaries,
    each pretraining stage's method, each experiment's auxiliaries."""
    from cselab.pipeline.config import validate
    from tests.test_config import deep_update

    paper = read_yaml(ROOT / "config.yaml")
    smoke = deep_update(paper, read_yaml(ROOT / "configs" / "smoke.yaml"))
    names = set()
    for cfg in (validate(paper), validate(smoke)):
        names |= {stage["method"] for stage in cfg.get("pretraining", {}).values()}
        for entry in [*cfg["methods"].values(), *cfg["experiments"].values()]:
            names |= {entry["objective"]} if "objective" in entry else set()
            names |= set(entry.get("auxiliaries") or {})
    assert {"simcse", "simcse_edits", "infocse_pretrain", "rtd"} <= names  # the configs were read
    return names


def test_checked_options_are_each_callers_own():
    from cselab.training.methods.paradigm import Paradigm

    first = Paradigm.check_options({"loss": "mhe"})
    first.m = 0.9
    again = Paradigm.check_options({"loss": "mhe"})
    assert again.m == 0.3 and again.gd is False and again is not first
