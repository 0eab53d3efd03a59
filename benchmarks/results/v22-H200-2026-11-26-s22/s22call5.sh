#!/usr/bin/env bash
# Session 22 call 5 (H200): the review's commits (host: PagedAttention::group, the Q tensor map's
# rule inside ws_q_tensor_map; kernels: PTX byte-identical): the ws test at every case (groups
# with and without Q through the tensor map), the Rust GPU suite at 10 %.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|cases passed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-200)"; }
s ws-all 120 env XGK_GPU_CASES_PERCENT=100 .gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact tiled_ws_kernel_matches_cpu
s suite 200 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
