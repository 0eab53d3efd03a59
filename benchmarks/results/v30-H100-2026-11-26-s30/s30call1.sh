#!/usr/bin/env bash
# Session 30 call 1 (one GPU): JAX on CUDA after the legacy-default-stream change (67b9156);
# fp8 1 x 32k's plan levers against bf16 1 x 32k, warm in two processes (the second reversed) and
# L2-cold; on an H200, session 29's whole-row rule against `fg1`.
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E ' passed| failed|geometric' $R/$name.log | tail -1 | cut -c1-150)"; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$GPU"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
s jax-gpu 240 python3 -m pytest -q -m gpu tests/python/test_jax_gpu.py
tar -czf $OUT/call1.tgz -C $OUT r
P="python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time"
C=1x32768:float8_e4m3fn,1x32768
V=auto,auto:ms12,auto:ms16,auto:ms20,auto:ms16:st4,auto:h1,auto:ms16:h1,auto:pm0,auto:pm1
VR=auto:pm1,auto:pm0,auto:ms16:h1,auto:h1,auto:ms16:st4,auto:ms20,auto:ms16,auto:ms12,auto
s fp8-warm-a 150 $P --cells $C --variants $V --out $R/fp8-warm-a.json
s fp8-warm-b 150 $P --cells $C --variants $VR --out $R/fp8-warm-b.json
s fp8-cold 150 $P --cold-l2 --cells $C --variants $V --out $R/fp8-cold.json
tar -czf $OUT/call1.tgz -C $OUT r
if [[ "$GPU" == *H200* ]]; then
  s ab-g1-warm 60 $P --cells 16x512,16x2048,16x8192 --variants auto,auto:fg1 --out $R/ab-g1-warm.json
  s ab-g1-cold 60 $P --cold-l2 --cells 16x512,16x2048,16x8192 --variants auto,auto:fg1 --out $R/ab-g1-cold.json
  s ab-g3-warm 60 $P --geometry G3 --cells 4x512,4x2048,4x8192 --variants auto,auto:fg1 --out $R/ab-g3-warm.json
  s ab-g3-cold 60 $P --cold-l2 --geometry G3 --cells 4x512,4x2048,4x8192 --variants auto,auto:fg1 --out $R/ab-g3-cold.json
  tar -czf $OUT/call1.tgz -C $OUT r
fi
for f in fp8-warm-a fp8-warm-b fp8-cold ab-g1-warm ab-g1-cold ab-g3-warm ab-g3-cold; do
  [ -f $R/$f.log ] && grep -A3 "^case" $R/$f.log | grep -v "^|" | cut -c1-220; done
tail -3 $R/jax-gpu.log
