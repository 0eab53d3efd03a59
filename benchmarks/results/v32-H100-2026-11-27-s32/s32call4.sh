#!/usr/bin/env bash
# Session 32 call 4 (one H100): the build with a mix in one launch by default: the Rust GPU suite
# (10 % of the random cases), the torch tests on CUDA, the prefill suite beside FlashInfer.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
step suite 220 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
pack call4
step prefill 150 env XGK_LOG_PLANS=1 python3 benchmarks/peers.py --suite prefill --no-jax --out $R/prefill.json
pack call4
step torch 200 python3 -m pytest -q -s tests/python/test_torch.py tests/python/test_examples.py
pack call4
grep -E "^test result|FAILED|panicked" $R/suite.log | head -20
python3 benchmarks/peers_table.py $R/prefill.json 2>/dev/null | tail -10 | cut -d'|' -f1-3,6
grep "plan on" $R/prefill.log | grep -o "name: \"rpa_[a-z_0-9]*\"" | sort | uniq -c
tail -2 $R/torch.log
