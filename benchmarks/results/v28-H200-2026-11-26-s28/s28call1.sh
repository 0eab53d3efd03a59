#!/usr/bin/env bash
# Session 28 call 1 (H200): the default merge by capture (mode 4): the tests that run split calls
# (graph replays direct and captured, merges, the GPU suite), the sanitizers on the graph test;
# the host cost of the split call in modes 4 and 0; device time of the split cells in graph
# replays and in eager calls, modes 4 / 0 / 3, and the exp-red library's mode 3 (release atomics),
# alternating processes.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
xz -dc .carry/exp-red.so.xz > /tmp/red.so; cp .gpu/libxla_gpu_kernels.so /tmp/main.so
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|runs passed|replays passed|links passed|failed|panicked' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-200)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
s graph-split 90 $G split_decode_graph_replays_follow_new_metadata
s merges 90 $G pipelined_cluster_and_kernel_merges_match_cpu
tar -czf $OUT/call1.tgz -C $OUT r
F="ffi_cuda/(decode_1x128|decode_1x32k)|capi_cuda/decode_1x32k|ffi_cuda_behind_memset/decode_1x32k|cu_launch_kernel_ex_programmatic_floor"
for mm in 4 0 4 0; do
  XGK_RPA_MERGE_MODE=$mm timeout 60 .gpu/bin/host_overhead --bench --noplot "$F" > $R/host-mm$mm-$SECONDS.log 2>&1; echo "host mm$mm rc=$?"
done
tar -czf $OUT/call1.tgz -C $OUT r
C="decode 1x8192,decode 1x32768,decode 4x32768,decode 4x8192"
for lib in main red main red; do
  v=auto,auto:mm0,auto:mm3; [ $lib = red ] && v=auto:mm3
  s dec-$lib-$SECONDS 90 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so python3 benchmarks/peers.py --suite decode --no-jax --no-flashinfer --filter "$C" --variants $v --out $R/dec-$lib-$SECONDS.json
  s fp8-$lib-$SECONDS 60 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so python3 benchmarks/peers.py --suite features --no-jax --no-flashinfer --filter "1x32768" --variants $v --out $R/fp8-$lib-$SECONDS.json
  [ $lib = main ] && s eager-$lib-$SECONDS 90 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so python3 benchmarks/peers.py --eager --suite decode --no-jax --no-flashinfer --filter "$C" --variants auto,auto:mm0 --out $R/eager-$lib-$SECONDS.json
  tar -czf $OUT/call1.tgz -C $OUT r
done
s suite 120 env XGK_GPU_CASES_PERCENT=10 .gpu/bin/gpu --include-ignored --test-threads=1
tar -czf $OUT/call1.tgz -C $OUT r
for tool in racecheck synccheck memcheck; do
  s san-graph-split-$tool 90 compute-sanitizer --tool $tool --error-exitcode 1 $G split_decode_graph_replays_follow_new_metadata
done
tar -czf $OUT/call1.tgz -C $OUT r
grep -h -E 'ERROR SUMMARY|RACECHECK SUMMARY' $R/san-*.log | sort | uniq -c
for f in $R/host-*.log; do echo "== $f"; grep -E "^host_overhead|time:" $f | paste - - | awk '{print $1, $(NF-4), $(NF-3)}'; done
python3 - <<'PY'
import json,glob,os
R=os.environ['OUT']+'/r'; rows={}
for f in sorted(glob.glob(f'{R}/*-*-*.json'), key=lambda f: int(f.rsplit('-',1)[1][:-5])):
    kind,lib=f.split('/')[-1].split('-')[:2]
    for c in json.load(open(f))['cases']:
        for k,v in c['results'].items():
            rows.setdefault(c['name'],{}).setdefault(f"{'E' if kind=='eager' else ''}{lib}:{k[5:]}",[]).append(v.get('median_us',float('nan')))
for n,v in rows.items():
    print(f"{n[:34]:34s} " + "  ".join(f"{k} {' / '.join(f'{x:.2f}' for x in xs)}" for k,xs in v.items()))
PY
