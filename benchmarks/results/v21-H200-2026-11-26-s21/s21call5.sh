#!/usr/bin/env bash
# Session 21 call 5 (H200): JAX on CUDA against ref_ragged_paged_attention with the committed
# build; the prefill suite in G2 (group 8) and G3 (MHA: 128-token items) in alternating processes
# against session 20's library (the epilogue's row mapping at other groups).
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
xz -dc .carry/base21.so.xz > /tmp/base.so; cp .gpu/libxla_gpu_kernels.so /tmp/new.so
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'geometric|passed|failed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-250)"; }
for geo in G2 G3; do for lib in base new base new; do
  s ab-$geo-$lib 100 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so python3 benchmarks/peers.py --suite prefill --geometry $geo --no-jax --no-flashinfer --variants auto --filter prefill,chunked --out $R/ab-$geo-$lib.json
  cp $R/ab-$geo-$lib.json $R/ab-$geo-$lib-$SECONDS.json
done; done
tar -czf $OUT/call5.tgz -C $OUT r
s jax 400 python3 -m pytest -q -m gpu tests/python/test_jax_gpu.py
tar -czf $OUT/call5.tgz -C $OUT r
python3 - <<'PY'
import json,glob,os
R=os.environ['OUT']+'/r'; rows={}
for f in sorted(glob.glob(f'{R}/ab-*-*-*.json'), key=lambda f: int(f.rsplit('-',1)[1][:-5])):
    lib=f.split('/')[-1].split('-')[2]
    for c in json.load(open(f))['cases']:
        rows.setdefault(c['name'],{}).setdefault(lib,[]).append(c['results']['ours-auto'].get('median_us',float('nan')))
for n,v in rows.items(): print(f"{n[:36]:36s} base {' / '.join(f'{x:8.1f}' for x in v.get('base',[]))}  new {' / '.join(f'{x:8.1f}' for x in v.get('new',[]))}")
PY
