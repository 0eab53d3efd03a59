#!/usr/bin/env bash
# Session 26 call 1 (H200): a decode-apart mix in two launches (the decode kernel publishes an
# inputs word, the tile kernel's block 0 plans) against 72ed48d: the gating tests (graph replays,
# decode-apart, the chained test with its new mix), mix_overlap.py, the G1 prefill suite in
# alternating processes, and the host cost (criterion, both builds' benches, the new mix shape).
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
xz -dc .carry/base26.so.xz > /tmp/prev.so; cp .gpu/libxla_gpu_kernels.so /tmp/new.so
xz -dc .carry/host_overhead_old.xz > /tmp/host_overhead_old; chmod +x /tmp/host_overhead_old
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|runs passed|replays passed|links passed|failed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-200)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
s graph 90 $G tiled_ws_graph_replays_follow_new_metadata
s apart 120 env XGK_GPU_CASES_PERCENT=100 $G decode_rows_apart_match_cpu
s chained 60 $G programmatic_launches_chained_through_data_match_cpu
if ! grep -q "test result: ok" $R/apart.log || ! grep -q "test result: ok" $R/graph.log || ! grep -q "test result: ok" $R/chained.log; then tail -30 $R/graph.log $R/apart.log $R/chained.log; tar -czf $OUT/call1.tgz -C $OUT r; exit 1; fi
tar -czf $OUT/call1.tgz -C $OUT r
s overlap 90 python3 benchmarks/mix_overlap.py --out $R/overlap.json
for lib in prev new prev new; do
  s ab-G1-$lib 100 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so python3 benchmarks/peers.py --suite prefill --geometry G1 --no-jax --no-flashinfer --variants auto --out $R/ab.json
  mv $R/ab.json $R/ab-G1-$lib-$SECONDS.json
done
tar -czf $OUT/call1.tgz -C $OUT r
F="ffi_cuda/(decode_1x128|prefill_1x2k|mix_1148x128)|cu_launch_kernel_ex_programmatic_floor"
for run in new old new old; do
  b=.gpu/bin/host_overhead; [ $run = old ] && b=/tmp/host_overhead_old
  timeout 60 $b --bench --noplot "$F" > $R/host-$run-$SECONDS.log 2>&1; echo "host $run rc=$?"
done
tar -czf $OUT/call1.tgz -C $OUT r
tail -4 $R/overlap.log
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
