#!/usr/bin/env bash
# Session 32 call 5 (one H100): the JAX tests on CUDA (command buffers among them) and the host
# cost of every call shape with this build's defaults; the decode-apart test at 10 % of its cases
# again (its one-launch count no longer assumes a case stride).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
step apart 60 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --exact decode_rows_apart_match_cpu --nocapture
step host 150 .gpu/bin/host_overhead --bench --noplot
pack call5
step jax 380 python3 -m pytest -q -s -m gpu tests/python/test_jax_gpu.py
pack call5
grep -E "time:" -B1 $R/host.log | grep -v "^--" | paste - - | sed 's/  */ /g' | cut -c1-100
grep -E "launches per step|passed|failed" $R/jax.log | tail -6
grep -E "runs passed|test result" $R/apart.log
