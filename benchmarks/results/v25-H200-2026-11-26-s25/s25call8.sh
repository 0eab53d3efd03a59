#!/usr/bin/env bash
# Session 25 call 8 (H200): commit 06d765e (rpa_plan_ws publishes through plan_ready_word; its
# done-count store and fence before the tag arithmetic): the tests that run rpa_plan_ws.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|runs passed|replays passed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-200)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
s graph 90 $G tiled_ws_graph_replays_follow_new_metadata
s graph-perpair 60 env XGK_WS_PERSISTENT=0 $G tiled_ws_graph_replays_follow_new_metadata
s apart 120 env XGK_GPU_CASES_PERCENT=100 $G decode_rows_apart_match_cpu
s san-apart-racecheck 150 env XGK_GPU_CASES_PERCENT=30 compute-sanitizer --tool racecheck --error-exitcode 1 $G decode_rows_apart_match_cpu
s san-apart-memcheck 120 env XGK_GPU_CASES_PERCENT=30 compute-sanitizer --tool memcheck --error-exitcode 1 $G decode_rows_apart_match_cpu
s ws-perpair 90 env XGK_GPU_CASES_PERCENT=100 XGK_WS_PERSISTENT=0 $G tiled_ws_kernel_matches_cpu
tar -czf $OUT/call8.tgz -C $OUT r
