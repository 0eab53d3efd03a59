#!/usr/bin/env bash
# Session 30 call 8 (one GPU, an H200 if one comes): the pipe-mode rule's side there (auto against
# pm0 / pm1), and session 29's whole-row rule against `fg1`, warm and L2-cold.
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
python3 -c "import torch; p=torch.cuda.get_device_properties(0); r,b,n=p.memory_clock_rate,p.memory_bus_width,p.multi_processor_count; print('memory', r, 'kHz', b, 'bits', n, 'SMs:', round(2*r*1e3*b/8/1e9/n,1), 'GB/s per SM')"
P="python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time"
s pm 90 $P --cells 16x8192,32x4096,1x32768 --variants auto,auto:pm0,auto:pm1 --out $R/pm.json
s fg-g1-warm 60 $P --cells 16x512,16x2048,16x8192 --variants auto,auto:fg1 --out $R/fg-g1-warm.json
s fg-g1-cold 60 $P --cold-l2 --cells 16x512,16x2048,16x8192 --variants auto,auto:fg1 --out $R/fg-g1-cold.json
s fg-g3-warm 60 $P --geometry G3 --cells 4x512,4x2048,4x8192 --variants auto,auto:fg1 --out $R/fg-g3-warm.json
s fg-g3-cold 60 $P --cold-l2 --geometry G3 --cells 4x512,4x2048,4x8192 --variants auto,auto:fg1 --out $R/fg-g3-cold.json
tar -czf $OUT/call8.tgz -C $OUT r
for f in pm fg-g1-warm fg-g1-cold fg-g3-warm fg-g3-cold; do grep -A4 "^case" $R/$f.log | grep -v "^|\|^wrote" | cut -c1-110; done
