#!/usr/bin/env bash
# Session 32 call 8 (an H200, if one comes): the mix in one launch (now the default) against two
# launches on the mixes suite; then this build's features suite (NOTES v31 Next 1: fp8 KV stays in
# head rows on the H200).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$gpu"
case "$gpu" in *H200*) ;; *) echo "not an H200: nothing run"; exit 0 ;; esac
step mixes 200 env XGK_LOG_PLANS=1 python3 benchmarks/peers.py --suite mixes --no-jax --variants auto,auto:da2 --out $R/mixes.json
pack call8
step features 200 env XGK_LOG_PLANS=1 python3 benchmarks/peers.py --suite features --no-jax --out $R/features.json
pack call8
python3 benchmarks/peers_table.py $R/mixes.json 2>/dev/null | tail -8 | cut -d'|' -f1-5
grep "plan on" $R/mixes.log | grep -o "one_launch: [a-z]*" | sort | uniq -c
python3 benchmarks/peers_table.py $R/features.json 2>/dev/null | tail -3
grep "plan on" $R/features.log | grep -E "e4m3|e5m2" | grep -o "name: \"rpa_[a-z_0-9]*\"" | sort | uniq -c
