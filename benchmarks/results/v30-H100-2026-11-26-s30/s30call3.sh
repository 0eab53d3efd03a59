#!/usr/bin/env bash
# Session 30 call 3 (one GPU): this build's tables (the pipe mode by DRAM bandwidth per SM) beside
# FlashInfer: G1 decode, features, uneven; pages; the Rust GPU suite at 10 %; what the driver
# reports for the memory (torch's device properties read the same attributes).
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'geometric|test result' $R/$name.log | head -1 | cut -c1-140)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
python3 -c "import torch; p=torch.cuda.get_device_properties(0); print('memory_clock_rate kHz', getattr(p,'memory_clock_rate',None), 'bus bits', getattr(p,'memory_bus_width',None), 'SMs', p.multi_processor_count)" 2>&1 | tail -1
s peers-decode 150 python3 benchmarks/peers.py --suite decode --no-jax --out $R/peers-decode.json
tar -czf $OUT/call3.tgz -C $OUT r
s peers-features 150 python3 benchmarks/peers.py --suite features --no-jax --out $R/peers-features.json
s peers-uneven 90 python3 benchmarks/peers.py --suite uneven --no-jax --out $R/peers-uneven.json
tar -czf $OUT/call3.tgz -C $OUT r
s peers-pages 120 python3 benchmarks/peers.py --suite pages --no-jax --no-kernel-time --out $R/peers-pages.json
s suite 120 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
tar -czf $OUT/call3.tgz -C $OUT r
for f in peers-decode peers-features peers-uneven peers-pages; do grep -A24 "^case" $R/$f.log | grep -v "^|\|^wrote" | cut -c1-110; done
