#!/usr/bin/env bash
# Session 29 call 6 (two GPUs): torch ops on `cuda:1` after the fix (the legacy default stream,
# torch's default on every device, launched in the context of the tensors' device, not the
# current one); the torch suite on one GPU (the default stream's new path); the several-GPU JAX
# tests with their time (call 5 stopped them at 230 s), each test timed.
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E ' passed| failed' $R/$name.log | tail -1 | cut -c1-150)"; }
nvidia-smi -L
s torch-multi-gpu 60 python3 -m pytest -q -s -m gpu tests/python/test_torch_multi_gpu.py
s torch 150 python3 -m pytest -q -x tests/python/test_torch.py
tar -czf $OUT/call6.tgz -C $OUT r
s sharding-gpu 300 python3 -m pytest -v -s -m gpu --durations=0 tests/python/test_sharding_gpu.py
tar -czf $OUT/call6.tgz -C $OUT r
grep -E "PASSED|FAILED|ERROR|s call|s setup" $R/sharding-gpu.log | cut -c1-140 | tail -25
grep -E "Error|error" $R/torch-multi-gpu.log | head -5
