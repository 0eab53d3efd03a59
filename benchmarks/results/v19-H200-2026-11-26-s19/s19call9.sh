#!/usr/bin/env bash
# Session 19 call 9 (H200): soak of the final build (C API, 8 threads), racecheck on the merge test.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY' $R/$name.log | tr '\n' ' ' | cut -c1-200)"; }
s soak 330 env XGK_SOAK_CALLS=60000 XGK_SOAK_REPORT=$R/soak.txt .gpu/bin/soak --include-ignored --nocapture
tar -czf $OUT/call9.tgz -C $OUT r
s san-racecheck-merges 200 compute-sanitizer --tool racecheck --error-exitcode 1 .gpu/bin/gpu --include-ignored --test-threads=1 --exact pipelined_cluster_and_kernel_merges_match_cpu
tar -czf $OUT/call9.tgz -C $OUT r
cat $R/soak.txt 2>/dev/null | head -30; tail -n 5 $R/soak.log
