#!/usr/bin/env bash
# Session 32 call 5 (one H100): the JAX tests on CUDA (command buffers among them) and the host
# cost of every call shape with this build's defaults.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
step host 200 .gpu/bin/host_overhead --bench --noplot
pack call5
step jax 380 python3 -m pytest -q -s -m gpu tests/python/test_jax_gpu.py
pack call5
grep -E "time:" -B1 $R/host.log | grep -v "^--" | paste - - | sed 's/  */ /g' | cut -c1-100
grep -E "launches per step|passed|failed" $R/jax.log | tail -6
