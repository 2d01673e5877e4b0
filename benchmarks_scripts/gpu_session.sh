#!/usr/bin/env bash
# The GPU measurements of docs/speed.md in short stages, each a device call of at most ~5 minutes
# that writes every row under $OUT the moment it is measured (a call cut short keeps its rows).
# On the GPU machine (shared/gpu/README.md; carry .device):
#   source .device/setup.sh && bash benchmarks_scripts/gpu_session.sh 1     # then 2, 3; 4 re-checks after tuning
# 5 is one call for a short lease after 1 and 2: the correctness on main beside stage 3, then the
# default mode (compile: auto) of every timed case that stages 1-2 measured eager only; 6 follows 5;
# 7 is issue 70's (compiled chunks, the step's fixed part in its graphs, one compile per workflow)
# Rehearsed on the CPU at tiny size with the same stages:
#   OUT=/tmp/out SIZE=tiny DEVICE=cpu bash benchmarks_scripts/gpu_session.sh 1
set -uo pipefail
stage=${1:?stage 1, 2, 3, 4, 5, 6 or 7}
OUT=${OUT:?set OUT}
SIZE=${SIZE:-base}
DEVICE=${DEVICE:-cuda}
data=${DATA:-../shared/data}
export OUT SIZE DEVICE TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1 PYTHONUNBUFFERED=1
if ! python -c "import torch" 2>/dev/null; then  # a link to a virtual environment's python3 loses the environment
    mkdir -p /tmp/bin && rm -f /tmp/bin/python
    printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" > /tmp/bin/python && chmod +x /tmp/bin/python
    export PATH="/tmp/bin:$PATH"
fi
# cselab's console for Snakemake, from the checkout (nothing is pip-installed there)
export PYTHONPATH="$PWD/plugins/snakemake-logger-plugin-cselab${PYTHONPATH:+:$PYTHONPATH}"
acc=(python benchmarks_scripts/gpu_acceptance.py --device "$DEVICE" --size "$SIZE" --corpus "$data/wiki1m_head.txt")
if [ "$DEVICE" = cuda ]; then small=64; large=512; chunks=(64 16 1024 128); else small=16; large=32; chunks=(16 4 32 4); fi
device_config() {  # a BERT of $SIZE built from a config, named as the smoke's PLM: "$work/device.yaml"
    work=$(mktemp -d)
    python -c "import sys; sys.path.insert(0, 'benchmarks_scripts'); from pathlib import Path; \
from train_speed import build_model; build_model(Path('$work/bert'), '$SIZE', None)"
    local precision=bf16; [ "$DEVICE" = cuda ] || precision=fp32
    printf 'plms: {minilm: {model: %s}}\ntraining: {precision: %s}\n' "$work/bert" "$precision" > "$work/device.yaml"
}
case "$stage" in
1)  # the machine, the CUDA correctness tests, the three headline speed cases
    { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
      python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } \
        | tee "$OUT/machine.txt"
    if [ "$DEVICE" = cuda ]; then
        timeout 150 python -m pytest -m gpu -n 0 -q -p no:cacheprovider tests/test_gpu.py tests/test_keyed_kernel.py \
            > "$OUT/pytest_gpu.log" 2>&1
        echo "pytest -m gpu: exit $?"; tail -3 "$OUT/pytest_gpu.log"
    fi
    timeout 150 "${acc[@]}" --sections speed --rounds 2 --out "$OUT/speed1" \
        --batch-sizes "$small,$large" --speed-cases "simcse@$small,compcse@$small,simcse@$large"
    ;;
2)  # the other modes and methods, gradient caching, the STS evaluation's time
    c=(); [ "$DEVICE" = cuda ] && c=("simcse_compiled@$small" "simcse_cudagraphs@$small" "simcse_padded@$small")
    c+=("simcse_unchunked_b${chunks[0]}@${chunks[0]}" "simcse_chunk_${chunks[1]}_b${chunks[0]}@${chunks[0]}"
        "simcse_unchunked_b${chunks[2]}@${chunks[2]}" "simcse_chunk_${chunks[3]}_b${chunks[2]}@${chunks[2]}")
    c+=("diffcse@$small" "infocse-stage2@$small")
    timeout 200 "${acc[@]}" --sections speed --rounds 1 --out "$OUT/speed2" --batch-sizes "$small,$large" \
        --speed-cases "$(IFS=,; echo "${c[*]}")"
    timeout 60 "${acc[@]}" --sections sts,profile --senteval "$data/senteval" --no-sts-compare --sts-repeats 2 \
        --out "$OUT/sts" --batch-sizes "$small,$large" --profile-cases "simcse@$small"
    ;;
4)  # after tuning: the CUDA tests, the smoke Table 1 through Snakemake (stage 3), the default mode's speed
    # the methods whose step synced in stage 1, each precision, the sync debug mode on (tiny: seconds)
    timeout 60 python benchmarks_scripts/gpu_acceptance.py --device "$DEVICE" --size tiny --steps 6 \
        --batch-sizes 16 --sections train --methods diffcse,diffcse-edits,infocse-stage2 --out "$OUT/syncs" \
        --corpus "$data/wiki1m_head.txt" \
        2>&1 | grep -E "^\{|wrote" | cut -c1-200
    bash "$0" 3
    timeout 100 "${acc[@]}" --sections profile --out "$OUT/profile" --batch-sizes "$small,$large" \
        --profile-cases "simcse@$small"
    ;;
3)  # a job's time outside its work, through Snakemake: the smoke Table 1 on a BERT of $SIZE
    device_config
    timeout 240 snakemake results/table1.csv --cores 16 --set-threads train=4 evaluate_sts=4 \
        --configfile configs/smoke.yaml "$work/device.yaml" --config data_dir="$data" > "$OUT/snakemake.log" 2>&1
    echo "snakemake: exit $?"; tail -5 "$OUT/snakemake.log"
    python benchmarks_scripts/job_overhead.py --out "$OUT/overhead.csv"
    tar czf "$OUT/logs.tgz" logs benchmarks results/table1.md 2>/dev/null || true
    ;;
5)  # the CUDA tests and every method under the sync debug mode (4 threads) beside stage 3, then the
    # default mode of CompCSE 64, SimCSE at the large batch, DiffCSE and InfoCSE stage 2 (8 files come back)
    { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
      python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } 2>&1
    ( export OMP_NUM_THREADS=4
      [ "$DEVICE" = cuda ] && timeout 60 python -m pytest -m gpu -n 0 -q -p no:cacheprovider \
          tests/test_gpu.py -k kernel 2>&1 | tail -3
      timeout 150 python benchmarks_scripts/gpu_acceptance.py --device "$DEVICE" --size tiny --steps 6 \
          --batch-sizes 16 --senteval "$data/senteval" --sections train,layouts,sts,distributed \
          --corpus "$data/wiki1m_head.txt" \
          --out "$OUT/correct" 2>&1 | grep -E "FAILED|Error|wrote" | cut -c1-300 ) &
    bash "$0" 3
    wait
    timeout 230 "${acc[@]}" --sections speed --rounds 1 --out "$OUT/speed5" --batch-sizes "$small,$large" \
        --speed-cases "compcse@$small,simcse@$large,diffcse@$small,infocse-stage2@$small" 2>&1 \
        | grep -E "^\{|wrote|Error" | cut -c1-400
    ;;
6)  # what 5 left: the STS check compared in bf16 on both sides (tiny), the profile of CompCSE and
    # DiffCSE at the small batch, and one training job's time with a new, then a used compile cache
    timeout 60 python benchmarks_scripts/gpu_acceptance.py --device "$DEVICE" --size tiny --batch-sizes 16 \
        --senteval "$data/senteval" --sections sts --corpus "$data/wiki1m_head.txt" --out "$OUT/sts6" 2>&1 \
        | grep -E "^\{|wrote|Error" | cut -c1-300
    timeout 120 "${acc[@]}" --sections profile --out "$OUT/profile6" --batch-sizes "$small,$large" \
        --profile-cases "compcse@$small,diffcse@$small" 2>&1 | grep -E "^\{|wrote|Error" | cut -c1-400
    device_config
    for cache in new used; do  # the second run's training reads what the first compiled (results/cache/compile)
        timeout 170 snakemake results/experiments/simcse-minilm-s42/train_summary.json --forcerun train --cores 16 \
            --set-threads train=8 --configfile configs/smoke.yaml "$work/device.yaml" --config data_dir="$data" \
            > "$OUT/snakemake_$cache.log" 2>&1
        echo "$cache cache: exit $? $(grep -h "where the job's time went" logs/train/simcse-minilm-s42.log | cut -c24-)" \
            | tee -a "$OUT/compile_cache.txt"
    done
    ;;
7)  # issue 70, in the order its rows matter (each written as it is measured): gradient caching
    # against the unchunked step at 64/16 and 1024/128 (the default mode compiles the chunks in one
    # fixed shape; eager and default baselines, the eager chunks), the headline cases in the
    # default mode (the optimizer's step now compiled: SimCSE at 64 >= 25% MFU?), InfoCSE's stage 1
    # whole and in accumulated micro-batches, then the first and a later training job's compile
    # through Snakemake (a new workflow folder, one job at a time)
    b=${chunks[0]} c=${chunks[1]} B=${chunks[2]} C=${chunks[3]} s1=$([ "$DEVICE" = cuda ] && echo 1024 || echo "$small")
    timeout 240 "${acc[@]}" --sections speed --rounds 1 --out "$OUT/speed7_chunks" --batch-sizes "$small,$large" \
        --speed-cases "simcse_unchunked_auto_b$b@$b,simcse_chunk_${c}_b$b@$b,simcse_unchunked_b$b@$b,simcse_unchunked_auto_b$B@$B,simcse_chunk_${C}_b$B@$B,simcse_unchunked_b$B@$B,simcse_chunk_${c}_eager_b$b@$b" \
        2>&1 | grep -E "^\{|wrote|Error" | cut -c1-400
    timeout 150 "${acc[@]}" --sections speed --rounds 1 --out "$OUT/speed7_default" --batch-sizes "$small,$large" \
        --speed-cases "simcse@$small,simcse@$large,compcse@$small" 2>&1 | grep -E "^\{|wrote|Error" | cut -c1-400
    timeout 150 "${acc[@]}" --sections speed --rounds 1 --out "$OUT/speed7_stage1" --batch-sizes "$small,$large" \
        --speed-cases "infocse-stage1@$s1,infocse-stage1_micro@$s1" 2>&1 | grep -E "^\{|wrote|Error" | cut -c1-400
    device_config
    COMPILE=auto CORES=8 timeout 300 bash benchmarks_scripts/compile_cache.sh "$work/workflow" "$work/device.yaml" \
        | tee "$OUT/compile_cache.txt"
    ;;
esac
