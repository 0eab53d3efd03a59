#!/usr/bin/env bash
# Session 26 call 6 (H200): the review's commit (one publish/poll pair in gpu_scope; rpa_plan_ws and
# the by-sequence decode kernels issue their fence after the tag arithmetic): the tests that run
# them, racecheck and memcheck on decode-apart.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|runs passed|replays passed|links passed|failed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-200)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
s graph 90 $G tiled_ws_graph_replays_follow_new_metadata
s graph-perpair 60 env XGK_WS_PERSISTENT=0 $G tiled_ws_graph_replays_follow_new_metadata
s apart 90 env XGK_GPU_CASES_PERCENT=100 $G decode_rows_apart_match_cpu
s chained 60 $G programmatic_launches_chained_through_data_match_cpu
s ws-perpair 90 env XGK_WS_PERSISTENT=0 $G tiled_ws_kernel_small_cases
for tool in racecheck memcheck; do
  s san-apart-$tool 100 env XGK_GPU_CASES_PERCENT=30 compute-sanitizer --tool $tool --error-exitcode 1 $G decode_rows_apart_match_cpu
done
tar -czf $OUT/call6.tgz -C $OUT r
