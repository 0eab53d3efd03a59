#!/usr/bin/env bash
# Session 18 call 3 (H200): key rows with both pipe modes over the decode matrix, features and
# uneven; sanitizers on the small cases and the merge test (both layouts).
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s"; }
s decode 150 python3 benchmarks/peers.py --suite decode --no-jax --variants auto:kr1,auto:kr1:pm0 --out $R/decode.json
tar -czf $OUT/call3.tgz -C $OUT r
s features 150 python3 benchmarks/peers.py --suite features --no-jax --variants auto:kr1,auto:kr1:pm0,auto:kr1:pb3 --out $R/features.json
tar -czf $OUT/call3.tgz -C $OUT r
s uneven 60 python3 benchmarks/peers.py --suite uneven --no-jax --variants auto:kr1,auto:kr1:pm0 --out $R/uneven.json
tar -czf $OUT/call3.tgz -C $OUT r
G=".gpu/bin/gpu --include-ignored --test-threads=1 --exact"
s san-racecheck-small 100 compute-sanitizer --tool racecheck --error-exitcode 1 $G pipelined_kernel_small_cases
s san-memcheck-small 80 compute-sanitizer --tool memcheck --error-exitcode 1 $G pipelined_kernel_small_cases
s san-synccheck-small 80 compute-sanitizer --tool synccheck --error-exitcode 1 $G pipelined_kernel_small_cases
s san-memcheck-merges 100 compute-sanitizer --tool memcheck --error-exitcode 1 $G pipelined_cluster_and_kernel_merges_match_cpu
tar -czf $OUT/call3.tgz -C $OUT r
for f in san-racecheck-small san-memcheck-small san-synccheck-small san-memcheck-merges; do echo "== $f"; grep -E "SUMMARY|test result" $R/$f.log; done
for f in decode features uneven; do grep -A23 "^case" $R/$f.log | cut -c1-120; done
