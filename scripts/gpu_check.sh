#!/usr/bin/env bash
# Runs on the lent GPU machine, from the repository root, with .gpu/ carried (scripts/stage_gpu.sh).
# Logs go to $OUT; a summary table is printed last. XGK_BENCH=0 skips the criterion benchmarks,
# XGK_SANITIZE=0 the compute-sanitizer runs.
set -uo pipefail
OUT=${OUT:-/tmp/xgk-out}; mkdir -p "$OUT"
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
# Exits non-zero when any step fails or runs past XGK_STEP_TIMEOUT seconds (default 3600; a
# timeout is a failure); the summary names the failed steps.
summary=() failed=()
step() { # name, command...
  local name=$1; shift
  local start=$SECONDS
  timeout -k 10 "${XGK_STEP_TIMEOUT:-3600}" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  case $rc in 124|137) echo "timed out after ${XGK_STEP_TIMEOUT:-3600}s" >> "$OUT/$name.log" ;; esac
  [ "$rc" = 0 ] || failed+=("$name")
  summary+=("$(printf '%-22s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - start))" "$(grep -E 'test result|passed|failed|ERROR SUMMARY|timed out' "$OUT/$name.log" | tail -1)")")
}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -c 'import jax, torch; print("jax", jax.__version__, "torch", torch.__version__, torch.version.cuda)'; } > "$OUT/device.txt" 2>&1
step rust_gpu .gpu/bin/gpu --include-ignored --test-threads=1 --nocapture
XGK_SOAK_REPORT=$OUT/soak.txt step soak .gpu/bin/soak --include-ignored --nocapture
if [ "${XGK_SANITIZE:-1}" = 1 ]; then
  # Every compute-sanitizer tool over every GPU test and the soak (scripts/sanitize.sh; generated
  # case lists thinned to every 10th case so racecheck finishes; ~6 minutes on an H100).
  step sanitizers env XGK_GPU_CASES_PERCENT="${XGK_GPU_CASES_PERCENT:-10}" XGK_SOAK_CALLS="${XGK_SOAK_CALLS:-500}" \
    bash scripts/sanitize.sh
fi
step jax_gpu python3 -m pytest -q -s -m gpu tests/python/test_jax_gpu.py
# Long contexts (32k, 128k) against an independent dense reference on the GPU, every split/merge
# path forced by its XGK_RPA_* setting (tests/python/test_long_gpu.py).
step long_gpu python3 -m pytest -q -s -m gpu tests/python/test_long_gpu.py
step bad_inputs_gpu python3 -m pytest -q -s -m gpu tests/python/test_bad_inputs_gpu.py
# Tensor/data parallel over several GPUs (test_sharding_gpu.py asserts >= 2 GPUs: on one GPU it is
# listed as not run, never skipped silently).
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$ngpu" -ge 2 ]; then
  step sharding_gpu python3 -m pytest -q -s -m gpu tests/python/test_sharding_gpu.py
  step torch_multi_gpu python3 -m pytest -q -s -m gpu tests/python/test_torch_multi_gpu.py
  [ "${XGK_BENCH:-1}" = 1 ] && step tp_bench python3 benchmarks/tensor_parallel.py --out "$OUT/tensor-parallel.json"
else
  summary+=("$(printf '%-22s not run: %s GPU(s), needs >= 2 (nvidia-h200-x2)' "sharding_gpu, torch_multi_gpu" "$ngpu")")
fi
step torch python3 -m pytest -q -s tests/python/test_torch.py tests/python/test_examples.py
step torch_python_kernels env XGK_TORCH_KERNELS=python python3 -m pytest -q -s tests/python/test_torch.py
[ "${XGK_BENCH:-1}" = 1 ] && step bench .gpu/bin/kernels --bench --noplot
[ "${XGK_BENCH:-1}" = 1 ] && step host_overhead .gpu/bin/host_overhead --bench --noplot
cat "$OUT/device.txt"; grep -h "worst\|cases\|passed" "$OUT"/rust_gpu.log "$OUT"/jax_gpu.log "$OUT"/long_gpu.log | sort -u | head -80
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED steps: ${failed[*]}"
  exit 1
fi
echo "all steps passed"
