#!/usr/bin/env bash
# Session 26 call 2 (H200): 23b38df (the two-launch mix, the proxy fence after the poll): the Rust
# GPU tests that run the changed kernels in every schedule, the sanitizers on them, the GPU suite.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|runs passed|replays passed|links passed|failed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-200)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
s graph 90 $G tiled_ws_graph_replays_follow_new_metadata
s apart 90 env XGK_GPU_CASES_PERCENT=100 $G decode_rows_apart_match_cpu
s chained 60 $G programmatic_launches_chained_through_data_match_cpu
s graph-perpair 60 env XGK_WS_PERSISTENT=0 $G tiled_ws_graph_replays_follow_new_metadata
s ws-all 100 env XGK_GPU_CASES_PERCENT=100 $G tiled_ws_kernel_matches_cpu
tar -czf $OUT/call2.tgz -C $OUT r
for tool in racecheck synccheck memcheck; do
  s san-apart-$tool 100 env XGK_GPU_CASES_PERCENT=30 compute-sanitizer --tool $tool --error-exitcode 1 $G decode_rows_apart_match_cpu
done
tar -czf $OUT/call2.tgz -C $OUT r
s san-graph-memcheck 100 compute-sanitizer --tool memcheck --error-exitcode 1 $G tiled_ws_graph_replays_follow_new_metadata
s san-ws-racecheck 90 compute-sanitizer --tool racecheck --error-exitcode 1 $G tiled_ws_kernel_small_cases
tar -czf $OUT/call2.tgz -C $OUT r
s suite 120 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
tar -czf $OUT/call2.tgz -C $OUT r
grep -h -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard' $R/san-*.log | sort | uniq -c
