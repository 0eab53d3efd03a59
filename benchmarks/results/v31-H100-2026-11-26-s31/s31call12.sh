#!/usr/bin/env bash
# Session 31 call 12 (one H100): the final build: the fp8 rule's plans, the Rust GPU suite,
# host_overhead, the torch tests on CUDA.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
E=float8_e4m3fn
step fp8 120 python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time --cells 1x32768:$E,4x8192:$E,32x4096:$E --variants auto,auto:kr2,auto:kr1 --out $R/fp8.json
step suite 200 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
pack call12
step host-overhead 150 .gpu/bin/host_overhead --bench --noplot 'plan|floor|prefill'
step torch 200 python3 -m pytest -q -s tests/python/test_torch.py tests/python/test_examples.py
pack call12
grep -A4 "^case" $R/fp8.log | grep -v "^|\|^wrote" | cut -c1-100
grep plan $R/fp8.log | grep captured | sed 's/.*-> //' | cut -c1-140 | sort -u
tail -2 $R/suite.log
grep -E "time:" -B1 $R/host-overhead.log | grep -v "^--" | paste - - | sed 's/  */ /g' | cut -c1-110
tail -2 $R/torch.log
