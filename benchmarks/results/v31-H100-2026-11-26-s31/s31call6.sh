#!/usr/bin/env bash
# Session 31 call 6 (one H100): fp8 1 x 32k against bf16 calls of the same bytes (1 x 16k), with
# the group-kernel merge (auto under capture) and merge blocks in the split grid (mm3).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
C=1x16384,1x32768,1x32768:float8_e4m3fn
P="python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time --cells $C"
step bytes-a 120 $P --variants auto,auto:mm3 --out $R/bytes-a.json
step bytes-b 120 $P --variants auto:mm3,auto --out $R/bytes-b.json
pack call6
for f in bytes-a bytes-b; do grep -A4 "^case" $R/$f.log | grep -v "^|\|^wrote" | cut -c1-110; done
