#!/usr/bin/env bash
# Session 27 call 6 (H200): the final build (mode 3 = merge blocks, the last-block merge removed)
# against df65f3b's library (prev: the same default kernels with the last-block code), alternating
# processes: the G1 decode matrix and the 1 x 32k fp8 cell (auto; auto:mm3 in the new build); the
# host cost of the split call in modes 0 and 3.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
xz -dc .carry/prev27.so.xz > /tmp/prev.so; cp .gpu/libxla_gpu_kernels.so /tmp/new.so
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for lib in prev new prev new; do
  v=auto; [ $lib = new ] && v=auto,auto:mm3
  s dec-$lib-$SECONDS 120 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so python3 benchmarks/peers.py --suite decode --no-jax --no-flashinfer --variants $v --out $R/dec-$lib-$SECONDS.json
  s fp8-$lib-$SECONDS 60 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so python3 benchmarks/peers.py --suite features --no-jax --no-flashinfer --filter "1x32768" --variants $v --out $R/fp8-$lib-$SECONDS.json
  tar -czf $OUT/call6.tgz -C $OUT r
done
F="ffi_cuda/(decode_1x128|decode_1x32k)|capi_cuda/decode_1x32k|ffi_cuda_behind_memset/decode_1x32k|cu_launch_kernel_ex_programmatic_floor"
for mm in 0 3 0 3; do
  XGK_RPA_MERGE_MODE=$mm timeout 60 .gpu/bin/host_overhead --bench --noplot "$F" > $R/host-mm$mm-$SECONDS.log 2>&1; echo "host mm$mm rc=$?"
done
tar -czf $OUT/call6.tgz -C $OUT r
for f in $R/host-*.log; do echo "== $f"; grep -E "^host_overhead|time:" $f | paste - - | awk '{print $1, $(NF-4), $(NF-3)}'; done
python3 - <<'PY'
import json,glob,os
R=os.environ['OUT']+'/r'; rows={}
for f in sorted(glob.glob(f'{R}/*-*-*.json'), key=lambda f: int(f.rsplit('-',1)[1][:-5])):
    lib=f.split('/')[-1].split('-')[1]
    for c in json.load(open(f))['cases']:
        for k,v in c['results'].items():
            rows.setdefault(c['name'],{}).setdefault(f"{lib}:{k[5:]}",[]).append(v.get('median_us',float('nan')))
for n,v in rows.items():
    p=v.get('prev:auto',[]); q=v.get('new:auto',[])
    r=(sum(q)/len(q))/(sum(p)/len(p)) if p and q else float('nan')
    print(f"{n[:30]:30s} " + "  ".join(f"{k} {' / '.join(f'{x:.2f}' for x in xs)}" for k,xs in v.items()) + f"  new/prev {r:.3f}")
PY
