#!/usr/bin/env bash
# Session 28 call 2 (H200): the default merge with the one-launch bound (direct calls of at most
# 256 MiB of KV): the split-decode graph test; eager and graph-replay times of the split cells,
# default against mode 0; the host cost; the soak (8 threads of direct calls); torch and JAX on CUDA.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|replays passed|passed|failed|panicked' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-220)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
s graph-split 90 $G split_decode_graph_replays_follow_new_metadata
tar -czf $OUT/call2.tgz -C $OUT r
C="decode 1x8192,decode 1x32768,decode 4x32768"
s graph-main-$SECONDS 60 python3 benchmarks/peers.py --suite decode --no-jax --no-flashinfer --filter "$C" --variants auto,auto:mm0 --out $R/graph-main-$SECONDS.json
for i in 1 2; do
  s eager-main-$SECONDS 60 python3 benchmarks/peers.py --eager --suite decode --no-jax --no-flashinfer --filter "$C" --variants auto,auto:mm0 --out $R/eager-main-$SECONDS.json
done
F="ffi_cuda/(decode_1x128|decode_1x32k)|capi_cuda/decode_1x32k|ffi_cuda_behind_memset/decode_1x32k|cu_launch_kernel_ex_programmatic_floor"
for mm in 4 0; do
  XGK_RPA_MERGE_MODE=$mm timeout 60 .gpu/bin/host_overhead --bench --noplot "$F" > $R/host-mm$mm-$SECONDS.log 2>&1; echo "host mm$mm rc=$?"
done
tar -czf $OUT/call2.tgz -C $OUT r
s soak 120 env XGK_SOAK_CALLS=60000 XGK_SOAK_REPORT=$R/soak.txt .gpu/bin/soak --include-ignored --nocapture
tar -czf $OUT/call2.tgz -C $OUT r
s torch 200 python3 -m pytest -q -s tests/python/test_torch.py tests/python/test_examples.py
tar -czf $OUT/call2.tgz -C $OUT r
s jax 270 python3 -m pytest -q -m gpu tests/python/test_jax_gpu.py
tar -czf $OUT/call2.tgz -C $OUT r
tail -n 3 $R/soak.txt 2>/dev/null; tail -n 3 $R/soak.log
for f in $R/host-*.log; do echo "== $f"; grep -E "^host_overhead|time:" $f | paste - - | awk '{print $1, $(NF-4), $(NF-3)}'; done
python3 - <<'PY'
import json,glob,os
R=os.environ['OUT']+'/r'; rows={}
for f in sorted(glob.glob(f'{R}/*-main-*.json'), key=lambda f: int(f.rsplit('-',1)[1][:-5])):
    kind=f.split('/')[-1].split('-')[0]
    for c in json.load(open(f))['cases']:
        for k,v in c['results'].items():
            rows.setdefault(c['name'],{}).setdefault(f"{kind}:{k[5:]}",[]).append(v.get('median_us',float('nan')))
for n,v in rows.items():
    print(f"{n[:30]:30s} " + "  ".join(f"{k} {' / '.join(f'{x:.2f}' for x in xs)}" for k,xs in v.items()))
PY
