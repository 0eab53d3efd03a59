#!/usr/bin/env bash
# Session 31 call 1 (one H100): a launch's argument bytes (host_overhead), the read ceiling, and
# whole rows against the split plan with per-key-group pipes (auto against auto:fg1).
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
s host-overhead 150 .gpu/bin/host_overhead --bench --noplot 'prefill|mix|floor|plan|decode_1x128'
tar -czf $OUT/call1.tgz -C $OUT r
s read-ceiling 90 python3 benchmarks/read_ceiling.py --out $R/read-ceiling.json
P="python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time"
s fg-warm 60 $P --cells 16x2048,16x8192,64x2048 --variants auto,auto:fg1 --out $R/fg-warm.json
s fg-cold 60 $P --cells 16x2048,16x8192,64x2048 --variants auto,auto:fg1 --cold-l2 --out $R/fg-cold.json
tar -czf $OUT/call1.tgz -C $OUT r
grep -E "time:" -B1 $R/host-overhead.log | grep -v "^--" | paste - - | sed 's/  */ /g' | cut -c1-130
tail -14 $R/read-ceiling.log
for f in fg-warm fg-cold; do grep -A5 "^case" $R/$f.log | grep -v "^|\|^wrote" | cut -c1-110; grep -m3 "plan" $R/$f.log | cut -c1-200; done
