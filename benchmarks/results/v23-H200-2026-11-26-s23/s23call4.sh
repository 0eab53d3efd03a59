#!/usr/bin/env bash
# Session 23 call 4 (H200): the warp-specialized kernel's epilogue as bulk tensor stores (whole
# consumer tiles, where Q comes by its map) against 34ae686's library: correctness (ws tests in
# the three pair schedules, sanitizers, decode-apart, the GPU suite), then the prefill suites of
# G1, G2, G3 in alternating processes.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
xz -dc .carry/base23.so.xz > /tmp/prev.so; cp .gpu/libxla_gpu_kernels.so /tmp/new.so
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|cases passed|passed|failed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-200)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
s ws-all 120 env XGK_GPU_CASES_PERCENT=100 $G tiled_ws_kernel_matches_cpu
if ! grep -q "test result: ok" $R/ws-all.log; then tail -30 $R/ws-all.log; tar -czf $OUT/call4.tgz -C $OUT r; exit 1; fi
s ws-static 120 env XGK_GPU_CASES_PERCENT=100 XGK_WS_PERSISTENT=1 $G tiled_ws_kernel_matches_cpu
s ws-perpair 120 env XGK_GPU_CASES_PERCENT=100 XGK_WS_PERSISTENT=0 $G tiled_ws_kernel_matches_cpu
for tool in racecheck synccheck memcheck; do
  s san-$tool 150 compute-sanitizer --tool $tool --error-exitcode 1 $G tiled_ws_kernel_small_cases
done
s apart 120 env XGK_GPU_CASES_PERCENT=100 $G decode_rows_apart_match_cpu
s suite 200 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
tar -czf $OUT/call4.tgz -C $OUT r
for geo in G1 G2 G3; do for lib in prev new prev new; do
  s ab-$geo-$lib 100 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so python3 benchmarks/peers.py --suite prefill --geometry $geo --no-jax --no-flashinfer --variants auto --out $R/ab.json
  mv $R/ab.json $R/ab-$geo-$lib-$SECONDS.json
done; tar -czf $OUT/call4.tgz -C $OUT r; done
python3 - <<'PY'
import json,glob,os
R=os.environ['OUT']+'/r'; rows={}
for f in sorted(glob.glob(f'{R}/ab-*-*-*.json'), key=lambda f: int(f.rsplit('-',1)[1][:-5])):
    lib=f.split('/')[-1].split('-')[2]
    for c in json.load(open(f))['cases']:
        rows.setdefault(c['name'],{}).setdefault(lib,[]).append(c['results']['ours-auto'].get('median_us',float('nan')))
for n,v in rows.items():
    p,q=v.get('prev',[]),v.get('new',[])
    r=(sum(q)/len(q))/(sum(p)/len(p)) if p and q else float('nan')
    print(f"{n[:36]:36s} prev {' / '.join(f'{x:8.1f}' for x in p)}  new {' / '.join(f'{x:8.1f}' for x in q)}  new/prev {r:.3f}")
PY
