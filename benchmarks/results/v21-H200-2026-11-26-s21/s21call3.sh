#!/usr/bin/env bash
# Session 21 call 3 (H200): the epilogue staged in the consumer's last V stage (kept until the
# stores are issued; the Q slot released as before) against staging in the Q tile (call 2's, no
# prefetch) and session 20's library: correctness of the V-stage build (ws tests at every case,
# both persistent modes and one block per pair, sanitizers), then the prefill suite in
# alternating processes (base, Q, V, twice), FlashInfer beside the V build last; ncu at 4 x 1k.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
xz -dc .carry/base21.so.xz > /tmp/base.so; xz -dc .carry/exp-epiq.so.xz > /tmp/epiq.so; cp .gpu/libxla_gpu_kernels.so /tmp/epiv.so
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|geometric|cases passed' $R/$name.log | tr '\n' ' ' | cut -c1-250)"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --nocapture --exact"
s ws-all 120 env XGK_GPU_CASES_PERCENT=100 $G tiled_ws_kernel_matches_cpu
s ws-static 120 env XGK_GPU_CASES_PERCENT=100 XGK_WS_PERSISTENT=1 $G tiled_ws_kernel_matches_cpu
s ws-perpair 120 env XGK_GPU_CASES_PERCENT=100 XGK_WS_PERSISTENT=0 $G tiled_ws_kernel_matches_cpu
s apart 120 env XGK_GPU_CASES_PERCENT=100 $G decode_rows_apart_match_cpu
for tool in racecheck synccheck memcheck; do
  s san-$tool 150 compute-sanitizer --tool $tool --error-exitcode 1 $G tiled_ws_kernel_small_cases
done
tar -czf $OUT/call3.tgz -C $OUT r
P="python3 benchmarks/peers.py --suite prefill --no-jax --no-flashinfer --variants auto"
for round in 1 2; do for lib in base epiq epiv; do
  s ab-$lib-$round 100 env XLA_GPU_KERNELS_LIB=/tmp/$lib.so $P --out $R/ab-$lib-$round.json
done; tar -czf $OUT/call3.tgz -C $OUT r; done
s prefill-fi 150 python3 benchmarks/peers.py --suite prefill --no-jax --variants auto --out $R/prefill-fi.json
tar -czf $OUT/call3.tgz -C $OUT r
SECT="--section SpeedOfLight --section WarpStateStats --section SourceCounters --section SchedulerStats --section InstructionStats"
timeout 150 ncu --clock-control none --cache-control none --kernel-name "regex:rpa_tile_ws" --launch-skip 3 --launch-count 1 $SECT --import-source no -o $R/epiv-4x1k \
    python3 benchmarks/profile_case.py --seqs 1024x1024*4 --calls 5 --impl ours > $R/epiv-4x1k.log 2>&1; echo "ncu rc=$?"
ncu -i $R/epiv-4x1k.ncu-rep --page details > $R/epiv-4x1k-details.txt 2>&1
ncu -i $R/epiv-4x1k.ncu-rep --page source --csv --print-source sass > $R/epiv-4x1k-sass.csv 2>&1
rm -f $R/*.ncu-rep
tar -czf $OUT/call3.tgz -C $OUT r
python3 - <<'PY'
import json,os
R=os.environ['OUT']+'/r'
names=None; rows={}
for lib in ['base','epiq','epiv']:
    for rd in [1,2]:
        d=json.load(open(f'{R}/ab-{lib}-{rd}.json'))
        for c in d['cases']:
            rows.setdefault(c['name'],{}).setdefault(lib,[]).append(c['results']['ours-auto']['median_us'])
for n,v in rows.items():
    print(f"{n[:38]:38s} "+"  ".join(f"{lib} {' / '.join(f'{x:8.1f}' for x in v[lib])}" for lib in ['base','epiq','epiv']))
PY
grep -A9 "^case" $R/prefill-fi.log | grep -v "^|" | cut -c1-110
grep -E "Duration|SM Active Cycles|Executed Instructions  |Issue Slots Busy" $R/epiv-4x1k-details.txt
