#!/usr/bin/env bash
# Session 27 call 2 (H200): merge blocks against the merge kernels, side by side with FlashInfer:
# the G1 decode matrix and the 1 x 32k fp8 / bf16 cells (variants auto, auto:mm4), then the host
# cost (criterion) of the split call and a one-kernel call, each merge alternating.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|failed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-200)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
F="ffi_cuda/(decode_1x128|decode_1x32k)|capi_cuda/decode_1x32k|ffi_cuda_behind_memset/decode_1x32k|cu_launch_kernel_ex_programmatic_floor"
for mm in 0 4 0 4; do
  XGK_RPA_MERGE_MODE=$mm timeout 60 .gpu/bin/host_overhead --bench --noplot "$F" > $R/host-mm$mm-$SECONDS.log 2>&1; echo "host mm$mm rc=$?"
done
tar -czf $OUT/call2.tgz -C $OUT r
s peers-features 120 python3 benchmarks/peers.py --suite features --no-jax --filter "1x32768" --variants auto,auto:mm4 --out $R/peers-features.json
tar -czf $OUT/call2.tgz -C $OUT r
s peers-decode 330 python3 benchmarks/peers.py --suite decode --no-jax --variants auto,auto:mm4 --out $R/peers-decode.json
tar -czf $OUT/call2.tgz -C $OUT r
for f in $R/host-*.log; do echo "== $f"; grep -E "^host_overhead|time:" $f | paste - - | awk '{print $1, $(NF-4), $(NF-3)}'; done
python3 - <<'PY'
import json,os
R=os.environ['OUT']+'/r'
for f in ('peers-features.json','peers-decode.json'):
    try: d=json.load(open(f'{R}/{f}'))
    except Exception as e: print(f, e); continue
    for c in d['cases']:
        r=c['results']; a=r.get('ours-auto',{}).get('median_us',float('nan')); b=r.get('ours-auto:mm4',{}).get('median_us',float('nan'))
        fi=r.get('flashinfer',{}); fk=min(fi.get('median_us',1e9), fi.get('kernel_us',1e9))
        print(f"{c['name'][:40]:40s} auto {a:8.1f}  mm4 {b:8.1f}  mm4/auto {b/a:.3f}  FI {fk:8.1f}  auto/FI {fk/a:.3f} mm4/FI {fk/b:.3f}")
PY
