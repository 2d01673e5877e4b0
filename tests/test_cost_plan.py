"""The cost plan (results/cost_plan.csv / .md): job counts from Snakemake's own dry run, priced
from the rates tables; a changed rate changes the plan, a missing one is one clear message, and
the target builds through Snakemake on the smoke config without torch."""

import csv
import dataclasses
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from cselab.errors import ConfigError, CselabError
from cselab.pipeline import config as cselab_config
from cselab.pipeline import cost
from cselab.reporting import cost as rc
from cselab.settings import to_plain, training_settings, typed_config
from tests.helpers import read_yaml

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
CONFIGS = {"smoke": ["configs/smoke.yaml"], "paper": []}


def merged(*files: str) -> dict:
    """config.yaml with ``files`` merged over it, as Snakemake merges --configfile."""
    def merge(a: dict, b: dict) -> None:
        for k, v in b.items():
            if isinstance(v, dict) and isinstance(a.get(k), dict):
                merge(a[k], v)
            else:
                a[k] = v

    out: dict = {}
    for f in ("config.yaml", *files):
        merge(out, read_yaml(ROOT / f))
    return out


def quiet_counts(workdir: Path, files: list[str]) -> dict[str, int]:
    """Snakemake's own per-rule job counts: ``snakemake -n --forceall --quiet rules``."""
    cmd = [*SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
           *(["--configfile", *(str(ROOT / f) for f in files)] if files else []),
           "-n", "--forceall", "--cores", "64", "--quiet", "rules", "--", "all"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return cost.job_stats(proc.stdout)


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def planned(request, tmp_path_factory):
    """(config name, validated config, the dry run's jobs, Snakemake's own counts) of a config."""
    workdir = tmp_path_factory.mktemp(request.param)
    raw = merged(*CONFIGS[request.param])
    jobs = cost.dry_run(SNAKEMAKE, str(ROOT / "Snakefile"), raw, ["all"], 64, workdir=workdir)
    return request.param, cselab_config.validate(raw), jobs, quiet_counts(workdir, CONFIGS[request.param])


def test_counts_equal_snakemakes(planned):
    name, cfg, jobs, counts = planned
    assert Counter(j.rule for j in jobs) == counts
    assert counts["train"] > 0 and counts["evaluate_sts"] > 0
    node = {"gpus": 8, "cores": 64, "mem_gb": 1024}
    book = rc.load_rates(rc.rates_file("h100" if name == "paper" else "cpu-2core"))
    rows, meta = cost.plan(cfg, jobs, book, node)
    assert {r["rule"]: r["jobs"] for r in rows[:-1]} == counts
    assert rows[-1]["rule"] == "TOTAL" and rows[-1]["jobs"] == sum(counts.values())
    assert 0 < meta["critical_hours"] <= meta["wall_hours"] <= rows[-1]["job_hours"] + 1e-9


def test_the_plan_is_the_same_in_whatever_order_snakemake_printed_the_jobs(planned):
    """Snakemake's dry run lists jobs in an order that varies between invocations; the plan
    (each rule's row, its place and its node hours) does not."""
    import random

    name, cfg, jobs, _ = planned
    book = rc.load_rates(rc.rates_file("h100" if name == "paper" else "cpu-2core"))
    node = cost.node_of(book, typed_config(cfg).cost_plan)
    reference = cost.plan(cfg, jobs, book, node)[0]
    for seed in (1, 2):
        shuffled = list(jobs)
        random.Random(seed).shuffle(shuffled)
        assert cost.plan(cfg, shuffled, book, node)[0] == reference


def test_an_h100_plan_prices_every_rule_with_its_basis(planned):
    name, cfg, jobs, _ = planned
    book = rc.load_rates(rc.rates_file("h100"))
    rows, meta = cost.plan(cfg, jobs, book, cost.node_of(book, typed_config(cfg).cost_plan))
    by_rule = {r["rule"]: r for r in rows}
    assert by_rule["train"]["gpu_hours"] > 0 and by_rule["table"]["gpu_hours"] == 0
    assert "estimated: " in by_rule["train"]["basis"] and "train_sentences_per_s[bert-base-uncased]" in \
        by_rule["train"]["basis"]
    assert by_rule["all"]["basis"] == "no work" and by_rule["all"]["job_hours"] == 0
    total = by_rule["TOTAL"]
    assert total["gpu_hours"] > 0 and total["disk_gb"] > 0
    assert meta["wall_hours"] >= total["gpu_hours"] / 8 - 1e-6  # 8 GPUs bound the wall time from below


def test_a_changed_rate_changes_the_plan(planned, tmp_path):
    _, cfg, jobs, _ = planned
    node = {"gpus": 0, "cores": 2, "mem_gb": 23}
    base = rc.rates_file("cpu-2core")
    faster = tmp_path / "faster.csv"
    with open(base, newline="") as src, open(faster, "w", newline="") as dst:  # every training rate doubled
        lines = [line for line in src if not line.startswith("#")]
        reader = csv.DictReader(lines)
        writer = csv.DictWriter(dst, fieldnames=reader.fieldnames)
        writer.writeheader()
        for row in reader:
            if row["quantity"] == "train_sentences_per_s":
                row["value"] = str(2 * float(row["value"]))
            writer.writerow(row)
    before = {r["rule"]: r for r in cost.plan(cfg, jobs, rc.load_rates(base), node)[0]}
    after = {r["rule"]: r for r in cost.plan(cfg, jobs, rc.load_rates(faster), node)[0]}
    assert after["train"]["job_hours"] < before["train"]["job_hours"]
    assert after["evaluate_sts"]["job_hours"] == before["evaluate_sts"]["job_hours"]
    assert after["TOTAL"]["node_end_h"] < before["TOTAL"]["node_end_h"]


def test_a_missing_rate_is_one_message_naming_the_rule_and_the_file(planned, tmp_path):
    _, cfg, jobs, _ = planned
    lines = rc.rates_file("cpu-2core").read_text().splitlines()
    gone = tmp_path / "gone.csv"
    gone.write_text("\n".join(line for line in lines
                              if not line.startswith(("segment_lines_per_s,", "job_s:table,"))) + "\n")
    with pytest.raises(ConfigError) as err:
        cost.plan(cfg, jobs, rc.load_rates(gone), {"gpus": 0, "cores": 2, "mem_gb": 23})
    message = str(err.value)
    assert str(gone) in message
    assert "rule table: job_s:table" in message
    assert ("rule segment_shard: segment_lines_per_s" in message
            or "rule segment_corpus: segment_lines_per_s" in message)


def test_an_unknown_rule_needs_its_job_s_row(tmp_path):
    cfg = cselab_config.validate(merged("configs/smoke.yaml"))
    job = cost.DryJob("brand_new_rule", outputs=["results/x.txt"])
    with pytest.raises(ConfigError, match=r"rule brand_new_rule: job_s:brand_new_rule"):
        cost.plan(cfg, [job], rc.load_rates(rc.rates_file("cpu-2core")), {"gpus": 0, "cores": 2, "mem_gb": 23})


def test_the_target_builds_through_snakemake_without_torch(tmp_path):
    cmd = [*SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--cores", "2",
           "results/cost_plan.csv", "--configfile", str(ROOT / "configs" / "smoke.yaml")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(tmp_path / "results" / "cost_plan.csv", newline="") as fh:
        rows = {r["rule"]: r for r in csv.DictReader(fh)}
    counts = quiet_counts(tmp_path, CONFIGS["smoke"])
    assert {rule: int(r["jobs"]) for rule, r in rows.items() if rule != "TOTAL"} == counts
    assert float(rows["TOTAL"]["gpu_hours"]) == 0  # cpu-2core: no GPU
    md = (tmp_path / "results" / "cost_plan.md").read_text()
    assert "on cpu-2core" in md and "Rates used" in md and "train_sentences_per_s" in md
    assert "torch not imported" in (tmp_path / "logs" / "cost_plan.log").read_text()


def test_parse_dry_run_reads_every_field_and_checks_the_counts():
    text = """Building DAG of jobs...
Job stats:
job          count
---------  -------
train            1
all              1
total            2

[Thu Nov 26 00:31:25 2026]
rule train:
    input: resources/corpus/corpus.txt, resources/plms/bert-base.json
    output: results/experiments/simcse-bert-base-s42/model, results/experiments/simcse-bert-base-s42/curve.csv
    jobid: 3
    wildcards: exp=simcse-bert-base-s42
    threads: 8
    resources: tmpdir=/tmp, runtime=1440, gpu=1, nodes=1, mem_mb=32000, mem=32 GB
[Thu Nov 26 00:31:25 2026]
localrule all:
    input: results/experiments/simcse-bert-base-s42/model
    jobid: 0
"""
    jobs = cost.parse_dry_run(text)
    assert [j.rule for j in jobs] == ["train", "all"]
    train = jobs[0]
    assert train.wildcards == {"exp": "simcse-bert-base-s42"} and train.threads == 8
    assert train.resources["gpu"] == "1" and train.resources["mem_mb"] == "32000"
    assert train.outputs[0] == "results/experiments/simcse-bert-base-s42/model" and len(train.inputs) == 2
    with pytest.raises(CselabError, match="disagree with its job stats"):
        cost.parse_dry_run(text.replace("train            1", "train            2"))


def test_schedule_respects_gpus_cores_and_dependencies():
    gpu_jobs = [rc.JobCost("train", str(i), 3600, threads=8, gpus=1) for i in range(16)]
    after = rc.JobCost("table", "t", 60, threads=1, deps=list(range(16)))
    starts, ends, critical = rc.schedule([*gpu_jobs, after], {"gpus": 8, "cores": 64, "mem_gb": 1024})
    assert max(ends[:16]) == 7200 and starts[16] == 7200 and ends[16] == 7260
    assert critical == 3660
    # on a 2-core CPU node the same jobs take their threads (capped at 2) and no GPU
    starts, ends, _ = rc.schedule([*gpu_jobs, after], {"gpus": 0, "cores": 2, "mem_gb": 23})
    assert ends[16] == 16 * 3600 + 60


def test_training_settings_match_the_config_merge():
    """The torch-free merge of the plan equals the config's own (the training loop's settings)."""
    for files in CONFIGS.values():
        cfg = cselab_config.validate(merged(*files))
        sizes = cost.Sizes(cfg)
        for name, exp in cfg["experiments"].items():
            if exp["method"] == cselab_config.UNTRAINED:
                continue
            spec = cselab_config.merge_experiment(cfg, name)
            mine = sizes.experiment(cselab_config.experiment_ids(cfg, [name])[0])
            assert to_plain(mine.training) == spec["training"], name
            assert mine.auxiliaries == sorted(spec["auxiliaries"]), name
            assert mine.components == [spec["objective"]], name


def test_training_steps_follow_the_loop():
    t = training_settings({"batch_size": 64, "epochs": 1, "max_steps": None, "stop_at": None})
    assert cost.training_steps(1_000_000, t) == 15_625
    assert cost.training_steps(1_000_001, t) == 15_625  # a last batch of 1 is dropped
    assert cost.training_steps(1_000_002, t) == 15_626
    assert cost.training_steps(1600, dataclasses.replace(t, batch_size=32, max_steps=50, epochs=6)) == 50
    assert cost.training_steps(1_000_000, dataclasses.replace(t, stop_at=1000)) == 1000


def test_rates_tables_are_well_formed():
    for path in sorted(rc.RATES_DIR.glob("*.csv")):
        book = rc.load_rates(path)
        node = book.node()
        assert node["cores"] >= 1 and node["mem_gb"] > 0, path
        for rows in book.rows.values():
            for rate in rows:
                assert rate.basis in rc.BASES and rate.date, (path, rate.label)
                assert rate.note or rate.command, (path, rate.label)
    assert {"h100", "cpu-2core"} <= {p.stem for p in rc.RATES_DIR.glob("*.csv")}


def test_model_shapes_count_parameters():
    assert round(rc.KNOWN_SHAPES["bert-base-uncased"].parameters / 1e6, 1) == 109.5
    assert round(rc.KNOWN_SHAPES["bert-large-uncased"].parameters / 1e6) == 335
    assert round(rc.KNOWN_SHAPES["all-MiniLM-L6-v2"].parameters / 1e6, 1) == 22.7
    with pytest.raises(ConfigError, match="unknown"):
        rc.model_shape("no-such-model")
