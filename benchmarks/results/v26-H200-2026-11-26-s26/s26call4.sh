#!/usr/bin/env bash
# Session 26 call 4 (H200): 23b38df: JAX on CUDA (command buffers among them), racecheck and
# synccheck on the graph replays (a mix in two launches among them).
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|passed|failed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-200)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
for tool in racecheck synccheck; do
  s san-graph-$tool 150 compute-sanitizer --tool $tool --error-exitcode 1 $G tiled_ws_graph_replays_follow_new_metadata
done
s san-chained-memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 1 $G programmatic_launches_chained_through_data_match_cpu
tar -czf $OUT/call4.tgz -C $OUT r
s jax 400 python3 -m pytest -q -m gpu tests/python/test_jax_gpu.py
tar -czf $OUT/call4.tgz -C $OUT r
