#!/usr/bin/env bash
# Session 32 call 1 (one H100): a mix in one launch (XGK_RPA_DECODE_APART=3): the decode-apart
# and graph-replay tests, under the sanitizers too; the mixes' GPU time, two launches against one;
# the host cost of a mix call with each setting.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
G=".gpu/bin/gpu --include-ignored --test-threads=1 --exact"
step tests 150 $G decode_rows_apart_match_cpu tiled_ws_graph_replays_follow_new_metadata
step mixes 180 env XGK_LOG_PLANS=1 python3 benchmarks/peers.py --suite mixes --no-jax --variants auto,auto:da3 --out $R/mixes.json
pack call1
step host2 110 .gpu/bin/host_overhead --bench --noplot 'mix|prefill|floor'
step host3 90 env XGK_RPA_DECODE_APART=3 .gpu/bin/host_overhead --bench --noplot 'mix|prefill'
pack call1
grep -E "passed|worst|FAILED|panicked" $R/tests.log | cut -c1-160
python3 benchmarks/peers_table.py $R/mixes.json 2>/dev/null | tail -12
grep "plan on" $R/mixes.log | grep -o "one_launch: [a-z]*" | sort | uniq -c
for f in host2 host3; do grep -E "time:" -B1 $R/$f.log | grep -v "^--" | paste - - | sed 's/  */ /g' | cut -c1-100; done
