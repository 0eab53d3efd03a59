#!/usr/bin/env bash
# Session 18 call 4 (H200): the final build (key rows by default for 16-bit KV, pipe mode by
# launch): the tables (decode warm and L2-cold, features with fp8 in both layouts, uneven), the
# Rust GPU suite, racecheck on the merge test.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s"; }
s peers-decode 120 python3 benchmarks/peers.py --suite decode --no-jax --variants auto --out $R/peers-decode.json
tar -czf $OUT/call4.tgz -C $OUT r
s peers-decode-cold 120 python3 benchmarks/peers.py --suite decode --no-jax --cold-l2 --variants auto --out $R/peers-decode-cold.json
tar -czf $OUT/call4.tgz -C $OUT r
s peers-features 120 python3 benchmarks/peers.py --suite features --no-jax --variants auto,auto:kr2 --out $R/peers-features.json
tar -czf $OUT/call4.tgz -C $OUT r
s peers-uneven 60 python3 benchmarks/peers.py --suite uneven --no-jax --variants auto --out $R/peers-uneven.json
tar -czf $OUT/call4.tgz -C $OUT r
s gpu-suite 170 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
tar -czf $OUT/call4.tgz -C $OUT r
G=".gpu/bin/gpu --include-ignored --test-threads=1 --exact"
s san-racecheck-merges 120 compute-sanitizer --tool racecheck --error-exitcode 1 $G pipelined_cluster_and_kernel_merges_match_cpu
tar -czf $OUT/call4.tgz -C $OUT r
grep -E "test result|FAILED|panicked" $R/gpu-suite.log | head; grep -E "SUMMARY|test result" $R/san-racecheck-merges.log
for f in peers-decode peers-decode-cold peers-features peers-uneven; do grep -A23 "^case" $R/$f.log | cut -c1-100; done
