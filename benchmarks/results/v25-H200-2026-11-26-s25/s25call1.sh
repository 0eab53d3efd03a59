#!/usr/bin/env bash
# Session 25 call 1 (H200): how much a mix's decode and prefill rows could overlap (mix_overlap.py),
# and the G1 prefill table beside FlashInfer on dd54ced's build.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'geometric|passed|failed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-220)"; }
s overlap 150 python3 benchmarks/mix_overlap.py --out $R/overlap.json
tar -czf $OUT/call1.tgz -C $OUT r
s prefill 260 python3 benchmarks/peers.py --suite prefill --no-jax --variants auto --out $R/prefill.json
tar -czf $OUT/call1.tgz -C $OUT r
tail -4 $R/overlap.log
grep -A9 "^case" $R/prefill.log | grep -v "^|" | cut -c1-120
