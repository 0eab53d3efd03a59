#!/usr/bin/env bash
# Session 19 call 8 (H200): the last-block merge (XGK_RPA_MERGE_MODE=3, one launch per split call)
# against the merge kernel under key rows: device time (G1, fp8), host cost, call + sync.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s"; }
s mm-decode 200 python3 benchmarks/peers.py --suite decode --no-jax --variants auto,auto:mm3 --out $R/mm-decode.json
s mm-fp8 100 python3 benchmarks/peers.py --suite features --no-jax --no-flashinfer --filter "float8,fp8 control" --variants auto,auto:mm3 --out $R/mm-fp8.json
tar -czf $OUT/call8.tgz -C $OUT r
s host-auto 60 .gpu/bin/host_overhead --bench --noplot decode_1x32k
s host-mm3 60 env XGK_RPA_MERGE_MODE=3 .gpu/bin/host_overhead --bench --noplot decode_1x32k
tar -czf $OUT/call8.tgz -C $OUT r
s sync-auto 120 python3 benchmarks/overhead.py --parts sync --out $R/sync-auto.json
s sync-mm3 120 env XGK_RPA_MERGE_MODE=3 python3 benchmarks/overhead.py --parts sync --out $R/sync-mm3.json
tar -czf $OUT/call8.tgz -C $OUT r
python3 /dev/stdin <<'PY'
import json,os
R=os.environ["OUT"]+"/r"
for f in ["mm-decode","mm-fp8"]:
    d=json.load(open(f"{R}/{f}.json"))
    for c in d["cases"]:
        r=c["results"]; a=r["ours-auto"]["median_us"]; m=r["ours-auto:mm3"]["median_us"]
        print(f"{c['name']:40s} auto {a:8.2f} mm3 {m:8.2f} {m-a:+6.2f}")
PY
grep -E "^host_overhead|time:" $R/host-auto.log $R/host-mm3.log | sed 's/  */ /g' | cut -c1-140
grep -E "x32768|x2048" $R/sync-auto.log $R/sync-mm3.log | cut -c1-400
