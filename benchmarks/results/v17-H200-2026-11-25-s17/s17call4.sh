#!/usr/bin/env bash
# Session 17 call 4 (H200): fp8 head_dim-128 kernels compiled for four blocks per SM (experiment
# library exp-b4) against the final build on the fp8 cells; the final build's sanitizers (memcheck,
# synccheck on the small cases), torch, bad inputs and JAX GPU tests; overhead (torch per call,
# call + sync in torch and JAX).
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
xz -dc .carry/exp-b4.so.xz > /tmp/exp-b4.so
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'SUMMARY|test result|panicked|passed|failed' $R/$name.log | tr '\n' ' ' | cut -c1-200)"; }
F="float8,1x32768 bf16"
s fp8-final 100 python3 benchmarks/peers.py --suite features --no-jax --no-flashinfer --filter "$F" --variants auto,auto:st3 --out $R/fp8-final.json
s fp8-b4 100 env XLA_GPU_KERNELS_LIB=/tmp/exp-b4.so python3 benchmarks/peers.py --suite features --no-jax --no-flashinfer --filter "$F" --variants auto,auto:st3 --out $R/fp8-b4.json
tar -czf $OUT/call4.tgz -C $OUT r
G=".gpu/bin/gpu --include-ignored --test-threads=1 --exact"
s san-memcheck-small 120 compute-sanitizer --tool memcheck --error-exitcode 1 $G pipelined_kernel_small_cases
s san-synccheck-small 120 compute-sanitizer --tool synccheck --error-exitcode 1 $G pipelined_kernel_small_cases
s torch-gpu 150 python3 -m pytest -q -s tests/python/test_torch.py tests/python/test_examples.py
s bad-inputs 60 python3 -m pytest -q -m gpu tests/python/test_bad_inputs_gpu.py
tar -czf $OUT/call4.tgz -C $OUT r
s jax-gpu 300 python3 -m pytest -q -m gpu tests/python/test_jax_gpu.py
tar -czf $OUT/call4.tgz -C $OUT r
grep -A4 "^case" $R/fp8-final.log | cut -c1-120
grep -A4 "^case" $R/fp8-b4.log | cut -c1-120
