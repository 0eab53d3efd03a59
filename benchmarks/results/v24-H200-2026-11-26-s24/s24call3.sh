#!/usr/bin/env bash
# Session 24 call 3 (H200): the Python front ends on CUDA with 7bef06e's library (the prefill call
# as one launch): torch (ops, CUDA graph capture, torch.compile) and JAX's GPU tests with their
# full time (command buffers among them).
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $R/$name.log | cut -c1-200)"; }
s torch 130 python3 -m pytest -q -s tests/python/test_torch.py tests/python/test_examples.py
tar -czf $OUT/call3.tgz -C $OUT r
s jax 420 python3 -m pytest -q -m gpu tests/python/test_jax_gpu.py
tar -czf $OUT/call3.tgz -C $OUT r
