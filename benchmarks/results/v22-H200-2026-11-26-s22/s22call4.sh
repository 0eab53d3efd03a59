#!/usr/bin/env bash
# Session 22 call 4 (H200): the library's host cost per call (criterion `host_overhead`), with
# the new prefill shape (plan kernel + warp-specialized kernel, two tensor maps encoded per call).
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/host-overhead.log
timeout 400 .gpu/bin/host_overhead --bench --noplot >> $R/host-overhead.log 2>&1; echo "rc=$?"
grep -E "^host_overhead|time:" $R/host-overhead.log | paste - - | awk '{print $1, $(NF-4), $(NF-3), $(NF-2), $(NF-1), $NF}'
