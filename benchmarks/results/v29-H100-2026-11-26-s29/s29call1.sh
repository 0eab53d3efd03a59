#!/usr/bin/env bash
# Session 29 call 1 (H100, the first H100 lent since session 8): the current kernels' decode tables
# beside FlashInfer (G1 warm, features incl. fp8, uneven). The H100 tables in the README are
# session 7's kernels (commit 4569368); every kernel change since was measured on H200s only.
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'geometric' $R/$name.log | tr '\n' ' ' | cut -c1-200)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
s peers-decode 290 python3 benchmarks/peers.py --suite decode --no-jax --out $R/peers-decode.json
tar -czf $OUT/call1.tgz -C $OUT r
s peers-features 150 python3 benchmarks/peers.py --suite features --no-jax --out $R/peers-features.json
tar -czf $OUT/call1.tgz -C $OUT r
s peers-uneven 100 python3 benchmarks/peers.py --suite uneven --no-jax --out $R/peers-uneven.json
tar -czf $OUT/call1.tgz -C $OUT r
for f in peers-decode peers-features peers-uneven; do grep -A30 "^case" $R/$f.log | grep -v "^|" | cut -c1-150; done
