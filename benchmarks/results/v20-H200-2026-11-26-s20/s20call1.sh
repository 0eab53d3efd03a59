#!/usr/bin/env bash
# Session 20 call 1 (H200): prefill and mixed batches beside FlashInfer (G1 and G4, never
# measured on the H200), the warp-specialized kernel's schedule switches, and ncu of both at
# 4 x 1024 and 1 x 8192.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|geometric' $R/$name.log | tr '\n' ' ' | cut -c1-200)"; }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $R/gpu.txt 2>&1
s prefill-G1 240 python3 benchmarks/peers.py --suite prefill --no-jax --variants auto,auto:ps0,auto:ps1,auto:pp0 --out $R/prefill-G1.json
tar -czf $OUT/call1.tgz -C $OUT r
s prefill-G4 120 python3 benchmarks/peers.py --suite prefill --geometry G4 --no-jax --out $R/prefill-G4.json
tar -czf $OUT/call1.tgz -C $OUT r
N="ncu --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats"
for impl in ours flashinfer; do
  s ncu-4x1024-$impl 90 $N python3 benchmarks/profile_case.py --seqs 1024x1024*4 --calls 2 --impl $impl
  s ncu-1x8192-$impl 90 $N python3 benchmarks/profile_case.py --seqs 8192x8192 --calls 2 --impl $impl
done
tar -czf $OUT/call1.tgz -C $OUT r
for f in prefill-G1 prefill-G4; do grep -A30 "^case" $R/$f.log | grep -v "^|" | cut -c1-200; done
for f in $R/ncu-*.log; do echo "== $f"; grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued" $f | head -40; done
