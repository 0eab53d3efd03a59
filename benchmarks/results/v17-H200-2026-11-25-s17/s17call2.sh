#!/usr/bin/env bash
# Session 17 call 2 (H200): resident_cluster_plan (smaller clusters before the merge kernel):
# A/B against s17a (session 16's library) on the cells whose plans move, warm and L2-cold;
# Rust GPU suite at 10 %, sanitizers on the small cases and the merge test; ncu of 1 x 2k with
# the L2 left warm.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
xz -dc .carry/s17a.so.xz > /tmp/s17a.so
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'SUMMARY|test result|panicked|active clusters|cluster-merged' $R/$name.log | tr '\n' ' ' | cut -c1-300)"; }
F="decode 1x512,decode 1x2048,decode 4x512,decode 4x2048,decode 16x512,decode 4x8192"
s warm-new 120 python3 benchmarks/peers.py --suite decode --no-jax --filter "$F" --variants auto,auto:ms4 --out $R/warm-new.json
s warm-old 90 env XLA_GPU_KERNELS_LIB=/tmp/s17a.so python3 benchmarks/peers.py --suite decode --no-jax --no-flashinfer --filter "$F" --variants auto --out $R/warm-old.json
s cold-new 120 python3 benchmarks/peers.py --suite decode --no-jax --cold-l2 --filter "$F" --variants auto --out $R/cold-new.json
s cold-old 90 env XLA_GPU_KERNELS_LIB=/tmp/s17a.so python3 benchmarks/peers.py --suite decode --no-jax --no-flashinfer --cold-l2 --filter "$F" --variants auto --out $R/cold-old.json
tar -czf $OUT/call2.tgz -C $OUT r
G=".gpu/bin/gpu --include-ignored --test-threads=1 --exact"
s gpu-suite 170 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --skip paged_attention_long_context_128k
s san-racecheck-small 150 compute-sanitizer --tool racecheck --error-exitcode 1 $G pipelined_kernel_small_cases
s san-memcheck-merges 120 compute-sanitizer --tool memcheck --error-exitcode 1 $G pipelined_cluster_and_kernel_merges_match_cpu
s san-racecheck-merges 150 compute-sanitizer --tool racecheck --error-exitcode 1 $G pipelined_cluster_and_kernel_merges_match_cpu
tar -czf $OUT/call2.tgz -C $OUT r
SECT="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SourceCounters --section SchedulerStats"
t0=$SECONDS
timeout 120 ncu --clock-control none --cache-control none --kernel-name "regex:rpa_" --launch-skip 8 --launch-count 1 $SECT --import-source no -o $R/ours-1x2k-warm \
  python3 benchmarks/profile_case.py --seqs 1x2048 --calls 10 --impl ours > $R/ours-1x2k-warm.log 2>&1
echo "ncu rc=$? $((SECONDS-t0))s"
ncu -i $R/ours-1x2k-warm.ncu-rep --page details > $R/ours-1x2k-warm-details.txt 2>&1
ncu -i $R/ours-1x2k-warm.ncu-rep --page source --csv --print-source sass > $R/ours-1x2k-warm-sass.csv 2>&1
rm -f $R/*.ncu-rep
tar -czf $OUT/call2.tgz -C $OUT r
for f in warm-new warm-old cold-new cold-old; do grep -A7 "^case" $R/$f.log | cut -c1-120; done
grep -E "Duration|Elapsed Cycles|SM Active Cycles|One or More" $R/ours-1x2k-warm-details.txt
