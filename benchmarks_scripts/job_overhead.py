"""Each job's time outside its own work, from a finished Snakemake run: the wall time in the
rule's benchmark file (``benchmarks/<rule>/<name>.tsv``, Snakemake's ``s``) minus the work the
job's log reports (``where the job's time went``: training steps, STS-B dev, evaluation).

    python benchmarks_scripts/job_overhead.py [--root .] [--out overhead.csv]

A job whose log has no breakdown (a table, a data step) has no work to subtract: its whole wall
time is outside work. Prints one row a job and writes them as CSV with ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

BREAKDOWN = re.compile(r"where the job's time went: (.*)$")
WORK = ("train_steps", "dev_eval", "evaluate")


def job_rows(root: Path) -> list[dict]:
    rows = []
    for bench in sorted((root / "benchmarks").rglob("*.tsv")):
        rel = bench.relative_to(root / "benchmarks").with_suffix("")
        with bench.open() as fh:
            wall = float(next(csv.DictReader(fh, delimiter="\t"))["s"])
        phases = breakdown(root / "logs" / rel.with_suffix(".log"))
        work = sum(phases.get(k, 0.0) for k in WORK)
        rows.append({"job": str(rel), "wall_s": round(wall, 2), "work_s": round(work, 2),
                     "outside_s": round(wall - work, 2), "process_s": phases.get("total")})
    return rows


def breakdown(log: Path) -> dict[str, float]:
    """The last ``where the job's time went`` line of a job's log, as phase -> seconds."""
    if not log.exists():
        return {}
    found = [m.group(1) for line in log.read_text(errors="replace").splitlines() if (m := BREAKDOWN.search(line))]
    if not found:
        return {}
    return {k: float(v) for k, v in re.findall(r"(\w+) ([\d.]+) s", found[-1])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path("."))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    rows = job_rows(args.root)
    for r in rows:
        print(f"{r['job']:60s} wall {r['wall_s']:7.2f} s  work {r['work_s']:7.2f} s  outside {r['outside_s']:6.2f} s")
    if args.out and rows:
        with args.out.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
