#!/usr/bin/env bash
# Session 27 call 4 (H200): where merge blocks lose their 0.4-1.1 µs: this build (auto, auto:mm4)
# against two experiment builds whose results are wrong on purpose (PEERS_TIME_WRONG=1): E1, the
# merge blocks do not wait for the splits' count; E2, the split blocks do not count in either.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
for e in E1 E2; do xz -dc .carry/exp$e.so.xz > /tmp/exp$e.so; done; cp .gpu/libxla_gpu_kernels.so /tmp/main.so
export PYTHONUNBUFFERED=1 PEERS_TIME_WRONG=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
CELLS="decode 1x8192,decode 1x32768,decode 4x2048,decode 4x32768"
for lib in main expE1 expE2 main expE1 expE2; do
  v=auto,auto:mm4; [ $lib != main ] && v=auto:mm4
  s split-$lib-$SECONDS 100 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so python3 benchmarks/peers.py --suite decode --no-jax --no-flashinfer --filter "$CELLS" --variants $v --out $R/split-$lib-$SECONDS.json
done
tar -czf $OUT/call4.tgz -C $OUT r
python3 - <<'PY'
import json,glob,os
R=os.environ['OUT']+'/r'; rows={}
for f in sorted(glob.glob(f'{R}/*-*-*.json'), key=lambda f: int(f.rsplit('-',1)[1][:-5])):
    lib=f.split('/')[-1].split('-')[1]
    for c in json.load(open(f))['cases']:
        for k,v in c['results'].items():
            rows.setdefault(c['name'],{}).setdefault(f"{lib}:{k[5:]}",[]).append(v.get('median_us',float('nan')))
for n,v in rows.items():
    print(f"{n[:24]:24s} " + "  ".join(f"{k} {' / '.join(f'{x:.2f}' for x in xs)}" for k,xs in v.items()))
PY
