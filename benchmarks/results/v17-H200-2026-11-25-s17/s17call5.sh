#!/usr/bin/env bash
# Session 17 call 5 (H200): overhead of the final build: torch per call; call + sync in torch and
# JAX with both budgets (graph replays, isolated call).
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
t0=$SECONDS; timeout 300 python3 benchmarks/overhead.py --parts torch,sync --out $R/overhead.json > $R/overhead.log 2>&1; echo "overhead rc=$? $((SECONDS-t0))s"
tar -czf $OUT/call5.tgz -C $OUT r
grep -E "torch per call|x32768|x2048" $R/overhead.log | cut -c1-700
