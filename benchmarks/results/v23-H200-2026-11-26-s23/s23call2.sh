#!/usr/bin/env bash
# Session 23 call 2 (H200): ncu with source counters of the warp-specialized prefill kernel at
# G1 4 x 1k and 1 x 8k (L2 warm), the whole per-instruction table kept, for stall samples per
# role (consumers, K/V producers, Q loader) and per phase of an item.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
SECT="--section SpeedOfLight --section WarpStateStats --section SourceCounters --section SchedulerStats --section InstructionStats"
for c in 4x1k:1024x1024*4 1x8k:8192x8192; do
  name=${c%%:*}; seqs=${c#*:}
  timeout 200 ncu --clock-control none --cache-control none --kernel-name "regex:rpa_tile_ws" --launch-skip 3 --launch-count 1 $SECT --import-source no -o $R/ws-$name \
    python3 benchmarks/profile_case.py --seqs "$seqs" --calls 5 --impl ours > $R/ws-$name.log 2>&1; echo "ncu $name rc=$?"
  ncu -i $R/ws-$name.ncu-rep --page details > $R/ws-$name-details.txt 2>&1
  ncu -i $R/ws-$name.ncu-rep --page source --csv --print-source sass > $R/ws-$name-sass.csv 2>&1
  xz -9 $R/ws-$name-sass.csv
  rm -f $R/ws-$name.ncu-rep
  grep -E "Duration|SM Active Cycles|Executed Instructions  |Issue Slots Busy" $R/ws-$name-details.txt
done
tar -czf $OUT/call2.tgz -C $OUT r
