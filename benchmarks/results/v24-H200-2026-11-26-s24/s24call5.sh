#!/usr/bin/env bash
# Session 24 call 5 (H200): dd54ced (the map stores shared by the planning kernel and block 0;
# PTX the same up to register numbers in rpa_plan_ws): the paths through rpa_plan_ws (one block
# per pair, decode-apart) and the self-planning path, with the sanitizers on the small cases.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|passed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-200)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
s ws-all 90 env XGK_GPU_CASES_PERCENT=100 $G tiled_ws_kernel_matches_cpu
s ws-perpair 90 env XGK_GPU_CASES_PERCENT=100 XGK_WS_PERSISTENT=0 $G tiled_ws_kernel_matches_cpu
s graph 60 $G tiled_ws_graph_replays_follow_new_metadata
s apart 90 env XGK_GPU_CASES_PERCENT=100 $G decode_rows_apart_match_cpu
s san-racecheck 90 compute-sanitizer --tool racecheck --error-exitcode 1 $G tiled_ws_kernel_small_cases
tar -czf $OUT/call5.tgz -C $OUT r
