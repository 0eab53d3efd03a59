#!/usr/bin/env bash
# Session 25 call 7 (H200): the review's test change: the graph replays checked after the first
# replay of each metadata set too, in the three pair schedules, and under memcheck.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|replays passed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-200)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
s graph 90 $G tiled_ws_graph_replays_follow_new_metadata
s graph-perpair 60 env XGK_WS_PERSISTENT=0 $G tiled_ws_graph_replays_follow_new_metadata
s graph-static 60 env XGK_WS_PERSISTENT=1 $G tiled_ws_graph_replays_follow_new_metadata
s graph-da1 60 env XGK_RPA_DECODE_APART=1 $G tiled_ws_graph_replays_follow_new_metadata
s san-graph-memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 1 $G tiled_ws_graph_replays_follow_new_metadata
tar -czf $OUT/call7.tgz -C $OUT r
