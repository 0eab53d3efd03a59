#!/usr/bin/env bash
# Session 19 call 4 (H200): 64 x 32k plan variants; the final build's L2-cold decode table, page
# sizes, torch and bad-input tests.
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'test result|SUMMARY|geometric| passed| failed' $R/$name.log | tr '\n' ' ' | cut -c1-200)"; }
s plans 200 python3 benchmarks/peers.py --suite decode --no-jax --filter "decode 64x32768,decode 16x32768,decode 64x8192,decode 256x8192" --variants auto,auto:st3:mc1000,auto:st3:mc1000:pm1,auto:st3,auto:st3:ms256,auto:ms64,auto:ms256 --out $R/plans.json
tar -czf $OUT/call4.tgz -C $OUT r
s peers-decode-cold 200 python3 benchmarks/peers.py --suite decode --no-jax --cold-l2 --out $R/peers-decode-cold.json
tar -czf $OUT/call4.tgz -C $OUT r
s peers-pages 120 python3 benchmarks/peers.py --suite pages --no-jax --out $R/peers-pages.json
tar -czf $OUT/call4.tgz -C $OUT r
s torch-gpu 150 python3 -m pytest -q -s tests/python/test_torch.py tests/python/test_examples.py
s bad-inputs 60 python3 -m pytest -q -m gpu tests/python/test_bad_inputs_gpu.py
tar -czf $OUT/call4.tgz -C $OUT r
python3 /dev/stdin <<'PY'
import json,os
R=os.environ["OUT"]+"/r"
d=json.load(open(f"{R}/plans.json"))
for c in d["cases"]:
    r=c["results"]; fi=r.get("flashinfer",{}); peer=min(fi.get("median_us",1e9), fi.get("kernel_us") or 1e9)
    print(c["name"], " ".join(f"{k[5:]}={v['median_us']:.1f}({peer/v['median_us']:.3f})" for k,v in r.items() if "median_us" in v))
PY
for f in peers-decode-cold peers-pages; do grep -A25 "^case" $R/$f.log | grep -v "^|" | cut -c1-150; done
