#!/usr/bin/env bash
# Session 17 call 3 (H200): the tables with resident_cluster_plan: decode (warm and L2-cold),
# features, uneven, FlashInfer in the same process.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s"; }
s peers-decode 150 python3 benchmarks/peers.py --suite decode --no-jax --variants auto --out $R/peers-decode.json
tar -czf $OUT/call3.tgz -C $OUT r
s peers-decode-cold 170 python3 benchmarks/peers.py --suite decode --no-jax --cold-l2 --variants auto --out $R/peers-decode-cold.json
tar -czf $OUT/call3.tgz -C $OUT r
s peers-features 120 python3 benchmarks/peers.py --suite features --no-jax --variants auto --out $R/peers-features.json
tar -czf $OUT/call3.tgz -C $OUT r
s peers-uneven 60 python3 benchmarks/peers.py --suite uneven --no-jax --variants auto --out $R/peers-uneven.json
tar -czf $OUT/call3.tgz -C $OUT r
for f in peers-decode peers-decode-cold peers-features peers-uneven; do grep -A23 "^case" $R/$f.log | cut -c1-100; done
