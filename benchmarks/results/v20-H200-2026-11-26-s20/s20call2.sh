#!/usr/bin/env bash
# Session 20 call 2 (H200): the mixes' prefill and decode rows apart, by kernel.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|geometric' $R/$name.log | tr '\n' ' ' | cut -c1-200)"; }
s mixparts 240 python3 benchmarks/peers.py --suite mixparts --no-jax --variants auto,tiled-ws,tiled-wgmma --out $R/mixparts.json
tar -czf $OUT/call2.tgz -C $OUT r
s mixes 200 python3 benchmarks/peers.py --suite prefill --filter mix --no-jax --variants auto,tiled-wgmma,tiled --out $R/mixes.json
tar -czf $OUT/call2.tgz -C $OUT r
for f in mixparts mixes; do grep -A12 "^case" $R/$f.log | cut -c1-250; grep "^\[" $R/$f.log | cut -c1-250; done
