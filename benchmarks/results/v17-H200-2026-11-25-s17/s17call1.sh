#!/usr/bin/env bash
# Session 17 call 1 (H200): exploration with existing switches: short decode cells warm and
# cold (st2 / ms2 / nopdl / cl0), fp8 1 x 32k stage and split variants, ncu of fp8 1 x 32k,
# torch call + sync with the isolated-call budget.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
SHORT="decode 1x512,decode 1x2048,decode 1x8192,decode 4x512,decode 4x2048,decode 16x512"
timeout 150 python3 benchmarks/peers.py --suite decode --no-jax --filter "$SHORT" --variants auto,auto:nopdl,auto:st2,auto:ms2,auto:st2:ms2,auto:cl0 --out $R/short-warm.json > $R/short-warm.log 2>&1; echo "short warm rc=$?"
tar -czf $OUT/call1.tgz -C $OUT r
timeout 150 python3 benchmarks/peers.py --suite decode --no-jax --cold-l2 --filter "$SHORT" --variants auto,auto:st2,auto:ms2,auto:st2:ms2 --out $R/short-cold.json > $R/short-cold.log 2>&1; echo "short cold rc=$?"
tar -czf $OUT/call1.tgz -C $OUT r
timeout 150 python3 benchmarks/peers.py --suite features --no-jax --no-flashinfer --filter "1x32768" --variants auto,auto:st3,auto:st4,auto:st5,auto:st6,auto:pb2,auto:pb4,auto:st5:pb3,auto:ms4,auto:mm1,auto:mm2 --out $R/fp8-1x32k.json > $R/fp8-1x32k.log 2>&1; echo "fp8 rc=$?"
tar -czf $OUT/call1.tgz -C $OUT r
timeout 120 python3 benchmarks/overhead.py --parts sync --no-jax-sync --out $R/overhead-sync.json > $R/overhead-sync.log 2>&1; echo "sync rc=$?"
tar -czf $OUT/call1.tgz -C $OUT r
SECT="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SourceCounters --section SchedulerStats --section MemoryWorkloadAnalysis"
t0=$SECONDS
timeout 150 ncu --clock-control none --kernel-name "regex:rpa_" --launch-skip 6 --launch-count 2 $SECT --import-source no -o $R/ours-fp8-1x32k \
  python3 benchmarks/profile_case.py --seqs 1x32768 --kv-dtype float8_e4m3fn --calls 4 --impl ours > $R/ours-fp8-1x32k.log 2>&1
echo "ncu rc=$? $((SECONDS-t0))s"
ncu -i $R/ours-fp8-1x32k.ncu-rep --page details > $R/ours-fp8-1x32k-details.txt 2>&1
ncu -i $R/ours-fp8-1x32k.ncu-rep --page source --csv --print-source sass > $R/ours-fp8-1x32k-sass.csv 2>&1
rm -f $R/*.ncu-rep
tar -czf $OUT/call1.tgz -C $OUT r
grep -A8 "^case" $R/short-warm.log | cut -c1-200
grep -A8 "^case" $R/short-cold.log | cut -c1-160
grep -A3 "^case" $R/fp8-1x32k.log | cut -c1-250
tail -4 $R/overhead-sync.log
grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|DRAM Throughput|Warp Cycles Per Issued|Executed Instructions  " $R/ours-fp8-1x32k-details.txt | head -24
