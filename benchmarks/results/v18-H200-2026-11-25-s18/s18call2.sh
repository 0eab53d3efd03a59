#!/usr/bin/env bash
# Session 18 call 2 (H200): key rows: fp8 1 x 32k plan/stage variants and ncu, the large bf16
# cells' variants, L2-cold decode and uneven (auto against auto:kr1).
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s"; }
s fp8-1x32k 120 python3 benchmarks/peers.py --suite features --no-jax --no-flashinfer --filter "1x32768" --variants auto,auto:kr1,auto:kr1:pb3,auto:kr1:pb2,auto:kr1:st3,auto:kr1:st4,auto:kr1:pb3:st3,auto:kr1:ms4,auto:kr1:ms16 --out $R/fp8-1x32k.json
tar -czf $OUT/call2.tgz -C $OUT r
SECT="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SourceCounters --section SchedulerStats --section MemoryWorkloadAnalysis"
t0=$SECONDS
XGK_RPA_KEY_ROWS=1 timeout 120 ncu --clock-control none --kernel-name "regex:rpa_" --launch-skip 6 --launch-count 2 $SECT --import-source no -o $R/kr-fp8-1x32k \
  python3 benchmarks/profile_case.py --seqs 1x32768 --kv-dtype float8_e4m3fn --calls 4 --impl ours --kernel auto:kr1 > $R/kr-fp8-1x32k.log 2>&1
echo "ncu rc=$? $((SECONDS-t0))s"
ncu -i $R/kr-fp8-1x32k.ncu-rep --page details > $R/kr-fp8-1x32k-details.txt 2>&1
ncu -i $R/kr-fp8-1x32k.ncu-rep --page source --csv --print-source sass > $R/kr-fp8-1x32k-sass.csv 2>&1
rm -f $R/*.ncu-rep
tar -czf $OUT/call2.tgz -C $OUT r
LARGE="decode 4x32768,decode 16x32768,decode 64x8192,decode 64x32768,decode 32x4096"
s large 200 python3 benchmarks/peers.py --suite decode --no-jax --filter "$LARGE" --variants auto:kr1,auto:kr1:st2,auto:kr1:pm0 --out $R/large.json
tar -czf $OUT/call2.tgz -C $OUT r
s decode-cold 150 python3 benchmarks/peers.py --suite decode --no-jax --cold-l2 --variants auto,auto:kr1 --out $R/decode-cold.json
tar -czf $OUT/call2.tgz -C $OUT r
s uneven 90 python3 benchmarks/peers.py --suite uneven --no-jax --variants auto,auto:kr1 --out $R/uneven.json
tar -czf $OUT/call2.tgz -C $OUT r
for f in fp8-1x32k large decode-cold uneven; do grep -A23 "^case" $R/$f.log | cut -c1-200; done
grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Issued Ipc|Block Limit|Grid Size|Waves" $R/kr-fp8-1x32k-details.txt | head -40
