#!/usr/bin/env bash
# Session 21 call 9 (H200): ncu with source counters of the final build's prefill kernel at
# 4 x 1k (L2 warm), for where an item's time goes now.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
SECT="--section SpeedOfLight --section WarpStateStats --section SourceCounters --section SchedulerStats --section InstructionStats"
timeout 150 ncu --clock-control none --cache-control none --kernel-name "regex:rpa_tile_ws" --launch-skip 3 --launch-count 1 $SECT --import-source no -o $R/final-4x1k \
    python3 benchmarks/profile_case.py --seqs 1024x1024*4 --calls 5 --impl ours > $R/final-4x1k.log 2>&1; echo "ncu rc=$?"
ncu -i $R/final-4x1k.ncu-rep --page details > $R/final-4x1k-details.txt 2>&1
ncu -i $R/final-4x1k.ncu-rep --page source --csv --print-source sass > $R/final-4x1k-sass.csv 2>&1
rm -f $R/*.ncu-rep
tar -czf $OUT/call9.tgz -C $OUT r
grep -E "Duration|SM Active Cycles|Executed Instructions  |Issue Slots Busy|Eligible Warps" $R/final-4x1k-details.txt
