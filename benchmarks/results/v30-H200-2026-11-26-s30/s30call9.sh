#!/usr/bin/env bash
# Session 30 call 9 (an H200): whole rows by DRAM bandwidth per SM, auto against `fg1`; then the
# G1 decode table beside FlashInfer.
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'geometric' $R/$name.log | head -1 | cut -c1-120)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
P="python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time"
s fg-g1 40 $P --cells 16x512,16x2048,16x8192 --variants auto,auto:fg1 --out $R/fg-g1.json
s fg-g3 40 $P --geometry G3 --cells 4x512,4x2048,4x8192 --variants auto,auto:fg1 --out $R/fg-g3.json
tar -czf $OUT/call9.tgz -C $OUT r
s peers-decode 130 python3 benchmarks/peers.py --suite decode --no-jax --out $R/peers-decode.json
tar -czf $OUT/call9.tgz -C $OUT r
for f in fg-g1 fg-g3; do grep -A4 "^case" $R/$f.log | grep -v "^|\|^wrote" | cut -c1-110; done
grep -A24 "^case" $R/peers-decode.log | grep -v "^|\|^wrote" | cut -c1-110
