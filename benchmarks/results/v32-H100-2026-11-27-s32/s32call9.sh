#!/usr/bin/env bash
# Session 32 call 9 (one H100): the final build (one launch by default where mix_one_launch_pays):
# the decode-apart and graph-replay tests, the mixes suite with the default and `da2`, the plan log.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
G=".gpu/bin/gpu --include-ignored --test-threads=1 --exact"
step tests 200 env XGK_GPU_CASES_PERCENT=50 $G decode_rows_apart_match_cpu tiled_ws_graph_replays_follow_new_metadata programmatic_launches_chained_through_data_match_cpu
step mixes 180 env XGK_LOG_PLANS=1 python3 benchmarks/peers.py --suite mixes --no-jax --no-flashinfer --variants auto,auto:da2 --out $R/mixes.json
pack call9
grep -E "^test |test result" $R/tests.log
python3 benchmarks/peers_table.py $R/mixes.json 2>/dev/null | tail -7 | cut -d'|' -f1-4
grep "plan on" $R/mixes.log | grep -o "one_launch: [a-z]*" | sort | uniq -c
