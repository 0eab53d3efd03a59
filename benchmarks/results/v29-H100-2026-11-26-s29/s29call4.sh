#!/usr/bin/env bash
# Session 29 call 4 (H100): the split model planning with one resident block per SM (`pb1`)
# against auto on the one-wave decode cells (B 1-16, every context; 32 x 4k; fp8 1 x 32k),
# warm in two processes (the second in reverse order) and L2-cold. Call 3 found 16 x 512 10-14 %
# faster with whole rows (`ms16`) than with auto's two clustered splits.
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
C=1x512,1x2048,1x8192,1x32768,4x512,4x2048,4x8192,4x32768,16x512,16x2048,16x8192,16x32768,32x4096,1x32768:float8_e4m3fn,16x8192:float8_e4m3fn
P="python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time --cells $C"
s warm-a 120 $P --variants auto,auto:pb1 --out $R/warm-a.json
s warm-b 120 $P --variants auto:pb1,auto --out $R/warm-b.json
s cold 120 $P --cold-l2 --variants auto,auto:pb1 --out $R/cold.json
tar -czf $OUT/call4.tgz -C $OUT r
for f in warm-a warm-b cold; do grep -A16 "^case" $R/$f.log | grep -v "^|" | cut -c1-110; done
