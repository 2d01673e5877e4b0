#!/usr/bin/env bash
# One compile per workflow: the first and a later training job's first step (its compile included)
# through Snakemake, in a new workflow folder (so a new compile cache, results/cache/compile): the
# smoke's SimCSE on MiniLM, seeds 42 then 43 (the same shapes), one job at a time, with
# training.compile on (true: inductor's default mode; COMPILE=auto on a GPU: CUDA graphs).
# Each job's "the first step took" line is printed as it is read, then their ratio.
#   bash benchmarks_scripts/compile_cache.sh [workflow folder] [more --configfile files]
# e.g. on this machine:  bash benchmarks_scripts/compile_cache.sh /tmp/compile-cache
set -uo pipefail
checkout=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d)}
shift || true
data=${DATA:-$checkout/../shared/data}
mkdir -p "$work"
printf 'training: {compile: %s}\nseeds: [42, 43]\n' "${COMPILE:-true}" > "$work/compile.yaml"
firsts=()
for seed in 42 43; do  # one invocation each: the second job starts after the first has written the cache
    start=$(date +%s)
    snakemake -s "$checkout/Snakefile" --directory "$work" "results/experiments/simcse-minilm-s$seed/train_summary.json" \
        --cores "${CORES:-1}" --configfile "$checkout/configs/smoke.yaml" "$work/compile.yaml" "$@" \
        --config data_dir="$data" > "$work/snakemake_s$seed.log" 2>&1
    status=$?
    line=$(grep -h "the first step took" "$work/logs/train/simcse-minilm-s$seed.log" | tail -1)
    first=$(echo "$line" | sed -E 's/.*the first step took ([0-9.]+) s.*/\1/')
    echo "seed $seed: exit $status, $(( $(date +%s) - start )) s through Snakemake; ${line#*] }"
    firsts+=("$first")
done
python -c "import sys; a, b = map(float, sys.argv[1:]); print(f'later / first: {b:.1f} / {a:.1f} s = {b / a:.2f}')" \
    "${firsts[@]}"
