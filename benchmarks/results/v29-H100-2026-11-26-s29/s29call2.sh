#!/usr/bin/env bash
# Session 29 call 2 (H100): the plan rules, tuned on H200s since session 9, swept on the H100 with
# switches only (no new build): the large 16-bit cells (stages, pipe mode, whole rows), the
# short cells (split sizes, cluster merge), fp8 (stages, splits, key rows); then the Rust GPU
# suite at 10 % (the current kernels' first correctness run on an H100).
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
P="python3 benchmarks/peers.py --no-jax --no-kernel-time"
s large 200 $P --cells 64x32768,256x8192,64x8192,16x32768,256x2048,64x2048,128x2048,32x4096 \
  --variants auto,auto:st3,auto:st4,auto:pm0,auto:pm1,auto:st3:mc1000 --out $R/large.json
tar -czf $OUT/call2.tgz -C $OUT r
s short 100 python3 benchmarks/peers.py --no-jax --cells 1x512,1x2048,4x512,4x2048,1x8192 \
  --variants auto,auto:cl0,auto:ms2,auto:ms4,auto:st4,auto:tp0 --out $R/short.json
tar -czf $OUT/call2.tgz -C $OUT r
s fp8 100 $P --cells 1x32768:float8_e4m3fn,32x4096:float8_e4m3fn,64x8192:float8_e4m3fn,1x32768 \
  --variants auto,auto:st3,auto:st4,auto:st5,auto:kr2,auto:ms16,auto:ms32,auto:cl0 --out $R/fp8.json
tar -czf $OUT/call2.tgz -C $OUT r
s suite 180 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
grep -E "test result|FAILED|panicked" $R/suite.log | tail -5
tar -czf $OUT/call2.tgz -C $OUT r
for f in large short fp8; do grep -B2 -A80 "^case" $R/$f.log | grep -v "^|" | cut -c1-200; done
