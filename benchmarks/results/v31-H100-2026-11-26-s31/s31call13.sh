#!/usr/bin/env bash
# Session 31 call 13 (one H100): G3 fp8 1 x 32k under the fp8 rule, clustered or not.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
P="python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time --geometry G3 --cells 1x32768:float8_e4m3fn,1x8192:float8_e4m3fn"
step g3-a 90 $P --variants auto,auto:cl0,auto:kr1,auto:kr2 --out $R/g3-a.json
step g3-b 90 $P --variants auto:kr2,auto:kr1,auto:cl0,auto --out $R/g3-b.json
pack call13
for f in g3-a g3-b; do grep -A3 "^case" $R/$f.log | grep -v "^|\|^wrote" | cut -c1-120; done
grep plan $R/g3-a.log | grep captured | sed 's/.*sequence, //;s/Auto.*-> //' | cut -c1-180 | sort -u
