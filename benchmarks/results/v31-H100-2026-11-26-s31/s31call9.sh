#!/usr/bin/env bash
# Session 31 call 9 (one H100): the fp8 key-rows rule against the previous default (kr1) on every
# fp8 shape at hand; the features suite beside FlashInfer; the Rust GPU suite at 10 %.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
E=float8_e4m3fn; F=float8_e5m2
G1=1x2048:$E,1x8192:$E,1x32768:$E,4x8192:$E,16x2048:$E,32x4096:$E,64x512:$E,64x8192:$E,1x32768:$F,32x4096:$F,1x32768
P="python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time"
step g1-a 150 $P --cells $G1 --variants auto,auto:kr1 --out $R/g1-a.json
step g1-b 150 $P --cells $G1 --variants auto:kr1,auto --out $R/g1-b.json
step g2 90 $P --geometry G2 --cells 1x32768:$E,16x2048:$E,32x4096:$E --variants auto,auto:kr1 --out $R/g2.json
step g3 90 $P --geometry G3 --cells 1x32768:$E,32x4096:$E --variants auto,auto:kr1 --out $R/g3.json
pack call9
step features 150 python3 benchmarks/peers.py --suite features --no-jax --out $R/features.json
pack call9
step suite 200 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
pack call9
for f in g1-a g1-b g2 g3; do grep -A12 "^case" $R/$f.log | grep -v "^|\|^wrote\|^ours\|^$" | cut -c1-100; done
grep -A14 "^case" $R/features.log | grep -v "^|\|^wrote" | cut -c1-100
tail -2 $R/suite.log
