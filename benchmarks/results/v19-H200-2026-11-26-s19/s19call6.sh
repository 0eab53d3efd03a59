#!/usr/bin/env bash
# Session 19 call 6 (H200): the final build: Rust GPU suite, the small pipelined cases with fresh
# seeds and under the sanitizers, the fp8 cells beside their bf16 controls.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|XGK_TEST_SEED' $R/$name.log | tr '\n' ' ' | cut -c1-220)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1"
s gpu-suite 150 env XGK_GPU_CASES_PERCENT=10 $G --skip paged_attention_long_context_128k
for i in 1 2 3; do s small-$i 60 $G --exact pipelined_kernel_small_cases --nocapture; done
for t in memcheck racecheck synccheck; do
  s san-$t-small 150 compute-sanitizer --tool $t --error-exitcode 1 $G --exact pipelined_kernel_small_cases
done
tar -czf $OUT/call6.tgz -C $OUT r
s fp8 120 python3 benchmarks/peers.py --suite features --no-jax --filter "float8,fp8 control" --out $R/fp8.json
tar -czf $OUT/call6.tgz -C $OUT r
grep -A8 "^case" $R/fp8.log | cut -c1-150
