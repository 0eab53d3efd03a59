#!/usr/bin/env bash
# Session 19 call 5 (H200): JAX GPU tests; overhead (criterion host cost, torch per call, call +
# sync in torch and JAX).
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result| passed| failed' $R/$name.log | tr '\n' ' ' | cut -c1-200)"; }
s host-overhead 120 .gpu/bin/host_overhead --bench --noplot
tar -czf $OUT/call5.tgz -C $OUT r
s overhead 300 python3 benchmarks/overhead.py --parts torch,sync --out $R/overhead.json
tar -czf $OUT/call5.tgz -C $OUT r
s jax-gpu 300 python3 -m pytest -q -m gpu tests/python/test_jax_gpu.py
tar -czf $OUT/call5.tgz -C $OUT r
grep -E "^host_overhead|time:" $R/host-overhead.log | paste - - | sed 's/  */ /g' | cut -c1-120
grep -E "torch per call|x32768|x2048" $R/overhead.log | cut -c1-400
