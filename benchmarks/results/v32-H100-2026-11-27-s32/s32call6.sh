#!/usr/bin/env bash
# Session 32 call 6 (one H100, call 5's machine): the decode-apart test at 10 % of its cases (call
# 5's run was cut at 60 s by the fresh machine's first module load), the driver's floors.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
step apart 200 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --exact decode_rows_apart_match_cpu --nocapture
step host 120 .gpu/bin/host_overhead --bench --noplot 'floor|mix|prefill'
pack call6
grep -E "runs passed|test result|worst" $R/apart.log
grep -E "time:" -B1 $R/host.log | grep -v "^--" | paste - - | sed 's/  */ /g' | cut -c1-100
