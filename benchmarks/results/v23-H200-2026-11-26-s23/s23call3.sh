#!/usr/bin/env bash
# Session 23 call 3 (H200): the library's host cost per call, the bench with short kernels per call
# (LIVE_TOKENS: the GPU keeps pace with a burst) against call 1's bench binary (each call's whole
# kernels: a 2k prefill ~90 µs of GPU per call), alternating, on one host.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
xz -dc .carry/host_overhead_call1.xz > /tmp/host_overhead_call1; chmod +x /tmp/host_overhead_call1
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
F="ffi_cuda|capi_cuda|floor"
for run in new old new old; do
  b=.gpu/bin/host_overhead; [ $run = old ] && b=/tmp/host_overhead_call1
  timeout 200 $b --bench --noplot "$F" > $R/host-$run-$SECONDS.log 2>&1; echo "$run rc=$?"
done
for f in $R/host-*.log; do echo "== $f"; grep -E "^host_overhead|time:" $f | paste - - | awk '{print $1, $(NF-4), $(NF-3)}'; done
tar -czf $OUT/call3.tgz -C $OUT r
