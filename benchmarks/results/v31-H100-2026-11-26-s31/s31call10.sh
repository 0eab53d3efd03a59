#!/usr/bin/env bash
# Session 31 call 10 (one H100): memcheck, racecheck and synccheck over the GPU tests that run
# fp8 cases through Auto (the fp8 key-rows default).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
export XGK_GPU_CASES_PERCENT=10
for tool in memcheck synccheck racecheck; do
  for t in paged_attention_matches_cpu_over_the_feature_matrix pipelined_cluster_and_kernel_merges_match_cpu pipelined_kernel_small_cases; do
    step $tool-$t 170 compute-sanitizer --tool $tool --error-exitcode 9 .gpu/bin/gpu --include-ignored --exact --test-threads=1 $t
    echo "   $(grep -hE '(ERROR|RACECHECK) SUMMARY|test result' $R/$tool-$t.log | tr '\n' ' ' | cut -c1-160)"
    pack call10
  done
done
