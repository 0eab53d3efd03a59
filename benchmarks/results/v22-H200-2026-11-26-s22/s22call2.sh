#!/usr/bin/env bash
# Session 22 call 2 (H200): the rows packed at the item's end and stored from registers under
# the next item's first S (v4), against 231fb2e (prev) and call 1's library (ovl): correctness
# of v4, then the prefill suites of G1, G3, G2 in alternating processes.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
xz -dc .carry/base22.so.xz > /tmp/prev.so; xz -dc .carry/exp-ovl.so.xz > /tmp/ovl.so; cp .gpu/libxla_gpu_kernels.so /tmp/v4.so
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|cases passed|passed|failed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-220)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
s ws-all 120 env XGK_GPU_CASES_PERCENT=100 $G tiled_ws_kernel_matches_cpu
s ws-static 120 env XGK_GPU_CASES_PERCENT=100 XGK_WS_PERSISTENT=1 $G tiled_ws_kernel_matches_cpu
s ws-perpair 120 env XGK_GPU_CASES_PERCENT=100 XGK_WS_PERSISTENT=0 $G tiled_ws_kernel_matches_cpu
for tool in racecheck memcheck; do
  s san-$tool 150 compute-sanitizer --tool $tool --error-exitcode 1 $G tiled_ws_kernel_small_cases
done
tar -czf $OUT/call2.tgz -C $OUT r
ab() { local geo=$1; shift; for lib in "$@"; do
  s ab-$geo-$lib 100 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so python3 benchmarks/peers.py --suite prefill --geometry $geo --no-jax --no-flashinfer --variants auto --out $R/ab.json
  mv $R/ab.json $R/ab-$geo-$lib-$SECONDS.json
done; tar -czf $OUT/call2.tgz -C $OUT r; }
ab G1 prev ovl v4 prev ovl v4
ab G3 prev v4 prev v4
ab G2 prev v4 prev v4
python3 - <<'PY'
import json,glob,os
R=os.environ['OUT']+'/r'; rows={}
for f in sorted(glob.glob(f'{R}/ab-*-*-*.json'), key=lambda f: int(f.rsplit('-',1)[1][:-5])):
    lib=f.split('/')[-1].split('-')[2]
    for c in json.load(open(f))['cases']:
        rows.setdefault(c['name'],{}).setdefault(lib,[]).append(c['results']['ours-auto'].get('median_us',float('nan')))
for n,v in rows.items(): print(f"{n[:34]:34s} " + "  ".join(f"{k} {' / '.join(f'{x:7.1f}' for x in v.get(k,[]))}" for k in ('prev','ovl','v4')))
PY
s apart 120 env XGK_GPU_CASES_PERCENT=100 $G decode_rows_apart_match_cpu
tar -czf $OUT/call2.tgz -C $OUT r
