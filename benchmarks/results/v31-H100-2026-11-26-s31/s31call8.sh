#!/usr/bin/env bash
# Session 31 call 8 (one H100): fp8 1 x 32k in key rows with finer splits, bf16 1 x 32k beside it.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
V=auto,auto:kr2:pb2,auto:kr2:pb3,auto:kr2:pb4,auto:kr2:ms8,auto:kr2:ms6,auto:kr2:ms4,auto:kr2:pb2:h1
P="python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time --cells 1x32768:float8_e4m3fn,1x32768"
step pb-a 120 $P --variants $V --out $R/pb-a.json
step pb-b 120 $P --variants $(echo $V | tr ',' '\n' | tac | paste -sd,) --out $R/pb-b.json
step pb-big 120 python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time --cells 32x4096:float8_e4m3fn,64x8192:float8_e4m3fn --variants auto,auto:kr2:pb2,auto:kr2:ms8 --out $R/pb-big.json
pack call8
for f in pb-a pb-b pb-big; do grep -A3 "^case" $R/$f.log | grep -v "^|\|^wrote" | cut -c1-240; done
grep plan $R/pb-a.log | grep e4m3 | grep captured | sed 's/.*-> //' | sort -u | cut -c1-200
