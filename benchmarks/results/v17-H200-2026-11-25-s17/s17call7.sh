#!/usr/bin/env bash
# Session 17 call 7 (H200): the review's commits (host: planned_slots, for_device's lock;
# benchmarks: time_behind_spin): Rust GPU suite at 10 %, overhead's sync part in torch, peers --cold-l2 on two cells.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|panicked' $R/$name.log | tr '\n' ' ' | cut -c1-200)"; }
s gpu-suite 170 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
s overhead-sync 120 python3 benchmarks/overhead.py --parts sync --no-jax-sync --out $R/overhead-sync.json
s cold 90 python3 benchmarks/peers.py --suite decode --no-jax --cold-l2 --filter "decode 4x512,decode 1x2048" --variants auto --out $R/cold.json
tail -3 $R/overhead-sync.log | cut -c1-300
grep -A3 "^case" $R/cold.log | cut -c1-100
