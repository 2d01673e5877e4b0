#!/usr/bin/env bash
# Line coverage of cselab/ by the whole test suite at one commit, every process followed: pytest's
# workers, Snakemake invocations, rule scripts (each job its own process),
# torchrun workers, SLURM jobs (coverage.py's [run] patch = subprocess, fork, _exit, execv).
#
#   bash benchmarks_scripts/suite_coverage.sh <commit> <checkout>
#
# Clones this checkout at <commit> into <checkout> (a new folder beside this checkout, so that the
# tests find ../shared/data as they do here), runs the README's test command there under
# coverage.py (pip install coverage; not a test dependency) and writes <checkout>-coverage/:
# report.txt (per file and TOTAL), coverage.json, pytest.log. Run two commits the same way to
# compare them (docs/tests.md).
set -euo pipefail
commit=$1
repo=$(cd "$(dirname "$0")/.." && pwd)
checkout=$(mkdir -p "$(dirname "$2")" && cd "$(dirname "$2")" && pwd)/$(basename "$2")
out=$checkout-coverage
rm -rf "$checkout" "$out" && mkdir -p "$out"
git clone -q "$repo" "$checkout"
git -C "$checkout" checkout -q "$commit"
cat > "$out/coveragerc" <<RC
[run]
parallel = True
data_file = $out/.coverage
source = $checkout/cselab
patch = subprocess, fork, _exit, execv
disable_warnings = no-data-collected, module-not-imported, module-not-measured, already-imported, couldnt-parse
[report]
precision = 2
RC
export COVERAGE_RCFILE="$out/coveragerc" HF_HUB_OFFLINE=1
status=0
(cd "$checkout" && python3 -m coverage run -m pytest -n 2 --dist loadfile -p no:cacheprovider -rs) \
    > "$out/pytest.log" 2>&1 || status=$?
(cd "$out" && python3 -m coverage combine -q && python3 -m coverage report > report.txt \
    && python3 -m coverage json -q -o coverage.json)
echo "$commit: pytest exit $status; $(tail -1 "$out/pytest.log")"
echo "cselab/ line coverage: $(tail -1 "$out/report.txt")"
