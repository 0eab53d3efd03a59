#!/usr/bin/env bash
# Session 26 call 3 (H200): 23b38df: the G1 prefill table beside FlashInfer (README), the host
# cost of every bench shape (criterion), the soak, torch on CUDA.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'geometric|passed|failed|failures' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-220)"; }
s prefill 240 python3 benchmarks/peers.py --suite prefill --no-jax --variants auto --out $R/prefill.json
tar -czf $OUT/call3.tgz -C $OUT r
s host 120 .gpu/bin/host_overhead --bench --noplot "ffi_cuda|capi_cuda|floor|ffi_decode_validate|tensor_map_encode"
tar -czf $OUT/call3.tgz -C $OUT r
s soak 100 env XGK_SOAK_CALLS=60000 XGK_SOAK_REPORT=$R/soak.txt .gpu/bin/soak --include-ignored --nocapture
s torch 180 python3 -m pytest -q -s tests/python/test_torch.py tests/python/test_examples.py
tar -czf $OUT/call3.tgz -C $OUT r
grep -A9 "^case" $R/prefill.log | grep -v "^|" | cut -c1-120
grep -E "^host_overhead|time:" $R/host.log | paste - - | awk '{print $1, $(NF-4), $(NF-3)}'
head -12 $R/soak.txt
