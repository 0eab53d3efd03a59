#!/usr/bin/env bash
# Session 17 call 6 (H200): 1 x 2k (and the other one-wave short cells) without clusters: the
# last-block merge (cl0:mm3) and the merge kernel (cl0) against auto's clusters, warm and cold.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
F="decode 1x512,decode 1x2048,decode 4x512,decode 16x512"
timeout 120 python3 benchmarks/peers.py --suite decode --no-jax --filter "$F" --variants auto,auto:nopdl,auto:cl0:nopdl,auto:cl0:mm3:nopdl,auto:cl0:mm3 --out $R/noclusters-warm.json > $R/noclusters-warm.log 2>&1; echo "warm rc=$?"
timeout 100 python3 benchmarks/peers.py --suite decode --no-jax --cold-l2 --filter "$F" --variants auto,auto:cl0,auto:cl0:mm3 --out $R/noclusters-cold.json > $R/noclusters-cold.log 2>&1; echo "cold rc=$?"
python3 - <<'PY'
import json, os
R = os.environ["OUT"] + "/r"
for f in ("noclusters-warm", "noclusters-cold"):
    d = json.load(open(f"{R}/{f}.json"))
    for c in d["cases"]:
        print(f, c["name"], "  ".join(f"{n}: {r.get('median_us', 0):.2f}/{r.get('kernel_us', 0):.2f}" for n, r in c["results"].items()))
PY
