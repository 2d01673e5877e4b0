"""A pytest plugin: each test's CPU seconds (setup, call and teardown; the whole machine's, from
/proc/stat, so every process a test starts counts: Snakemake, jobs, torchrun, servers) and wall
seconds, one TSV line a test. Meaningful on an otherwise idle machine with one test at a time:

    PYTEST_XDIST_WORKER_COUNT=2 PYTHONPATH=benchmarks_scripts CSELAB_CPU_PER_TEST=cpu.tsv \\
        pytest -p no:xdist -p cpu_per_test

(``PYTEST_XDIST_WORKER_COUNT=2`` gives the tests a worker's share of the cores, as in the suite's
two-worker run: tests/conftest.py.) A module's fixtures count in its first test."""

from __future__ import annotations

import os
import time

import pytest

OUT_ENV = "CSELAB_CPU_PER_TEST"


def machine_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine since boot (user, nice, system, irq, softirq)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return sum(int(fields[i]) for i in (1, 2, 3, 6, 7)) / os.sysconf("SC_CLK_TCK")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = machine_cpu_seconds(), time.monotonic()
    yield
    cpu, wall = machine_cpu_seconds() - cpu, time.monotonic() - wall
    with open(os.environ.get(OUT_ENV, "cpu_per_test.tsv"), "a") as out:
        out.write(f"{cpu:.2f}\t{wall:.2f}\t{item.nodeid}\n")
