#!/usr/bin/env bash
# Session 23 call 5 (H200): the bulk-store epilogue's build through the front ends: torch on CUDA
# and JAX on CUDA (against ref_ragged_paged_attention, command buffers among them).
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $R/$name.log | cut -c1-200)"; }
s torch 150 python3 -m pytest -q -s tests/python/test_torch.py tests/python/test_examples.py
tar -czf $OUT/call5.tgz -C $OUT r
s jax 240 python3 -m pytest -q -m gpu tests/python/test_jax_gpu.py
tar -czf $OUT/call5.tgz -C $OUT r
