#!/usr/bin/env bash
# Session 30 call 6 (one GPU): this build's host cost (criterion), torch per-call and call + sync
# figures, simple_add against XLA's add, then the G1 prefill suite beside FlashInfer.
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'geometric|test result' $R/$name.log | head -1 | cut -c1-140)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
s host-overhead 100 .gpu/bin/host_overhead --bench --noplot
tar -czf $OUT/call6.tgz -C $OUT r
s overhead 180 python3 benchmarks/overhead.py --parts torch,sync --out $R/overhead.json
tar -czf $OUT/call6.tgz -C $OUT r
s simple-add 150 python3 benchmarks/simple_add_vs_xla.py --out $R/simple-add.json
tar -czf $OUT/call6.tgz -C $OUT r
s prefill 140 python3 benchmarks/peers.py --suite prefill --no-jax --out $R/prefill.json
tar -czf $OUT/call6.tgz -C $OUT r
grep -E "^host_overhead|time:" $R/host-overhead.log | paste - - | sed 's/  */ /g' | cut -c1-110 | head -30
grep -E "torch per call|x32768|x2048|simple_add|tiny" $R/overhead.log | cut -c1-200 | head -20
tail -30 $R/simple-add.log | cut -c1-150
grep -A10 "^case" $R/prefill.log | grep -v "^|" | cut -c1-110
