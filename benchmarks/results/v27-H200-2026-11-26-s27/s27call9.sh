#!/usr/bin/env bash
# Session 27 call 9 (H200): one poll for every flag (gpu_scope::wait_until_u64: relaxed loads, one
# fence): the tests of the kernels that wait (warp-specialized in both schedules, decode-apart,
# chained, split-decode graph replays, merges), the sanitizers on them.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|runs passed|replays passed|links passed|failed|panicked' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-200)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
s graph-split 90 $G split_decode_graph_replays_follow_new_metadata
s graph 90 $G tiled_ws_graph_replays_follow_new_metadata
s graph-perpair 60 env XGK_WS_PERSISTENT=0 $G tiled_ws_graph_replays_follow_new_metadata
s apart 90 env XGK_GPU_CASES_PERCENT=100 $G decode_rows_apart_match_cpu
s chained 60 $G programmatic_launches_chained_through_data_match_cpu
s merges 60 $G pipelined_cluster_and_kernel_merges_match_cpu
s ws-all 100 env XGK_GPU_CASES_PERCENT=100 $G tiled_ws_kernel_matches_cpu
tar -czf $OUT/call9.tgz -C $OUT r
for tool in racecheck synccheck memcheck; do
  s san-apart-$tool 100 env XGK_GPU_CASES_PERCENT=30 compute-sanitizer --tool $tool --error-exitcode 1 $G decode_rows_apart_match_cpu
  s san-graph-split-$tool 60 compute-sanitizer --tool $tool --error-exitcode 1 $G split_decode_graph_replays_follow_new_metadata
done
s san-graph-memcheck 100 compute-sanitizer --tool memcheck --error-exitcode 1 $G tiled_ws_graph_replays_follow_new_metadata
tar -czf $OUT/call9.tgz -C $OUT r
grep -h -E 'ERROR SUMMARY|RACECHECK SUMMARY' $R/san-*.log | sort | uniq -c
