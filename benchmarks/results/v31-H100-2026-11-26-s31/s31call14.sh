#!/usr/bin/env bash
# Session 31 call 14 (one H100): the cluster merge under the fp8 key-rows rule, auto against cl0.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
E=float8_e4m3fn
P="python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time"
step g1-a 90 $P --cells 1x2048:$E,1x8192:$E,4x2048:$E,4x8192:$E,16x2048:$E --variants auto,auto:cl0 --out $R/g1-a.json
step g1-b 90 $P --cells 1x2048:$E,1x8192:$E,4x2048:$E,4x8192:$E,16x2048:$E --variants auto:cl0,auto --out $R/g1-b.json
step g2 90 $P --geometry G2 --cells 1x8192:$E,1x32768:$E,16x2048:$E --variants auto,auto:cl0 --out $R/g2.json
step g3 90 $P --geometry G3 --cells 1x8192:$E,1x32768:$E,4x8192:$E --variants auto:cl0,auto --out $R/g3.json
pack call14
for f in g1-a g1-b g2 g3; do grep -A6 "^case" $R/$f.log | grep -v "^|\|^wrote\|^ours\|^$" | cut -c1-100; done
grep -h plan $R/g1-a.log $R/g2.log $R/g3.log | grep -v captured | grep "cluster: true" | sed 's/.*per SM: //;s/, 32 q.*page 16, / /;s/Auto.*-> .*splits/ splits/' | cut -c1-120 | sort -u
