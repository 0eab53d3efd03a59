#!/usr/bin/env bash
# Session 20 call 3 (H200): decode rows apart: correctness (new test, invalid metadata through
# Auto, workspace modes, the suite at 10 %, sanitizers on the new test), the prefill/mix table
# with it on and off, and the decode table.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|geometric|passed' $R/$name.log | tr '\n' ' ' | cut -c1-200)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1"
s apart 120 $G --exact decode_rows_apart_match_cpu --nocapture
s invalid 120 $G --exact paged_attention_invalid_metadata_stays_in_bounds --nocapture
tar -czf $OUT/call3.tgz -C $OUT r
s prefill 200 python3 benchmarks/peers.py --suite prefill --no-jax --variants auto,auto:da0 --out $R/prefill.json
tar -czf $OUT/call3.tgz -C $OUT r
s suite 150 env XGK_GPU_CASES_PERCENT=10 $G --skip paged_attention_long_context_128k
tar -czf $OUT/call3.tgz -C $OUT r
s decode 240 python3 benchmarks/peers.py --suite decode --no-jax --out $R/decode.json
tar -czf $OUT/call3.tgz -C $OUT r
for tool in memcheck racecheck synccheck; do
  s san-$tool-apart 90 env XGK_GPU_CASES_PERCENT=20 compute-sanitizer --tool $tool --error-exitcode 1 $G --exact decode_rows_apart_match_cpu
done
tar -czf $OUT/call3.tgz -C $OUT r
grep -A12 "^case" $R/prefill.log | cut -c1-200
grep -A25 "^case" $R/decode.log | cut -c1-150
