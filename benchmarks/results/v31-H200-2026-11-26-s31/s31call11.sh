#!/usr/bin/env bash
# Session 31 call 11 (an H200 only): the features suite after the fp8 rule, which must leave the
# H200's fp8 plans as they were.
set -uo pipefail
cd "$(dirname "$0")/../../.."
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$GPU"
[[ "$GPU" == *H200* ]] || { echo "not an H200: nothing to do"; exit 0; }
source scripts/gpu_call_prelude.sh
step features 150 python3 benchmarks/peers.py --suite features --no-jax --out $R/features.json
pack call11
grep -A14 "^case" $R/features.log | grep -v "^|\|^wrote" | cut -c1-100
grep plan $R/features.log | grep e4m3 | sed 's/.*-> //' | cut -c1-120 | sort -u
