#!/usr/bin/env bash
# Session 25 call 3 (H200): the new default (decode rows apart, tile kernel not waiting for the
# decode kernel): G1 prefill table beside FlashInfer, G2 / G3 prefill suites (auto, auto:da1),
# torch on CUDA.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'geometric|passed|failed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-220)"; }
s prefill 240 python3 benchmarks/peers.py --suite prefill --no-jax --variants auto --out $R/prefill.json
tar -czf $OUT/call3.tgz -C $OUT r
for g in G2 G3; do
  s prefill-$g 120 python3 benchmarks/peers.py --suite prefill --geometry $g --no-jax --no-flashinfer --variants auto,auto:da1 --out $R/prefill-$g.json
done
tar -czf $OUT/call3.tgz -C $OUT r
s torch 180 python3 -m pytest -q -s tests/python/test_torch.py tests/python/test_examples.py
tar -czf $OUT/call3.tgz -C $OUT r
grep -A9 "^case" $R/prefill.log | grep -v "^|" | cut -c1-120
for g in G2 G3; do grep -E "mix|prefill 4x|prefill 1x2" $R/prefill-$g.log | grep -v "^|" | tail -6 | cut -c1-120; done
