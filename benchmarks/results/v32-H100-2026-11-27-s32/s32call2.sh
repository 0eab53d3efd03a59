#!/usr/bin/env bash
# Session 32 call 2 (one H100): call 1 again after its launch-argument fix (a mix in one launch
# carries 89 words of arguments; KernelArgs held 80): the decode-apart and graph-replay tests,
# the mixes two launches against one, the host cost of a mix call with each setting.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
G=".gpu/bin/gpu --include-ignored --test-threads=1 --exact"
step tests 150 $G decode_rows_apart_match_cpu tiled_ws_graph_replays_follow_new_metadata
step mixes 180 env XGK_LOG_PLANS=1 python3 benchmarks/peers.py --suite mixes --no-jax --variants auto,auto:da3 --out $R/mixes.json
pack call2
step host 150 bash -c ".gpu/bin/host_overhead --bench --noplot 'mix|prefill|floor' && XGK_RPA_DECODE_APART=3 .gpu/bin/host_overhead --bench --noplot 'mix'"
pack call2
grep -E "passed|worst|FAILED|panicked" $R/tests.log | cut -c1-160
python3 benchmarks/peers_table.py $R/mixes.json 2>/dev/null | tail -8 | cut -d'|' -f1-5,11
grep "plan on" $R/mixes.log | grep -o "one_launch: [a-z]*" | sort | uniq -c
grep -E "time:" -B1 $R/host.log | grep -v "^--" | paste - - | sed 's/  */ /g' | cut -c1-100
