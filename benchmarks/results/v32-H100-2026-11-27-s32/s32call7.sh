#!/usr/bin/env bash
# Session 32 call 7 (one H100): where a prefill (and a mix) call's host time goes: the
# warp-specialized tile kernel itself launched by the driver from prepared arguments in the
# prefill call's launch shape, beside the library's calls and the floors, twice.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
step host 240 bash -c "for i in 1 2; do .gpu/bin/host_overhead --bench --noplot 'prepared|floor|ffi_cuda/|encode|validate'; done"
pack call7
grep -E "time:" -B1 $R/host.log | grep -v "^--" | paste - - | sed 's/  */ /g' | cut -c1-100
