#!/usr/bin/env bash
# Session 30 call 2 (one GPU): the pipe-mode rule (block barrier for long one-to-two-wave 16-bit
# grids, tuned on an H200) on the H100: auto against `pm1` / `pm0` on the cells it touches, warm
# twice (second process reversed) and L2-cold; G2, uneven, pages; then the JAX tests call 1 left.
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E ' passed| failed|geometric' $R/$name.log | tail -1 | cut -c1-150)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
P="python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time"
C=1x32768,4x8192,4x32768,16x8192,16x32768,32x4096,64x2048,64x8192,128x2048,64x32768
s pm-warm-a 130 $P --cells $C --variants auto,auto:pm1,auto:pm0 --out $R/pm-warm-a.json
s pm-warm-b 130 $P --cells $C --variants auto:pm0,auto:pm1,auto --out $R/pm-warm-b.json
s pm-cold 130 $P --cold-l2 --cells $C --variants auto,auto:pm1,auto:pm0 --out $R/pm-cold.json
tar -czf $OUT/call2.tgz -C $OUT r
s pm-g2 60 $P --geometry G2 --cells 32x4096,64x8192 --variants auto,auto:pm1,auto:pm0 --out $R/pm-g2.json
s pm-uneven 90 $P --suite uneven --variants auto,auto:pm1 --out $R/pm-uneven.json
s pm-pages 90 $P --suite pages --variants auto,auto:pm1 --out $R/pm-pages.json
tar -czf $OUT/call2.tgz -C $OUT r
s jax-rest 200 python3 -m pytest -q -m gpu -k "command_buffers or report" -s tests/python/test_jax_gpu.py
tar -czf $OUT/call2.tgz -C $OUT r
for f in pm-warm-a pm-warm-b pm-cold pm-g2 pm-uneven pm-pages; do
  [ -f $R/$f.log ] && grep -A16 "^case" $R/$f.log | grep -v "^|\|^wrote" | cut -c1-120; done
grep -E "command buffers|passed|failed" $R/jax-rest.log | tail -4
