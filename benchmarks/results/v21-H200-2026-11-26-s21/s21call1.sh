#!/usr/bin/env bash
# Session 21 call 1 (H200): where the warp-specialized prefill kernel's time goes at 4 x 1024
# (0.91x FlashInfer; 1 x 8k level): ncu with source counters (SASS stall samples, instructions
# executed) of ours and of FlashInfer's kernel, L2 warm; the prefill cells timed beside FlashInfer.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|geometric' $R/$name.log | tr '\n' ' ' | cut -c1-200)"; }
SECT="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SourceCounters --section SchedulerStats --section InstructionStats --section ComputeWorkloadAnalysis"
prof() { local name=$1 regex=$2 skip=$3; shift 3; local t0=$SECONDS
  timeout 150 ncu --clock-control none --cache-control none --kernel-name "regex:$regex" --launch-skip $skip --launch-count 1 $SECT --import-source no -o $R/$name \
    python3 benchmarks/profile_case.py "$@" > $R/$name.log 2>&1
  echo "ncu $name rc=$? $((SECONDS-t0))s"
  ncu -i $R/$name.ncu-rep --page details > $R/$name-details.txt 2>&1
  ncu -i $R/$name.ncu-rep --page source --csv --print-source sass > $R/$name-sass.csv 2>&1
  rm -f $R/$name.ncu-rep; }
prof ours-4x1k rpa_tile_ws 3 --seqs 1024x1024*4 --calls 5 --impl ours
prof fi-4x1k PrefillWithKVCache 3 --seqs 1024x1024*4 --calls 5 --impl flashinfer
tar -czf $OUT/call1.tgz -C $OUT r
prof ours-1x8k rpa_tile_ws 1 --seqs 8192x8192 --calls 2 --impl ours
prof fi-1x8k PrefillWithKVCache 1 --seqs 8192x8192 --calls 2 --impl flashinfer
tar -czf $OUT/call1.tgz -C $OUT r
s prefill 240 python3 benchmarks/peers.py --suite prefill --no-jax --variants auto --out $R/prefill.json
tar -czf $OUT/call1.tgz -C $OUT r
grep -A12 "^case" $R/prefill.log | grep -v "^|" | cut -c1-200
for f in $R/*-details.txt; do echo "== $f"; grep -E "Duration|SM Active Cycles|Executed Instructions  |Issue Slots Busy|Warp Cycles Per Issued|No Eligible" $f | head -8; done
