#!/usr/bin/env bash
# Session 29 call 3 (H100): the G1 prefill table beside FlashInfer (the README's H100 prefill table
# is session 6's, before the warp-specialized kernel's sessions 20-26); the short decode cells
# with and without the cluster merge, warm and L2-cold, in two processes; fp8 1 x 32k with fewer
# splits; the page sizes.
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'geometric' $R/$name.log | head -1 | cut -c1-120)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
s prefill 250 python3 benchmarks/peers.py --suite prefill --no-jax --variants auto --out $R/prefill.json
tar -czf $OUT/call3.tgz -C $OUT r
C=1x512,1x2048,4x512,4x2048,16x512,1x8192,1x32768:float8_e4m3fn,1x32768
V=auto,auto:cl0,auto:ms16
s short-warm-a 70 python3 benchmarks/peers.py --no-jax --cells $C --variants $V --out $R/short-warm-a.json
s short-cold-a 70 python3 benchmarks/peers.py --no-jax --cold-l2 --cells $C --variants $V --out $R/short-cold-a.json
s short-warm-b 70 python3 benchmarks/peers.py --no-jax --no-flashinfer --cells $C --variants auto:cl0,auto,auto:ms16 --out $R/short-warm-b.json
tar -czf $OUT/call3.tgz -C $OUT r
s pages 90 python3 benchmarks/peers.py --suite pages --no-jax --no-kernel-time --out $R/pages.json
tar -czf $OUT/call3.tgz -C $OUT r
grep -A9 "^case" $R/prefill.log | grep -v "^|" | cut -c1-110
for f in short-warm-a short-cold-a short-warm-b; do grep -A10 "^case" $R/$f.log | grep -v "^|" | cut -c1-150; done
grep -A16 "^case" $R/pages.log | grep -v "^|" | cut -c1-110
