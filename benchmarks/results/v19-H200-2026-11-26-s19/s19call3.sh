#!/usr/bin/env bash
# Session 19 call 3 (H200): the review build's tables (G1 decode warm, features, uneven; FlashInfer
# in the same process) and racecheck on the merge test (both layouts).
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|geometric' $R/$name.log | tr '\n' ' ' | cut -c1-200)"; }
s peers-decode 240 python3 benchmarks/peers.py --suite decode --no-jax --out $R/peers-decode.json
tar -czf $OUT/call3.tgz -C $OUT r
s peers-features 120 python3 benchmarks/peers.py --suite features --no-jax --out $R/peers-features.json
s peers-uneven 90 python3 benchmarks/peers.py --suite uneven --no-jax --out $R/peers-uneven.json
tar -czf $OUT/call3.tgz -C $OUT r
G=".gpu/bin/gpu --include-ignored --test-threads=1"
s san-racecheck-merges 220 compute-sanitizer --tool racecheck --error-exitcode 1 $G --exact pipelined_cluster_and_kernel_merges_match_cpu
tar -czf $OUT/call3.tgz -C $OUT r
for f in peers-decode peers-features peers-uneven; do grep -A30 "^case" $R/$f.log | grep -v "^|" | cut -c1-150; done
