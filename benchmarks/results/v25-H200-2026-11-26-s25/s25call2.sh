#!/usr/bin/env bash
# Session 25 call 2 (H200): decode rows apart with the warp-specialized tile kernel not waiting for
# the decode kernel (XGK_RPA_DECODE_APART=2) against dd54ced: correctness (graph replays with a mix,
# decode-apart in both orders, sanitizers, ws tests, the GPU suite), mix_overlap.py, and the G1
# prefill suite in alternating processes (new: auto and auto:da1).
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
xz -dc .carry/base25.so.xz > /tmp/prev.so; cp .gpu/libxla_gpu_kernels.so /tmp/new.so
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|runs passed|replays passed|failed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-200)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
s graph 90 $G tiled_ws_graph_replays_follow_new_metadata
s apart 120 env XGK_GPU_CASES_PERCENT=100 $G decode_rows_apart_match_cpu
if ! grep -q "test result: ok" $R/apart.log || ! grep -q "test result: ok" $R/graph.log; then tail -30 $R/graph.log $R/apart.log; tar -czf $OUT/call2.tgz -C $OUT r; exit 1; fi
s graph-perpair 60 env XGK_WS_PERSISTENT=0 $G tiled_ws_graph_replays_follow_new_metadata
s graph-static 60 env XGK_WS_PERSISTENT=1 $G tiled_ws_graph_replays_follow_new_metadata
s ws-all 120 env XGK_GPU_CASES_PERCENT=100 $G tiled_ws_kernel_matches_cpu
for tool in racecheck synccheck memcheck; do
  s san-apart-$tool 150 env XGK_GPU_CASES_PERCENT=30 compute-sanitizer --tool $tool --error-exitcode 1 $G decode_rows_apart_match_cpu
done
s san-graph-memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 1 $G tiled_ws_graph_replays_follow_new_metadata
s san-ws-racecheck 120 compute-sanitizer --tool racecheck --error-exitcode 1 $G tiled_ws_kernel_small_cases
s suite 150 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
tar -czf $OUT/call2.tgz -C $OUT r
s overlap 120 python3 benchmarks/mix_overlap.py --out $R/overlap.json
for lib in prev new prev new prev new; do
  v=auto; [ $lib = new ] && v=auto,auto:da1
  s ab-G1-$lib 120 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so python3 benchmarks/peers.py --suite prefill --geometry G1 --no-jax --no-flashinfer --variants $v --out $R/ab.json
  mv $R/ab.json $R/ab-G1-$lib-$SECONDS.json
done
tar -czf $OUT/call2.tgz -C $OUT r
tail -3 $R/overlap.log
python3 - <<'PY'
import json,glob,os
R=os.environ['OUT']+'/r'; rows={}
for f in sorted(glob.glob(f'{R}/ab-*-*-*.json'), key=lambda f: int(f.rsplit('-',1)[1][:-5])):
    lib=f.split('/')[-1].split('-')[2]
    for c in json.load(open(f))['cases']:
        for k,v in c['results'].items():
            if k.startswith('ours-auto'):
                rows.setdefault(c['name'],{}).setdefault(lib+k[9:],[]).append(v.get('median_us',float('nan')))
for n,v in rows.items():
    p=v.get('prev',[]); m=lambda x: sum(x)/len(x) if x else float('nan')
    print(f"{n[:34]:34s} " + "  ".join(f"{k} {' / '.join(f'{x:7.1f}' for x in q)} ({m(q)/m(p):.3f})" for k,q in v.items()))
PY
