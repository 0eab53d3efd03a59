#!/usr/bin/env bash
# Session 27 call 1 (H200): merge blocks (XGK_RPA_MERGE_MODE=4): the merge test in every mode, the
# new split-decode graph-replay test (modes unset / 3 / 4), the chained test, and the sanitizers.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|runs passed|replays passed|links passed|failed|panicked' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-220)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
s graph-split 90 $G split_decode_graph_replays_follow_new_metadata
s merges 150 $G pipelined_cluster_and_kernel_merges_match_cpu
s chained 60 $G programmatic_launches_chained_through_data_match_cpu
tar -czf $OUT/call1.tgz -C $OUT r
if ! grep -q "test result: ok" $R/graph-split.log || ! grep -q "test result: ok" $R/merges.log; then tail -40 $R/graph-split.log $R/merges.log; exit 1; fi
for tool in memcheck racecheck synccheck; do
  s san-graph-split-$tool 120 compute-sanitizer --tool $tool --error-exitcode 1 $G split_decode_graph_replays_follow_new_metadata
done
tar -czf $OUT/call1.tgz -C $OUT r
s san-merges-memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 1 $G pipelined_cluster_and_kernel_merges_match_cpu
tar -czf $OUT/call1.tgz -C $OUT r
grep -h -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard' $R/san-*.log | sort | uniq -c
