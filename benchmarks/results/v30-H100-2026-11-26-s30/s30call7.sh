#!/usr/bin/env bash
# Session 30 call 7 (one GPU): criterion host cost of the prefill and mix calls and the driver's
# launch floors (call 6 stopped before them).
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so
mkdir -p $OUT/r
timeout 150 .gpu/bin/host_overhead --bench --noplot 'prefill|mix|floor|simple_add' > $OUT/r/host-overhead.log 2>&1; echo rc=$?
grep -E "time:" -B1 $OUT/r/host-overhead.log | grep -v "^--" | paste - - | sed 's/  */ /g' | cut -c1-130
