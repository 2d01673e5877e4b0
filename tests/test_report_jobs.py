"""The leakage audit's and the seed planner's jobs (cselab/pipeline/jobs/report.py) in-process:
what each writes, the metrics its MLflow run gets and the artifacts it logs, from the params and
inputs its rule gives it (their rules' planning is tests/test_rerun_precision.py's)."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from cselab.pipeline.jobs import report
from cselab.reporting.stats import save_pairs
from tests.helpers import make_corpus, make_senteval, make_transfer


class FakeRun:
    """What a job hands its MLflow run."""

    def __init__(self, **kwargs):
        self.kwargs, self.metrics, self.artifacts = kwargs, {}, []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def log_metrics(self, metrics):
        self.metrics.update(metrics)

    def log_artifact(self, path):
        self.artifacts.append(str(path))


@pytest.fixture
def runs(monkeypatch):
    made = []

    def fake_run(smk, **kwargs):
        made.append(FakeRun(**kwargs))
        return made[-1]

    monkeypatch.setattr(report, "run", fake_run)
    return made


def test_leakage_audit_job_writes_its_table_and_the_largest_shares(tmp_path, runs, monkeypatch):
    root = tmp_path / "senteval"
    make_senteval(root, n_extra=20)
    make_transfer(root)
    monkeypatch.setattr(report, "verify_senteval_inputs", lambda inputs: root)
    clean = make_corpus(tmp_path / "clean.txt", 60, seed=3)
    leaky = tmp_path / "leaky.txt"
    mr = (root / "MR" / "rt-polarity.pos").read_text(encoding="latin-1").splitlines()[0]
    leaky.write_text(clean.read_text() + mr + "\n")
    smk = SimpleNamespace(params=SimpleNamespace(corpora={"clean": str(clean), "leaky": str(leaky)}, ngram=8, beir={}),
                          input=SimpleNamespace(senteval="resources/senteval/manifest.json"),
                          output=SimpleNamespace(csv=str(tmp_path / "t.csv"), md=str(tmp_path / "t.md")))
    report.leakage_audit(smk)
    (r,) = runs
    assert r.kwargs["label"] == "table_leakage" and r.kwargs["params"]["ngram"] == 8
    table = pd.read_csv(tmp_path / "t.csv")
    assert set(table["corpus"]) == {"clean", "leaky"}
    assert r.metrics["leaky.max_exact_pct"] > 0 and r.metrics["leaky.max_exact_pct"] >= r.metrics["clean.max_exact_pct"]
    assert r.metrics["leaky.max_exact_pct"] == pytest.approx(table[table["corpus"] == "leaky"]["exact_pct"].max())
    assert r.artifacts == [str(tmp_path / "t.csv"), str(tmp_path / "t.md")]


def test_seed_power_job_plans_from_the_runs_result_files(tmp_path, runs):
    rng = np.random.default_rng(0)
    gold = rng.normal(size=200)
    files = {}
    for name, shift in (("simcse", 0.0), ("comp", 0.2)):
        files[name] = {"STS avg": []}
        for seed in range(3):
            path = tmp_path / f"{name}-s{seed}.npz"
            save_pairs(path, {"STS12": (gold, gold + shift + rng.normal(scale=0.8 + 0.1 * seed, size=200))})
            files[name]["STS avg"].append(str(path))
    options = {"table": "table_methods", "baseline": None, "metrics": ["STS avg"], "max_seeds": 5,
               "differences": [0.5, 1.0], "power": 0.8}
    out = {k: str(tmp_path / f"seed_power.{k}") for k in ("csv", "md", "png")}
    smk = SimpleNamespace(params=SimpleNamespace(options=options, bootstrap={"n_boot": 100, "seed": 1},
                                                 baseline="simcse", inputs=files),
                          output=SimpleNamespace(**out))
    report.seed_power(smk)
    (r,) = runs
    assert r.kwargs["label"] == "seed_power" and r.kwargs["params"]["baseline"] == "simcse"
    rows = pd.read_csv(out["csv"])
    assert list(rows["experiment"]) == ["simcse", "comp"] and set(rows["metric"]) == {"STS avg"}
    for name in ("simcse", "comp"):
        assert r.metrics[f"{name}.STS avg.seed_std"] > 0 and r.metrics[f"{name}.STS avg.mde_3"] > 0
    assert r.artifacts == [out["csv"], out["md"], out["png"]]
