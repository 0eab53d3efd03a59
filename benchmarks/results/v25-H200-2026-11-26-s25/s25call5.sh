#!/usr/bin/env bash
# Session 25 call 5 (H200): experiment library (warp-specialized grid of XGK_EXP_WS_BLOCKS blocks):
# a mix's prefill rows on K multiprocessors from the start, its decode rows beside on a second stream.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
xz -dc .carry/exp-wsblocks.so.xz > /tmp/exp.so
export XLA_GPU_KERNELS_LIB=/tmp/exp.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
KS=${KS:-16,24,32,40,48,64} timeout 400 python3 .carry/partition_probe.py > $R/partition.log 2>&1; echo "probe rc=$?"
cp .carry/partition_probe.py $R/
tar -czf $OUT/call5.tgz -C $OUT r
cat $R/partition.log | tail -40
