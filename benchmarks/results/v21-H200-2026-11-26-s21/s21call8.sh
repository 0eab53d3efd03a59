#!/usr/bin/env bash
# Session 21 call 8 (H200): is G1 1 x 32k slower with Q through the tensor map (call 6: +0.8 % in
# both runs)? The long cells, 7cfebd5 against c478829 in alternating processes, three rounds.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
xz -dc .carry/exp-epiq.so.xz > /tmp/prev.so; cp .gpu/libxla_gpu_kernels.so /tmp/new.so
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
for round in 1 2 3; do for lib in prev new; do
  XLA_GPU_KERNELS_LIB=/tmp/$lib.so timeout 100 python3 benchmarks/peers.py --suite prefill --no-jax --no-flashinfer --variants auto --filter "1x32768,1x8192" --out $R/ab.json > $R/ab-$lib-$round.log 2>&1
  mv $R/ab.json $R/ab-$lib-$round.json
done; done
tar -czf $OUT/call8.tgz -C $OUT r
python3 - <<'PY'
import json,os
R=os.environ['OUT']+'/r'; rows={}
for rd in (1,2,3):
    for lib in ('prev','new'):
        for c in json.load(open(f'{R}/ab-{lib}-{rd}.json'))['cases']:
            r=c['results']['ours-auto']; rows.setdefault(c['name'],{}).setdefault(lib,[]).append((r['median_us'],r['p10_us'],r['p90_us']))
for n,v in rows.items():
    for lib in ('prev','new'): print(f"{n[:24]:24s} {lib:4s} "+"  ".join(f"{m:8.1f} [{a:8.1f}-{b:8.1f}]" for m,a,b in v[lib]))
PY
