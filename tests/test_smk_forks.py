"""tests/smk_forks.py: an invocation run as a fork of the test worker's Snakemake server ends as
the same command started as a process would (status, streams, folder, environment)."""

from __future__ import annotations

import os
import sys

from tests import smk_forks
from tests.smk_forks import ROOT

SMK = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile")]


def both(cmd: list[str], env: dict):
    forked = smk_forks.run(cmd, env, timeout=300)
    started = smk_forks.run(cmd, {**env, "CSELAB_TEST_SNAKEMAKE_FORKS": "0"}, timeout=300)
    return forked, started


def test_a_forked_invocation_ends_as_a_started_one(tmp_path):
    env = {**os.environ}
    assert smk_forks.forkable(SMK, env) and not smk_forks.forkable(
        [sys.executable, "-m", "snakemake", "-s", str(tmp_path / "Snakefile")], env)
    forked, started = both([*SMK, "--version"], env)
    assert (forked.returncode, forked.stdout, forked.stderr) == (started.returncode, started.stdout, started.stderr)
    assert forked.returncode == 0 and forked.stdout.strip()
    forked, started = both([*SMK, "--cores", "none"], env)  # Snakemake's own argument error
    assert forked.returncode == started.returncode != 0 and forked.stderr == started.stderr
    (tmp_path / "bad.yaml").write_text("training: {lr: -1}\n")
    bad = [*SMK, "--directory", str(tmp_path), "--configfile", str(tmp_path / "bad.yaml"), "-n"]
    forked, started = both(bad, {**env, "CSELAB_MARKER": "x"})  # the config's one message, from the fork's folder
    assert forked.returncode == started.returncode != 0
    assert "training.lr" in forked.stdout + forked.stderr
    assert forked.stdout + forked.stderr == started.stdout + started.stderr


def test_parallel_workers_cap_the_threads_of_runs_not_of_dry_runs(monkeypatch):
    """With parallel workers a run's jobs get the worker's share of the cores (``--max-threads``);
    a dry run shows the rules' own threads, and a command's own cap stands."""
    monkeypatch.setenv(smk_forks.THREAD_CAP_ENV, "1")
    assert smk_forks.capped([*SMK, "--cores", "2", "t"]) == [*SMK[:3], "--max-threads", "1", *SMK[3:], "--cores", "2", "t"]
    for cmd in ([*SMK, "-n", "t"], [*SMK, "-pn", "t"], [*SMK, "--dry-run", "t"], [*SMK, "--max-threads=2", "t"],
                ["snakemake", "--cores", "2"]):
        assert smk_forks.capped(cmd) == cmd
    monkeypatch.delenv(smk_forks.THREAD_CAP_ENV)
    assert smk_forks.capped([*SMK, "--cores", "2", "t"]) == [*SMK, "--cores", "2", "t"]
