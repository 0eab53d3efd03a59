#!/usr/bin/env bash
# Session 31 call 5 (the H200 of call 4, warm): whole rows against the split plan (call 4's
# 40 s limits were too short on the fresh machine), warm and L2-cold; the Rust GPU suite at 10 %.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
P="python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time"
step fg-g1 90 $P --cells 16x512,16x2048,16x8192 --variants auto,auto:fg1 --out $R/fg-g1.json
step fg-g3 90 $P --geometry G3 --cells 4x512,4x2048,4x8192 --variants auto,auto:fg1 --out $R/fg-g3.json
step fg-g1-cold 90 $P --cells 16x512,16x2048,16x8192 --variants auto,auto:fg1 --cold-l2 --out $R/fg-g1-cold.json
pack call5
step suite 200 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
pack call5
for f in fg-g1 fg-g3 fg-g1-cold; do grep -A4 "^case" $R/$f.log | grep -v "^|\|^wrote" | cut -c1-110; grep "plan" $R/$f.log | sort -u | grep -o "pages per sequence.*splits: [0-9]*" | cut -c1-40,150-400; done
tail -3 $R/suite.log
