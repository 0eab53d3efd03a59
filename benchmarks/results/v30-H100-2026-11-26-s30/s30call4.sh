#!/usr/bin/env bash
# Session 30 call 4 (two GPUs): the tensor-parallel example standalone, timed; then the several-GPU
# JAX tests with per-test durations (session 29 stopped them at 300 s before the example's test).
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E ' passed| failed|max error' $R/$name.log | tail -1 | cut -c1-220)"; }
nvidia-smi -L; env | grep -E "NCCL_NVLS|MULTICAST|NVSHMEM_DISABLE" | tr '\n' ' '; echo
s example 200 python3 examples/jax_tensor_parallel_decode.py --devices 2 --steps 16
tar -czf $OUT/call4.tgz -C $OUT r
s sharding-gpu 370 python3 -m pytest -v -s -m gpu --durations=0 tests/python/test_sharding_gpu.py
tar -czf $OUT/call4.tgz -C $OUT r
grep -E "PASSED|FAILED|ERROR|s call|s setup" $R/sharding-gpu.log | cut -c1-140 | tail -25
tail -5 $R/example.log
