#!/usr/bin/env bash
# Session 29 call 7 (H100): this build's G1 decode table beside FlashInfer (whole rows where the
# unsplit grid fills the SMs), and the Rust GPU suite at 10 % on it (launches through
# KernelModule::for_launch).
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'geometric|test result' $R/$name.log | head -1 | cut -c1-140)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
s peers-decode 150 python3 benchmarks/peers.py --suite decode --no-jax --out $R/peers-decode.json
tar -czf $OUT/call7.tgz -C $OUT r
s suite 120 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
tar -czf $OUT/call7.tgz -C $OUT r
grep -A24 "^case" $R/peers-decode.log | grep -v "^|" | cut -c1-110
