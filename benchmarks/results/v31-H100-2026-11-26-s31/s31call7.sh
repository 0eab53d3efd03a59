#!/usr/bin/env bash
# Session 31 call 7 (one H100): fp8 1 x 32k in the key-rows kernel with the 16-bit cell's grid.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
V=auto,auto:ms16,auto:kr2,auto:kr2:ms16,auto:kr2:ms16:st3,auto:kr2:ms16:st4,auto:kr2:ms11,auto:kr2:pb2
P="python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time --cells 1x32768:float8_e4m3fn,1x16384"
step kr-a 120 $P --variants $V --out $R/kr-a.json
step kr-b 120 $P --variants $(echo $V | tr ',' '\n' | tac | paste -sd,) --out $R/kr-b.json
pack call7
for f in kr-a kr-b; do grep -A3 "^case" $R/$f.log | grep -v "^|\|^wrote" | cut -c1-220; done
grep plan $R/kr-a.log | grep e4m3 | grep captured | sed 's/.*-> //' | sort -u | cut -c1-200
