"""The fault table: every fault of ``tests/test_faults.py`` done for real (real ``snakemake``
processes, real signals, a real ``mlflow server`` killed for ``--outage`` seconds and started
again, real file corruption), one row each: fault, outcome, steps lost, metrics lost, the
message shown.

    python benchmarks_scripts/faults.py --outage 60 --out results/benchmarks/faults.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--outage", type=float, default=60.0, help="seconds the MLflow server stays down")
    ap.add_argument("--out", type=Path, default=Path("results/benchmarks/faults.md"))
    args = ap.parse_args(argv)
    from cselab.io import process_folder

    table = process_folder("cselab-faults-") / "faults.jsonl"  # read into --out below
    env = {**os.environ, "CSELAB_FAULT_TABLE": str(table), "CSELAB_FAULT_OUTAGE_S": str(args.outage)}
    tic = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-q", "tests/test_faults.py"], cwd=ROOT, env=env)
    rows = [json.loads(line) for line in table.read_text().splitlines()] if table.exists() else []
    lines = [f"# Fault table ({datetime.date.today().isoformat()})", "",
             f"`python benchmarks_scripts/faults.py --outage {args.outage:g}`: {len(rows)} faults, pytest exit "
             f"{proc.returncode}, {time.monotonic() - tic:.0f} s. Tiny BERT, synthetic data, real processes.", "",
             "| fault | outcome | steps lost | metrics lost | message shown |", "|---|---|---|---|---|"]
    lines += [f"| {r['fault']} | {r['outcome']} | {r['steps_lost']} | {r['metrics_lost']} | "
              f"{r['message'].replace('|', '/')} |" for r in rows]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
