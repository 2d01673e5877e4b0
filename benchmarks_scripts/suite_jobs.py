"""The rule jobs a finished test session ran, and their CPU seconds, from the jobs' own last log
lines (``rule <r> done in <s> s (torch ...; cpu <s> s, peak ...)``: the process's and its
children's CPU). Every folder under pytest's base folder is read; a line copied with a built
workflow (tests/built.py) counts once.

    python benchmarks_scripts/suite_jobs.py /tmp/pytest-of-$USER/pytest-current

Prints the total, then the jobs and CPU seconds per rule and per test folder.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

DONE = re.compile(r"^\S+ \S+ cselab INFO rule (\S+) done in [\d.]+ s \(torch [\w ]+; cpu ([\d.]+) s")


def done_lines(base: Path):
    """(test folder, rule, CPU seconds) of each job's last line, each line once."""
    seen: set[str] = set()
    for log in sorted(base.rglob("*.log")):
        if ".snakemake" in log.parts:
            continue
        folder = "/".join(log.relative_to(base).parts[:2])
        for line in log.read_text(errors="replace").splitlines():
            match = DONE.match(line)
            if match and line not in seen:
                seen.add(line)
                yield folder, match[1], float(match[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, help="pytest's base folder of the session")
    args = parser.parse_args()
    by_rule: dict[str, list[float]] = defaultdict(list)
    by_folder: dict[str, list[float]] = defaultdict(list)
    for folder, rule, cpu in done_lines(args.base):
        by_rule[rule].append(cpu)
        by_folder[folder].append(cpu)
    total = [c for cpus in by_rule.values() for c in cpus]
    if not total:  # the line's format is cselab.pipeline.jobs.main's: a changed one counts nothing
        raise SystemExit(f"no job's last log line under {args.base} (rule <r> done in ...; cpu <s> s)")
    print(f"{len(total)} jobs, {sum(total):.0f} CPU-s")
    for title, groups in (("rule", by_rule), ("folder", by_folder)):
        print(f"\n{title:<48} jobs   CPU-s")
        for name, cpus in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
            print(f"{name:<48} {len(cpus):4d} {sum(cpus):7.1f}")


if __name__ == "__main__":
    main()
