#!/usr/bin/env bash
# Session 32 call 3 (one H100): the mix in one launch, now the default, under compute-sanitizer (a quarter of the
# decode-apart cases; the graph replays under memcheck).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
G=".gpu/bin/gpu --include-ignored --test-threads=1 --exact"
export XGK_GPU_CASES_PERCENT=25
step memcheck 200 compute-sanitizer --tool memcheck --error-exitcode 1 $G decode_rows_apart_match_cpu tiled_ws_graph_replays_follow_new_metadata
step racecheck 240 compute-sanitizer --tool racecheck --error-exitcode 1 $G decode_rows_apart_match_cpu
step synccheck 150 compute-sanitizer --tool synccheck --error-exitcode 1 $G decode_rows_apart_match_cpu
pack call3
for f in memcheck racecheck synccheck; do echo "$f: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|test result|one launch' $R/$f.log | tr '\n' ' ')"; done
