#!/usr/bin/env bash
# Session 19 call 7 (H200): three stages against the two-stage rule on long 16-bit grids (key
# rows); DRAM / L2 read counts of fp8 1 x 32k without its math against bf16 1 x 16k.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
xz -dc .carry/exp-nomath.so.xz > /tmp/exp-nomath.so
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s"; }
s long 200 python3 benchmarks/peers.py --suite decode --no-jax --filter "decode 256x,decode 64x32768" --variants auto,auto:st3 --out $R/long.json
s long-g3 100 python3 benchmarks/peers.py --suite features --no-jax --filter "G3 decode 64x8192" --variants auto,auto:st3 --out $R/long-g3.json
s long-uneven 100 python3 benchmarks/peers.py --suite uneven --no-jax --variants auto,auto:st3 --out $R/long-uneven.json
tar -czf $OUT/call7.tgz -C $OUT r
M="dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
XLA_GPU_KERNELS_LIB=/tmp/exp-nomath.so timeout 100 ncu --clock-control none --kernel-name "regex:rpa_pipe" --launch-skip 3 --launch-count 1 --metrics $M \
  python3 benchmarks/profile_case.py --seqs 1x32768 --kv-dtype float8_e4m3fn --calls 4 --impl ours --kernel auto > $R/ncu-fp8-nomath.txt 2>&1
timeout 100 ncu --clock-control none --kernel-name "regex:rpa_pipe" --launch-skip 3 --launch-count 1 --metrics $M \
  python3 benchmarks/profile_case.py --seqs 1x16384 --calls 4 --impl ours --kernel auto > $R/ncu-bf16-1x16k.txt 2>&1
tar -czf $OUT/call7.tgz -C $OUT r
python3 /dev/stdin <<'PY'
import json,os
R=os.environ["OUT"]+"/r"
for f in ["long","long-g3","long-uneven"]:
    d=json.load(open(f"{R}/{f}.json"))
    for c in d["cases"]:
        r=c["results"]; fi=r.get("flashinfer",{}); peer=min(fi.get("median_us",1e9), fi.get("kernel_us") or 1e9)
        print(c["name"], " ".join(f"{k[5:]}={v['median_us']:.1f}({peer/v['median_us']:.3f})" for k,v in r.items() if "median_us" in v))
PY
grep -E "rpa_pipe|dram__|lts__|gpu__time" $R/ncu-fp8-nomath.txt $R/ncu-bf16-1x16k.txt | sed 's/  */ /g' | cut -c1-160
