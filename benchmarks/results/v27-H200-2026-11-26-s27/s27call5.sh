#!/usr/bin/env bash
# Session 27 call 5 (H200): mode 3 is now the merge blocks (the last-block merge removed): the
# graph-replay and merge tests, the chained test, the GPU suite, the sanitizers, torch on CUDA.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|replays passed|links passed|passed|failed|panicked' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-220)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
s graph-split 90 $G split_decode_graph_replays_follow_new_metadata
s merges 90 $G pipelined_cluster_and_kernel_merges_match_cpu
s chained 60 $G programmatic_launches_chained_through_data_match_cpu
tar -czf $OUT/call5.tgz -C $OUT r
for tool in memcheck racecheck synccheck; do
  s san-graph-split-$tool 90 compute-sanitizer --tool $tool --error-exitcode 1 $G split_decode_graph_replays_follow_new_metadata
done
s san-merges-memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 1 $G pipelined_cluster_and_kernel_merges_match_cpu
s san-merges-racecheck 150 compute-sanitizer --tool racecheck --error-exitcode 1 $G pipelined_cluster_and_kernel_merges_match_cpu
s san-small-racecheck 120 compute-sanitizer --tool racecheck --error-exitcode 1 $G pipelined_kernel_small_cases
tar -czf $OUT/call5.tgz -C $OUT r
s suite 150 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
tar -czf $OUT/call5.tgz -C $OUT r
s torch 180 python3 -m pytest -q -s tests/python/test_torch.py tests/python/test_examples.py
tar -czf $OUT/call5.tgz -C $OUT r
grep -h -E 'ERROR SUMMARY|RACECHECK SUMMARY' $R/san-*.log | sort | uniq -c
