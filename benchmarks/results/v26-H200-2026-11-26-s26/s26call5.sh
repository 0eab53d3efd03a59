#!/usr/bin/env bash
# Session 26 call 5 (H200): the host cost with each burst queued behind a 2 GiB memset (the GPU
# cannot pace the host): every shape on 23b38df + the gated bench, 72ed48d's library with the same
# bench, alternating; the mix with XGK_RPA_DECODE_APART 0 (one tile kernel) and 1 (three launches).
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
xz -dc .carry/host_overhead_old.xz > /tmp/host_overhead_old; chmod +x /tmp/host_overhead_old
R=$OUT/r; mkdir -p $R
F="ffi_cuda/|ffi_cuda_behind_memset/|cu_launch_kernel_ex_programmatic_floor"
for run in new old new old; do
  b=.gpu/bin/host_overhead; [ $run = old ] && b=/tmp/host_overhead_old
  timeout 150 $b --bench --noplot "$F" > $R/host-$run-$SECONDS.log 2>&1; echo "host $run rc=$?"
done
for da in 0 1; do
  XGK_RPA_DECODE_APART=$da timeout 60 .gpu/bin/host_overhead --bench --noplot "mix_1148x128" > $R/host-new-da$da.log 2>&1; echo "host da$da rc=$?"
done
tar -czf $OUT/call5.tgz -C $OUT r
for f in $R/host-*.log; do echo "== $f"; grep -E "^host_overhead|time:" $f | paste - - | awk '{print $1, $(NF-4), $(NF-3)}'; done
