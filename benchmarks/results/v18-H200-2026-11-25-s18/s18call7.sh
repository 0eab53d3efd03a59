#!/usr/bin/env bash
# Session 18 call 7 (H200): page 1 (and 128) with the final build against pipe mode 1 and head rows.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
timeout 110 python3 benchmarks/peers.py --suite pages --no-jax --no-flashinfer --filter page1 --variants auto,auto:pm1,auto:kr0 --out $R/pages-page1.json > $R/pages-page1.log 2>&1; echo "rc=$?"
grep -A6 "^case" $R/pages-page1.log | cut -c1-120
