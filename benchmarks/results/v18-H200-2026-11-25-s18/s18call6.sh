#!/usr/bin/env bash
# Session 18 call 6 (H200): page sizes with the final build (key rows for 16-bit KV).
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s"; }
s peers-pages 150 python3 benchmarks/peers.py --suite pages --no-jax --variants auto --out $R/peers-pages.json
grep -A16 "^case" $R/peers-pages.log | cut -c1-100
