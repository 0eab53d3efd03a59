#!/usr/bin/env bash
# Session 27 call 3 (H200): merge blocks that count in after their merge (this build) against the
# merge kernels on the split cells, and an experiment build polling with acquire loads (expB),
# alternating processes; the graph and merge tests on this build.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
xz -dc .carry/expB.so.xz > /tmp/expB.so; cp .gpu/libxla_gpu_kernels.so /tmp/main.so
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|replays passed|failed|panicked' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-200)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
s graph-split 90 $G split_decode_graph_replays_follow_new_metadata
s merges 90 $G pipelined_cluster_and_kernel_merges_match_cpu
tar -czf $OUT/call3.tgz -C $OUT r
CELLS="decode 1x8192,decode 1x32768,decode 4x512,decode 4x2048,decode 4x8192,decode 4x32768"
for lib in main expB main expB; do
  v=auto,auto:mm4; [ $lib = expB ] && v=auto:mm4
  s split-$lib-$SECONDS 100 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so python3 benchmarks/peers.py --suite decode --no-jax --no-flashinfer --filter "$CELLS" --variants $v --out $R/split-$lib-$SECONDS.json
  s fp8-$lib-$SECONDS 100 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so python3 benchmarks/peers.py --suite features --no-jax --no-flashinfer --filter "1x32768" --variants $v --out $R/fp8-$lib-$SECONDS.json
  tar -czf $OUT/call3.tgz -C $OUT r
done
python3 - <<'PY'
import json,glob,os
R=os.environ['OUT']+'/r'; rows={}
for f in sorted(glob.glob(f'{R}/*-*-*.json'), key=lambda f: int(f.rsplit('-',1)[1][:-5])):
    lib=f.split('/')[-1].split('-')[1]
    for c in json.load(open(f))['cases']:
        for k,v in c['results'].items():
            rows.setdefault(c['name'],{}).setdefault(f"{lib}:{k[5:]}",[]).append(v.get('median_us',float('nan')))
for n,v in rows.items():
    print(f"{n[:36]:36s} " + "  ".join(f"{k} {' / '.join(f'{x:.2f}' for x in xs)}" for k,xs in v.items()))
PY
