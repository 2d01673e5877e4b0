"""What an invocation reads of its command line (cselab.pipeline.invocation), the resources a
training job asks for, and the progress lines a long job writes (cselab.io.Progress)."""

from __future__ import annotations

import logging

import pytest

from cselab.io import Progress
from cselab.pipeline import invocation as inv
from tests.test_config import default, smoke  # noqa: F401 (fixtures: the shipped configs)


@pytest.mark.parametrize("args, dry, no_jobs, forced", [
    (["-n", "results/table1.csv"], True, False, False),
    (["-pn", "results/table1.csv"], True, False, False),
    (["--cores", "2", "results/table1.csv"], False, False, False),
    (["--unlock"], False, True, False),
    (["--touch", "--cores", "1"], False, True, False),
    (["--forcerun", "prepare_corpus"], False, False, True),
    (["-F"], False, False, True),
])
def test_the_command_line_says_what_the_invocation_does(args, dry, no_jobs, forced):
    run = inv.Invocation.of(args, main=True)
    assert (run.dry_run, run.no_jobs, run.forced_corpus) == (dry, no_jobs, forced)
    assert run.executing == (not dry and not no_jobs)
    assert not inv.Invocation.of(args, main=False).executing  # a cluster job re-reading the Snakefile


def test_training_asks_for_gpus_on_a_cluster_or_a_gpu_machine(monkeypatch):
    monkeypatch.delenv("SNAKEMAKE_PROFILE", raising=False)
    monkeypatch.delenv(inv.GPUS_ENV, raising=False)
    monkeypatch.setattr("glob.glob", lambda pattern: [])  # no /dev/nvidia*
    assert not inv.asks_for_gpus(["--cores", "2", "results/table1.csv"])
    for args in (["--profile", "profiles/slurm"], ["--executor", "slurm"], ["-e", "slurm"],
                 ["--workflow-profile=profiles/x"]):
        assert inv.asks_for_gpus(args), args
    monkeypatch.setenv(inv.GPUS_ENV, "1")  # the cost plan prices GPU nodes from anywhere
    assert inv.asks_for_gpus(["--cores", "2"])
    monkeypatch.delenv(inv.GPUS_ENV)
    monkeypatch.setattr("glob.glob", lambda pattern: ["/dev/nvidia0"])
    assert inv.asks_for_gpus(["--cores", "8"])


def test_a_training_jobs_memory_follows_its_model_and_batch(smoke, default):
    from cselab.pipeline import experiments as E
    from cselab.pipeline.config import validate

    smoke_cfg, paper = validate(smoke), validate(default)
    minilm = E.training_mem_mb(E.typed_spec(smoke_cfg, "simcse-minilm-s42"))
    base = E.training_mem_mb(E.typed_spec(paper, "simcse-bert-base-s42"))
    large = E.training_mem_mb(E.typed_spec(paper, "simcse-bert-large-s42"))
    assert 3000 < minilm < base < large < 32000
    assert E.training_mem_mb(E.typed_spec(paper, "simcse-bert-base-s42"), processes=4) > 3 * base
    unknown = dict(E.experiment_spec(paper, "simcse-bert-base-s42"), model="/no/such/model")
    assert E.training_mem_mb(unknown) == 32000


def test_progress_lines_say_where_a_loop_stands(caplog, monkeypatch):
    clock = iter([0.0, 10.0, 40.0, 50.0, 100.0])
    monkeypatch.setattr("time.monotonic", lambda: next(clock))
    with caplog.at_level(logging.INFO, logger="progress-test"):
        p = Progress(logging.getLogger("progress-test"), "training x", 100, "steps")  # t = 0 (start, last)
        p.update(10)  # t = 10: under 30 s since the last line, nothing
        p.update(40)  # t = 40: a line
        p.update(45)  # t = 50: nothing
        p.close()  # t = 100
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "training x: 0 of 100 steps (0%), 0.0 steps/s, 0:00 elapsed, ETA unknown"
    assert lines[1] == "training x: 40 of 100 steps (40%), 1.0 steps/s, 0:40 elapsed, ETA 1:00"
    assert lines[2] == "training x: 45 of 100 steps (45%), 0.5 steps/s, 1:40 elapsed, done"
    assert len(lines) == 3


def test_a_job_reads_its_operational_settings_from_the_config_its_plan_was_made_of(smoke):
    """Snakemake's config, as a job receives it, is the validated config (a sweep's points and a
    methods table's experiments included) beside the config as given (the cost plan's): a job's
    operational settings come from the one merge its spec was made with."""
    from types import SimpleNamespace

    from cselab.pipeline import experiments as E
    from cselab.pipeline.config import validate
    from cselab.pipeline.operations import GIVEN, operations

    smoke["training"]["checkpoint_steps"] = 7
    smoke["methods"]["simcse"]["training"] = {"log_steps": 3}
    config = dict(smoke)
    cfg = validate(config)
    inv.hand_to_jobs(config, cfg)
    assert config[GIVEN] == smoke and {k: v for k, v in config.items() if k != GIVEN} == cfg
    point = next(e for e in cfg["experiments"] if "@" in e and cfg["experiments"][e]["method"] == "simcse")
    assert point not in smoke["experiments"]  # a sweep's point: only the validated config has it
    smk = SimpleNamespace(config=config)
    for exp in (f"{point}-s42", "simcse-minilm-s42"):
        ops = operations(smk, exp_id=exp).training
        assert ops == E.operational_settings(cfg, exp) and ops["checkpoint_steps"] == 7 and ops["log_steps"] == 3
    stage = next(iter(cfg["pretraining"]))
    assert operations(smk, stage=stage).training == E.operational_settings(cfg, stage=stage)
    assert operations(smk).config == smoke  # what the cost plan's dry run plans: the config as given
