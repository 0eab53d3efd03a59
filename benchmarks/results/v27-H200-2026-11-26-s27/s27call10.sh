#!/usr/bin/env bash
# Session 27 call 10 (H200): one poll for every flag against fc91f18's library (prevR), alternating
# processes: the G1 prefill suite (prefills and mixes) and mode 3's split decode cells; the GPU suite.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
xz -dc .carry/prevR.so.xz > /tmp/prev.so; cp .gpu/libxla_gpu_kernels.so /tmp/new.so
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result' $R/$name.log | tail -1)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
CELLS="decode 1x8192,decode 1x32768,decode 4x2048,decode 4x32768"
for lib in prev new prev new; do
  s pre-$lib-$SECONDS 100 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so python3 benchmarks/peers.py --suite prefill --geometry G1 --no-jax --no-flashinfer --variants auto --out $R/pre-$lib-$SECONDS.json
  s mm3-$lib-$SECONDS 60 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so python3 benchmarks/peers.py --suite decode --no-jax --no-flashinfer --filter "$CELLS" --variants auto:mm3 --out $R/mm3-$lib-$SECONDS.json
  tar -czf $OUT/call10.tgz -C $OUT r
done
s suite 150 env XLA_GPU_KERNELS_LIB=/tmp/new.so XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
tar -czf $OUT/call10.tgz -C $OUT r
python3 - <<'PY'
import json,glob,os
R=os.environ['OUT']+'/r'; rows={}
for f in sorted(glob.glob(f'{R}/*-*-*.json'), key=lambda f: int(f.rsplit('-',1)[1][:-5])):
    lib=f.split('/')[-1].split('-')[1]
    for c in json.load(open(f))['cases']:
        for k,v in c['results'].items():
            rows.setdefault(c['name'],{}).setdefault(lib,[]).append(v.get('median_us',float('nan')))
for n,v in rows.items():
    p,q=v.get('prev',[]),v.get('new',[])
    r=(sum(q)/len(q))/(sum(p)/len(p)) if p and q else float('nan')
    print(f"{n[:40]:40s} prev {' / '.join(f'{x:8.1f}' for x in p)}  new {' / '.join(f'{x:8.1f}' for x in q)}  new/prev {r:.3f}")
PY
