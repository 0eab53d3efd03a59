#!/usr/bin/env bash
# Session 31 call 2 (an H200): whole rows by DRAM bandwidth per SM (auto against auto:fg1), the
# decode, features and uneven suites beside FlashInfer, the read ceiling, the host costs.
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'geometric' $R/$name.log | head -1 | cut -c1-120)"; }
pk() { tar -czf $OUT/call2.tgz -C $OUT r; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
P="python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time"
s fg-g1 40 $P --cells 16x512,16x2048,16x8192 --variants auto,auto:fg1 --out $R/fg-g1.json
s fg-g3 40 $P --geometry G3 --cells 4x512,4x2048,4x8192 --variants auto,auto:fg1 --out $R/fg-g3.json
s read-ceiling 60 python3 benchmarks/read_ceiling.py --out $R/read-ceiling.json
pk
s peers-decode 150 python3 benchmarks/peers.py --suite decode --no-jax --out $R/peers-decode.json
pk
s peers-features 120 python3 benchmarks/peers.py --suite features --no-jax --out $R/peers-features.json
pk
s peers-uneven 60 python3 benchmarks/peers.py --suite uneven --no-jax --out $R/peers-uneven.json
pk
s host-overhead 80 .gpu/bin/host_overhead --bench --noplot 'ffi_cuda/|plan|floor'
pk
for f in fg-g1 fg-g3; do grep -A4 "^case" $R/$f.log | grep -v "^|\|^wrote" | cut -c1-110; done
grep "best read" $R/read-ceiling.log
grep -A24 "^case" $R/peers-decode.log | grep -v "^|\|^wrote" | cut -c1-110
grep -E "time:" -B1 $R/host-overhead.log | grep -v "^--" | paste - - | sed 's/  */ /g' | cut -c1-110
