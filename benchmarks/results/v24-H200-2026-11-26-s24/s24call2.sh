#!/usr/bin/env bash
# Session 24 call 2 (H200): block 0 plans, thread 0 of each other block polls (one launch per prefill
# call at head dims 64 and 128) against d5ffb11: correctness (graph replays, ws tests in the three
# pair schedules, sanitizers, decode-apart, the GPU suite), the G1 prefill suite in alternating
# processes, and the host cost (criterion) of both builds' benches on this host.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
xz -dc .carry/base24.so.xz > /tmp/prev.so; cp .gpu/libxla_gpu_kernels.so /tmp/new.so
xz -dc .carry/host_overhead_old.xz > /tmp/host_overhead_old; chmod +x /tmp/host_overhead_old
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|cases passed|passed|failed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-200)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
s graph 60 $G tiled_ws_graph_replays_follow_new_metadata
s ws-all 120 env XGK_GPU_CASES_PERCENT=100 $G tiled_ws_kernel_matches_cpu
if ! grep -q "test result: ok" $R/ws-all.log || ! grep -q "test result: ok" $R/graph.log; then tail -30 $R/graph.log $R/ws-all.log; tar -czf $OUT/call2.tgz -C $OUT r; exit 1; fi
s ws-static 90 env XGK_GPU_CASES_PERCENT=100 XGK_WS_PERSISTENT=1 $G tiled_ws_kernel_matches_cpu
s ws-perpair 90 env XGK_GPU_CASES_PERCENT=100 XGK_WS_PERSISTENT=0 $G tiled_ws_kernel_matches_cpu
s graph-perpair 60 env XGK_WS_PERSISTENT=0 $G tiled_ws_graph_replays_follow_new_metadata
for tool in racecheck synccheck memcheck; do
  s san-$tool 120 compute-sanitizer --tool $tool --error-exitcode 1 $G tiled_ws_kernel_small_cases
done
s san-graph-memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 1 $G tiled_ws_graph_replays_follow_new_metadata
s apart 90 env XGK_GPU_CASES_PERCENT=100 $G decode_rows_apart_match_cpu
s suite 150 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1 --skip paged_attention_long_context_128k
tar -czf $OUT/call2.tgz -C $OUT r
for lib in prev new prev new prev new; do
  s ab-G1-$lib 100 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so python3 benchmarks/peers.py --suite prefill --geometry G1 --no-jax --no-flashinfer --variants auto --out $R/ab.json
  mv $R/ab.json $R/ab-G1-$lib-$SECONDS.json
done
tar -czf $OUT/call2.tgz -C $OUT r
F="ffi_cuda/(decode_1x128|decode_1x32k|prefill_1x2k)|cu_launch_kernel_ex_programmatic_floor"
for run in new old new old; do
  b=.gpu/bin/host_overhead; [ $run = old ] && b=/tmp/host_overhead_old
  timeout 100 $b --bench --noplot "$F" > $R/host-$run-$SECONDS.log 2>&1; echo "host $run rc=$?"
done
tar -czf $OUT/call2.tgz -C $OUT r
for f in $R/host-*.log; do echo "== $f"; grep -E "^host_overhead|time:" $f | paste - - | awk '{print $1, $(NF-4), $(NF-3)}'; done
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
