#!/usr/bin/env bash
# Session 21 call 7 (H200): the Q-tensor-map build (committed): torch and JAX on CUDA, and the G1
# prefill table beside FlashInfer for the README.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'geometric|passed|failed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-220)"; }
s prefill 200 python3 benchmarks/peers.py --suite prefill --no-jax --variants auto --out $R/prefill.json
tar -czf $OUT/call7.tgz -C $OUT r
s torch 150 python3 -m pytest -q -s tests/python/test_torch.py tests/python/test_examples.py
s jax 300 python3 -m pytest -q -m gpu tests/python/test_jax_gpu.py
tar -czf $OUT/call7.tgz -C $OUT r
grep -A9 "^case" $R/prefill.log | grep -v "^|" | cut -c1-120
