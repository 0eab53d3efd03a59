#!/usr/bin/env bash
# Session 20 call 5 (H200): the review's launch refactor (launch_attention) on the GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|geometric|passed' $R/$name.log | tr '\n' ' ' | cut -c1-200)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1"
s suite 150 env XGK_GPU_CASES_PERCENT=10 $G --skip paged_attention_long_context_128k
s apart 120 $G --exact decode_rows_apart_match_cpu --nocapture
s torch 200 python3 -m pytest -q -s tests/python/test_torch.py tests/python/test_examples.py
s jax 300 python3 -m pytest -q -m gpu tests/python/test_jax_gpu.py
tar -czf $OUT/call5.tgz -C $OUT r
