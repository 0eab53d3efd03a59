#!/usr/bin/env bash
# Session 29 call 5 (nvidia-h200-x2, two GPUs): (1) on GPU 0, the whole-rows rule for grids that
# fill the SMs unsplit (this build's default) against the split model's plan (`fg1`), warm and
# L2-cold: G1 16 x {512, 2k, 8k, 32k}, G3 (MHA, 32 KV heads) 4 x {512, 2k, 8k}; (2) the several-GPU
# tests and benchmark, never run on GPUs before: tensor/data parallel under JAX sharding, torch
# ops on the second GPU, the tensor-parallel example, tensor_parallel.py; (3) GPU 0's G1 decode
# table with this build beside FlashInfer.
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed|geometric|error' $R/$name.log | tail -1 | cut -c1-150)"; }
nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader; env | grep -E "NCCL_NVLS|MULTICAST|NVSHMEM_DISABLE" | tr '\n' ' '; echo
P="python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time"
export CUDA_VISIBLE_DEVICES=0
s ab-g1-warm 60 $P --cells 16x512,16x2048,16x8192,16x32768 --variants auto,auto:fg1 --out $R/ab-g1-warm.json
s ab-g1-cold 60 $P --cold-l2 --cells 16x512,16x2048,16x8192,16x32768 --variants auto,auto:fg1 --out $R/ab-g1-cold.json
s ab-g3 60 $P --geometry G3 --cells 4x512,4x2048,4x8192 --variants auto,auto:fg1 --out $R/ab-g3.json
unset CUDA_VISIBLE_DEVICES
tar -czf $OUT/call5.tgz -C $OUT r
s sharding-gpu 230 python3 -m pytest -q -s -m gpu tests/python/test_sharding_gpu.py
s torch-multi-gpu 60 python3 -m pytest -q -s -m gpu tests/python/test_torch_multi_gpu.py
tar -czf $OUT/call5.tgz -C $OUT r
s tp-bench 120 python3 benchmarks/tensor_parallel.py --out $R/tensor-parallel.json
tar -czf $OUT/call5.tgz -C $OUT r
for f in ab-g1-warm ab-g1-cold ab-g3; do grep -A6 "^case" $R/$f.log | grep -v "^|" | cut -c1-100; done
tail -15 $R/tp-bench.log
grep -E "passed|failed|Error" $R/sharding-gpu.log $R/torch-multi-gpu.log | tail -6
