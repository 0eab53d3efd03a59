#!/usr/bin/env bash
# Session 30 call 5 (two GPUs): the tensor-parallel example's test with the pytest process's GPU
# memory not preallocated (the fix), then with it preallocated (the old condition), then the whole
# several-GPU file with the fix.
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E ' passed| failed' $R/$name.log | tail -1 | cut -c1-220)"; }
nvidia-smi -L
s example-fixed 150 python3 -m pytest -q -s -m gpu -k example tests/python/test_sharding_gpu.py
tar -czf $OUT/call5.tgz -C $OUT r
s example-prealloc 130 env XLA_PYTHON_CLIENT_PREALLOCATE=true python3 -m pytest -q -s -m gpu -k example tests/python/test_sharding_gpu.py
tar -czf $OUT/call5.tgz -C $OUT r
s sharding-gpu 290 python3 -m pytest -v -s -m gpu --durations=0 tests/python/test_sharding_gpu.py
tar -czf $OUT/call5.tgz -C $OUT r
grep -E "PASSED|FAILED|ERROR|s call|s setup" $R/sharding-gpu.log | cut -c1-140 | tail -28
