"""Where a dry run's time goes: Snakemake's imports, reading the Snakefile and its rules, the DAG.

Runs Snakemake's command line in this process with its phases timed (the whole import of
Snakemake; each ``include``, the Snakefile's itself the last; ``DAG.init``; ``DAG.postprocess``,
which checks every ``script:`` job's source; ``Workflow.execute`` around both), and prints one line
a phase on stderr. ``--preimport`` imports smart_open and nbformat first (Snakemake imports them on
first use inside those phases, for any workflow), so the include and DAG lines show the workflow's
own share:

    python benchmarks_scripts/plan_phases.py [--preimport] -n --cores 2 --quiet \\
        --configfile configs/smoke.yaml --config data_dir=../shared/data -- results/sweep_smoke-lr-batch.csv

(The whole process's wall time, several runs: farm-bench, ``docs/scale.md``.)
"""

import atexit
import sys
import time

START = time.perf_counter()
PREIMPORT = "--preimport" in sys.argv
if PREIMPORT:
    sys.argv.remove("--preimport")

import snakemake.api  # noqa: E402
import snakemake.cli  # noqa: E402
import snakemake.dag  # noqa: E402
import snakemake.workflow  # noqa: E402

if PREIMPORT:
    import nbformat  # noqa: E402, F401
    import smart_open  # noqa: E402, F401

PHASES = [("import snakemake" + (" (+ smart_open, nbformat)" if PREIMPORT else ""), time.perf_counter() - START)]


def timed(cls, name: str, label: str, is_async: bool = False) -> None:
    """Wrap ``cls.name`` so that each call appends (label, seconds) to PHASES."""
    original = getattr(cls, name)
    if is_async:
        async def wrapper(self, *args, **kwargs):
            t = time.perf_counter()
            try:
                return await original(self, *args, **kwargs)
            finally:
                PHASES.append((label, time.perf_counter() - t))
    else:
        def wrapper(self, *args, **kwargs):
            t = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                PHASES.append((f"{label} {args[0] if args else ''}".strip(), time.perf_counter() - t))
    setattr(cls, name, wrapper)


def report() -> None:
    PHASES.append(("total", time.perf_counter() - START))
    for label, seconds in PHASES:
        print(f"{label[-60:]:60s} {seconds:7.3f} s", file=sys.stderr)


if __name__ == "__main__":
    timed(snakemake.workflow.Workflow, "include", "include")
    timed(snakemake.dag.DAG, "init", "DAG.init", is_async=True)
    timed(snakemake.dag.DAG, "postprocess", "DAG.postprocess", is_async=True)
    timed(snakemake.workflow.Workflow, "execute", "Workflow.execute")
    atexit.register(report)
    sys.argv = ["snakemake", *sys.argv[1:]]
    snakemake.cli.main()
