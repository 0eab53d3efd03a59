#!/usr/bin/env bash
# Session 18 call 1 (H200): the key-rows layout: pipelined GPU tests in both layouts, then the
# decode suite (auto and auto:kr1) and fp8 / features, FlashInfer in the same process.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s"; }
XGK_GPU_CASES_PERCENT=10 s gpu-pipelined 150 .gpu/bin/gpu --include-ignored --test-threads=1 pipelined
tail -5 $R/gpu-pipelined.log; grep -E "FAILED|panicked|passed \(" $R/gpu-pipelined.log | head -8
tar -czf $OUT/call1.tgz -C $OUT r
s peers-decode 260 python3 benchmarks/peers.py --suite decode --no-jax --variants auto,auto:kr1 --out $R/peers-decode.json
tar -czf $OUT/call1.tgz -C $OUT r
s peers-features 150 python3 benchmarks/peers.py --suite features --no-jax --variants auto,auto:kr1 --out $R/peers-features.json
tar -czf $OUT/call1.tgz -C $OUT r
for f in peers-decode peers-features; do grep -A30 "^case" $R/$f.log | cut -c1-130; done
