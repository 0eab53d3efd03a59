#!/usr/bin/env bash
# Session 19 call 2 (H200): fp8 1 x 32k with parts of the tile loop taken out (experiment
# libraries, timed with PEERS_TIME_WRONG=1), the review build's GPU suite and sanitizers, ncu of
# bf16 1 x 32k.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
for e in nocvt nomath nocopy; do xz -dc .carry/exp-$e.so.xz > /tmp/exp-$e.so; done
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY' $R/$name.log | tr '\n' ' ' | cut -c1-150)"; }
P="python3 benchmarks/peers.py --no-jax --no-flashinfer --cells 1x32768:float8_e4m3fn"
s fp8-stock 80 $P --variants auto,auto:st3 --out $R/fp8-stock.json
for e in nocvt nomath nocopy; do
  s fp8-$e 80 env PEERS_TIME_WRONG=1 XLA_GPU_KERNELS_LIB=/tmp/exp-$e.so $P --variants auto,auto:st3 --out $R/fp8-$e.json
done
tar -czf $OUT/call2.tgz -C $OUT r
G=".gpu/bin/gpu --include-ignored --test-threads=1"
s gpu-suite 150 env XGK_GPU_CASES_PERCENT=10 $G --skip paged_attention_long_context_128k
for t in memcheck racecheck synccheck; do
  s san-$t-small 150 compute-sanitizer --tool $t --error-exitcode 1 $G --exact pipelined_kernel_small_cases
done
s san-memcheck-merges 200 compute-sanitizer --tool memcheck --error-exitcode 1 $G --exact pipelined_cluster_and_kernel_merges_match_cpu
tar -czf $OUT/call2.tgz -C $OUT r
SECT="--section SpeedOfLight --section LaunchStats --section Occupancy --section SchedulerStats --section WarpStateStats"
timeout 100 ncu --clock-control none --kernel-name "regex:rpa_" --launch-skip 6 --launch-count 2 $SECT -o $R/bf16-1x32k \
  python3 benchmarks/profile_case.py --seqs 1x32768 --calls 4 --impl ours --kernel auto > $R/ncu-bf16-1x32k.log 2>&1
ncu -i $R/bf16-1x32k.ncu-rep --page details > $R/bf16-1x32k-details.txt 2>&1; rm -f $R/*.ncu-rep
tar -czf $OUT/call2.tgz -C $OUT r
python3 - <<'PY'
import json,os
R=os.environ["OUT"]+"/r"
for f in ["fp8-stock","fp8-nocvt","fp8-nomath","fp8-nocopy"]:
    try:
        d=json.load(open(f"{R}/{f}.json"))
        for c in d["cases"]:
            print(f, {k:(round(v["median_us"],2) if "median_us" in v else v.get("error")) for k,v in c["results"].items()})
    except Exception as e: print(f, e)
PY
grep -E "^  [a-z]|Duration|DRAM Throughput|SM Active Cycles|Elapsed Cycles|Grid Size|Waves Per" $R/bf16-1x32k-details.txt | head -20
