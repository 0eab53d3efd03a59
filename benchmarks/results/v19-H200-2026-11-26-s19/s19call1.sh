#!/usr/bin/env bash
# Session 19 call 1 (H200): where the fp8 1 x 32k cell's time goes (bf16 1 x 16k of the same bytes;
# experiment libraries without the fp8 conversions / without the tile math; ncu with pipe use),
# and the large cells' stage / pipe-mode variants.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
for e in nocvt nomath; do xz -dc .carry/exp-$e.so.xz > /tmp/exp-$e.so; done
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s"; }
P="python3 benchmarks/peers.py --no-jax --no-flashinfer"
s fp8-stock 100 $P --cells 1x16384,1x32768,1x32768:float8_e4m3fn --variants auto,auto:st3,auto:kr2 --out $R/fp8-stock.json
s fp8-nocvt 80 env PEERS_TIME_WRONG=1 XLA_GPU_KERNELS_LIB=/tmp/exp-nocvt.so $P --cells 1x32768:float8_e4m3fn --variants auto,auto:st3,auto:kr2 --out $R/fp8-nocvt.json
s fp8-nomath 80 env PEERS_TIME_WRONG=1 XLA_GPU_KERNELS_LIB=/tmp/exp-nomath.so $P --cells 1x32768:float8_e4m3fn --variants auto,auto:st3,auto:st4 --out $R/fp8-nomath.json
tar -czf $OUT/call1.tgz -C $OUT r
SECT="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats --section MemoryWorkloadAnalysis"
t0=$SECONDS
timeout 120 ncu --clock-control none --kernel-name "regex:rpa_" --launch-skip 6 --launch-count 2 $SECT -o $R/fp8-1x32k \
  python3 benchmarks/profile_case.py --seqs 1x32768 --kv-dtype float8_e4m3fn --calls 4 --impl ours --kernel auto > $R/ncu-fp8-1x32k.log 2>&1
echo "ncu rc=$? $((SECONDS-t0))s"
ncu -i $R/fp8-1x32k.ncu-rep --page details > $R/fp8-1x32k-details.txt 2>&1
ncu -i $R/fp8-1x32k.ncu-rep --page raw --csv --metrics regex:sm__inst_executed_pipe_.*sum$,regex:sm__pipe_.*cycles_active.*pct_of_peak_sustained_active$ > $R/fp8-1x32k-pipes.csv 2>&1
rm -f $R/*.ncu-rep
tar -czf $OUT/call1.tgz -C $OUT r
s large 260 python3 benchmarks/peers.py --suite decode --no-jax --filter "decode 4x32768,decode 16x32768,decode 64x32768" --variants auto,auto:st2,auto:st2:pm0,auto:st4,auto:pb3 --out $R/large.json
tar -czf $OUT/call1.tgz -C $OUT r
for f in fp8-stock fp8-nocvt fp8-nomath large; do grep -A12 "^case" $R/$f.log | cut -c1-160; done
grep -E "^  [a-z]|Duration|DRAM Throughput|Issued Ipc|Executed Ipc A|Issue Slots Busy" $R/fp8-1x32k-details.txt | head -30
