#!/usr/bin/env bash
# Session 31 call 4: on an H200, this build's decode tables (v30 Next 1); on an H100, the final
# build's GPU checks.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/gpu_call_prelude.sh
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$GPU"
if [[ "$GPU" == *H200* ]]; then
  P="python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time"
  step fg-g1 40 $P --cells 16x512,16x2048,16x8192 --variants auto,auto:fg1 --out $R/fg-g1.json
  step fg-g3 40 $P --geometry G3 --cells 4x512,4x2048,4x8192 --variants auto,auto:fg1 --out $R/fg-g3.json
  step read-ceiling 60 python3 benchmarks/read_ceiling.py --out $R/read-ceiling.json; pack call4
  step peers-decode 150 python3 benchmarks/peers.py --suite decode --no-jax --out $R/peers-decode.json; pack call4
  step peers-features 120 python3 benchmarks/peers.py --suite features --no-jax --out $R/peers-features.json; pack call4
  step peers-uneven 60 python3 benchmarks/peers.py --suite uneven --no-jax --out $R/peers-uneven.json; pack call4
  for f in fg-g1 fg-g3; do grep -A4 "^case" $R/$f.log | grep -v "^|\|^wrote" | cut -c1-110; done
  grep "best read" $R/read-ceiling.log
  grep -A24 "^case" $R/peers-decode.log | grep -v "^|\|^wrote" | cut -c1-110
else
  step suite 200 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
  pack call4
  step torch 200 python3 -m pytest -q -s tests/python/test_torch.py tests/python/test_examples.py
  step bad-inputs-gpu 100 python3 -m pytest -q -s -m gpu tests/python/test_bad_inputs_gpu.py
  pack call4
  tail -3 $R/suite.log; tail -2 $R/torch.log; tail -2 $R/bad-inputs-gpu.log
fi
