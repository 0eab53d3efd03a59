#!/usr/bin/env bash
# Session 31 call 3: on an H200, this build's decode tables (v30 Next 1); on an H100, the short
# cells' floor (1 x 16 up) and the L2-cold decode suite.
set -uo pipefail
cd "$(dirname "$0")/../../.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'geometric' $R/$name.log | head -1 | cut -c1-120)"; }
pk() { tar -czf $OUT/call3.tgz -C $OUT r; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$GPU"
P="python3 benchmarks/peers.py --no-jax --no-flashinfer --no-kernel-time"
if [[ "$GPU" == *H200* ]]; then
  s fg-g1 40 $P --cells 16x512,16x2048,16x8192 --variants auto,auto:fg1 --out $R/fg-g1.json
  s fg-g3 40 $P --geometry G3 --cells 4x512,4x2048,4x8192 --variants auto,auto:fg1 --out $R/fg-g3.json
  s read-ceiling 60 python3 benchmarks/read_ceiling.py --out $R/read-ceiling.json
  pk
  s peers-decode 150 python3 benchmarks/peers.py --suite decode --no-jax --out $R/peers-decode.json; pk
  s peers-features 120 python3 benchmarks/peers.py --suite features --no-jax --out $R/peers-features.json; pk
  s peers-uneven 60 python3 benchmarks/peers.py --suite uneven --no-jax --out $R/peers-uneven.json; pk
  for f in fg-g1 fg-g3; do grep -A4 "^case" $R/$f.log | grep -v "^|\|^wrote" | cut -c1-110; done
  grep "best read" $R/read-ceiling.log
  grep -A24 "^case" $R/peers-decode.log | grep -v "^|\|^wrote" | cut -c1-110
else
  C=1x16,1x128,1x512,1x2048,4x512
  s short-warm 90 python3 benchmarks/peers.py --no-jax --cells $C --variants auto,auto:cl0 --out $R/short-warm.json; pk
  s short-cold 90 python3 benchmarks/peers.py --no-jax --cells $C --variants auto,auto:cl0 --cold-l2 --out $R/short-cold.json; pk
  s peers-decode-cold 200 python3 benchmarks/peers.py --suite decode --no-jax --cold-l2 --out $R/peers-decode-cold.json; pk
  for f in short-warm short-cold; do grep -A7 "^case" $R/$f.log | grep -v "^|\|^wrote" | cut -c1-130; done
  grep -A24 "^case" $R/peers-decode-cold.log | grep -v "^|\|^wrote" | cut -c1-110
fi
