#!/usr/bin/env bash
# Session 22 call 1 (H200): the previous item's rows written under the next item's first S
# (d64/d128) and d256's Q slot released before the last P V, against 231fb2e: correctness (ws
# tests in the three schedules, sanitizers, decode-apart), then the prefill suites of G1, G4, G3
# and G2 in alternating processes, the GPU suite, and G1 / G4 beside FlashInfer.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
xz -dc .carry/base22.so.xz > /tmp/prev.so; cp .gpu/libxla_gpu_kernels.so /tmp/new.so
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|cases passed|passed|failed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-220)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
s ws-all 120 env XGK_GPU_CASES_PERCENT=100 $G tiled_ws_kernel_matches_cpu
s ws-static 120 env XGK_GPU_CASES_PERCENT=100 XGK_WS_PERSISTENT=1 $G tiled_ws_kernel_matches_cpu
s ws-perpair 120 env XGK_GPU_CASES_PERCENT=100 XGK_WS_PERSISTENT=0 $G tiled_ws_kernel_matches_cpu
for tool in racecheck synccheck memcheck; do
  s san-$tool 150 compute-sanitizer --tool $tool --error-exitcode 1 $G tiled_ws_kernel_small_cases
done
s apart 120 env XGK_GPU_CASES_PERCENT=100 $G decode_rows_apart_match_cpu
tar -czf $OUT/call1.tgz -C $OUT r
for geo in G1 G4 G3 G2; do for lib in prev new prev new; do
  s ab-$geo-$lib 100 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so python3 benchmarks/peers.py --suite prefill --geometry $geo --no-jax --no-flashinfer --variants auto --out $R/ab.json
  mv $R/ab.json $R/ab-$geo-$lib-$SECONDS.json
done; tar -czf $OUT/call1.tgz -C $OUT r; done
python3 - <<'PY'
import json,glob,os
R=os.environ['OUT']+'/r'; rows={}
for f in sorted(glob.glob(f'{R}/ab-*-*-*.json'), key=lambda f: int(f.rsplit('-',1)[1][:-5])):
    lib=f.split('/')[-1].split('-')[2]
    for c in json.load(open(f))['cases']:
        rows.setdefault(c['name'],{}).setdefault(lib,[]).append(c['results']['ours-auto'].get('median_us',float('nan')))
for n,v in rows.items(): print(f"{n[:36]:36s} prev {' / '.join(f'{x:8.1f}' for x in v.get('prev',[]))}  new {' / '.join(f'{x:8.1f}' for x in v.get('new',[]))}")
PY
s suite 200 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
tar -czf $OUT/call1.tgz -C $OUT r
for geo in G1 G4; do
  s fi-$geo 150 python3 benchmarks/peers.py --suite prefill --geometry $geo --no-jax --variants auto --out $R/fi-$geo.json
done
tar -czf $OUT/call1.tgz -C $OUT r
