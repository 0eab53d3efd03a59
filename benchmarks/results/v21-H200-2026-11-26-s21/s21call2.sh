#!/usr/bin/env bash
# Session 21 call 2 (H200): the warp-specialized kernel's epilogue through shared memory
# (stmatrix, 16-byte stores) and its schedule ring filled a pair ahead. Correctness (the ws
# tests at every case, both persistent modes, sanitizers), then A/B/C against session 20's library
# and the prefetch alone in one process each, FlashInfer beside; ncu of the new kernel at 4 x 1k.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
xz -dc .carry/base21.so.xz > /tmp/base21.so; xz -dc .carry/exp-prefetch.so.xz > /tmp/prefetch.so
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|geometric|cases passed' $R/$name.log | tr '\n' ' ' | cut -c1-250)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
s ws-all 120 env XGK_GPU_CASES_PERCENT=100 $G tiled_ws_kernel_matches_cpu
s ws-static 120 env XGK_GPU_CASES_PERCENT=100 XGK_WS_PERSISTENT=1 $G tiled_ws_kernel_matches_cpu
s ws-perpair 120 env XGK_GPU_CASES_PERCENT=100 XGK_WS_PERSISTENT=0 $G tiled_ws_kernel_matches_cpu
s apart 120 env XGK_GPU_CASES_PERCENT=100 $G decode_rows_apart_match_cpu
tar -czf $OUT/call2.tgz -C $OUT r
for tool in racecheck synccheck memcheck; do
  s san-$tool 150 compute-sanitizer --tool $tool --error-exitcode 1 $G tiled_ws_kernel_small_cases
done
tar -czf $OUT/call2.tgz -C $OUT r
P="python3 benchmarks/peers.py --suite prefill --no-jax"
s prefill-new 150 $P --variants auto --out $R/prefill-new.json
s prefill-base 120 env XLA_GPU_KERNELS_LIB=/tmp/base21.so $P --no-flashinfer --variants auto --out $R/prefill-base.json
s prefill-prefetch 120 env XLA_GPU_KERNELS_LIB=/tmp/prefetch.so $P --no-flashinfer --variants auto --out $R/prefill-prefetch.json
tar -czf $OUT/call2.tgz -C $OUT r
SECT="--section SpeedOfLight --section WarpStateStats --section SourceCounters --section SchedulerStats --section InstructionStats"
timeout 150 ncu --clock-control none --cache-control none --kernel-name "regex:rpa_tile_ws" --launch-skip 3 --launch-count 1 $SECT --import-source no -o $R/new-4x1k \
    python3 benchmarks/profile_case.py --seqs 1024x1024*4 --calls 5 --impl ours > $R/new-4x1k.log 2>&1; echo "ncu rc=$?"
ncu -i $R/new-4x1k.ncu-rep --page details > $R/new-4x1k-details.txt 2>&1
ncu -i $R/new-4x1k.ncu-rep --page source --csv --print-source sass > $R/new-4x1k-sass.csv 2>&1
rm -f $R/*.ncu-rep
tar -czf $OUT/call2.tgz -C $OUT r
for f in prefill-new prefill-base prefill-prefetch; do grep -A9 "^case" $R/$f.log | grep -v "^|" | cut -c1-110; done
grep -E "Duration|SM Active Cycles|Executed Instructions  |Issue Slots Busy|Warp Cycles Per Issued" $R/new-4x1k-details.txt
