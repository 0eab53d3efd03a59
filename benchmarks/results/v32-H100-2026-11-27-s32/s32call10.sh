#!/usr/bin/env bash
# Session 32 call 10 (one H100): the review's build: the decode-apart test (its new count) and
# the graph-replay test, a third of the random cases.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
G=".gpu/bin/gpu --include-ignored --test-threads=1 --exact"
step tests 240 env XGK_GPU_CASES_PERCENT=34 $G decode_rows_apart_match_cpu tiled_ws_graph_replays_follow_new_metadata --nocapture
pack call10
grep -E "^test |test result|runs passed|graph replays passed" $R/tests.log
