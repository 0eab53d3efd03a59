#!/usr/bin/env bash
# Session 18 call 5 (H200): the final build's checks: racecheck on the merge test (both layouts),
# torch on CUDA, bad inputs, JAX on CUDA (command buffers among them).
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
mkdir -p /tmp/site && pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s"; }
G=".gpu/bin/gpu --include-ignored --test-threads=1 --exact"
s san-racecheck-merges 230 compute-sanitizer --tool racecheck --error-exitcode 1 $G pipelined_cluster_and_kernel_merges_match_cpu
tar -czf $OUT/call5.tgz -C $OUT r
s torch-gpu 120 python3 -m pytest -q -s tests/python/test_torch.py tests/python/test_examples.py
s bad-inputs 60 python3 -m pytest -q -m gpu tests/python/test_bad_inputs_gpu.py
tar -czf $OUT/call5.tgz -C $OUT r
s jax-gpu 260 python3 -m pytest -q -m gpu tests/python/test_jax_gpu.py
tar -czf $OUT/call5.tgz -C $OUT r
grep -E "SUMMARY|test result" $R/san-racecheck-merges.log
for f in torch-gpu bad-inputs jax-gpu; do echo "== $f"; tail -n 2 $R/$f.log; done
