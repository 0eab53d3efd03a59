#!/usr/bin/env bash
# Session 27 call 7 (H200): fc91f18 (the graph-replay tests share their replay and direct-call
# checks): both graph-replay tests, and JAX on CUDA.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|replays passed|passed|failed|panicked' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-220)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
s graph-split 90 $G split_decode_graph_replays_follow_new_metadata
s graph-ws 90 $G tiled_ws_graph_replays_follow_new_metadata
tar -czf $OUT/call7.tgz -C $OUT r
s jax 330 python3 -m pytest -q -m gpu tests/python/test_jax_gpu.py
tar -czf $OUT/call7.tgz -C $OUT r
