#!/usr/bin/env bash
# Session 21 call 4 (H200): the committed build (the epilogue staged in the Q tile, no prefetch:
# call 3's `epiq` PTX): correctness (ws tests at every case in three schedules, decode-apart,
# the Rust GPU suite at 10 %, sanitizers on the ws small cases, torch on CUDA), then the G1
# prefill table beside FlashInfer.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|geometric|cases passed|passed|failed' $R/$name.log | tail -3 | tr '\n' ' ' | cut -c1-250)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
s ws-all 120 env XGK_GPU_CASES_PERCENT=100 $G tiled_ws_kernel_matches_cpu
s ws-static 120 env XGK_GPU_CASES_PERCENT=100 XGK_WS_PERSISTENT=1 $G tiled_ws_kernel_matches_cpu
s ws-perpair 120 env XGK_GPU_CASES_PERCENT=100 XGK_WS_PERSISTENT=0 $G tiled_ws_kernel_matches_cpu
for tool in racecheck synccheck memcheck; do
  s san-$tool 150 compute-sanitizer --tool $tool --error-exitcode 1 $G tiled_ws_kernel_small_cases
done
tar -czf $OUT/call4.tgz -C $OUT r
s suite 200 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
s torch 150 python3 -m pytest -q -s tests/python/test_torch.py tests/python/test_examples.py
tar -czf $OUT/call4.tgz -C $OUT r
s prefill 200 python3 benchmarks/peers.py --suite prefill --no-jax --variants auto --out $R/prefill.json
tar -czf $OUT/call4.tgz -C $OUT r
grep -A9 "^case" $R/prefill.log | grep -v "^|" | cut -c1-120
