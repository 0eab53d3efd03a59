#!/usr/bin/env bash
# Mutation check (issue 50): does the suite fail when the op is wrong? Five deliberate faults
# (tests/python/mutants.py: a row drops its newest key, the soft cap ignored, split halves merged
# with equal weights, sm_scale x 1.05, long rows losing their second half) are applied in turn to
# the op as the Python tests reach it (the JAX front end, and the torch Python kernels), on the CPU
# (the library's Host handler), and the tests that must catch them are run: every fault must fail
# at least one test, the unmutated op none. Also runs tests/fault_detection.rs (the same faults
# computed in float64 against the Rust GPU tests' inputs and row tolerance) and prints its table.
#
# Prints a table "fault -> tests that failed" and exits non-zero if any fault survives or the
# baseline fails. Not part of scripts/test.sh (about 1-2 minutes per fault on 2 CPU cores: each run
# compiles the op for every case's shapes); the Rust part runs in CI as tests/fault_detection.rs.
# XGK_TEST_SEED fixes the cases (default: a fresh seed, printed). Needs the library built
# (cargo build --release --lib) and a venv with jax and torch (PYTHON, default .venv/bin/python).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
OUT=${OUT:-/tmp/xgk-mutation}; mkdir -p "$OUT"
export XLA_GPU_KERNELS_LIB=${XLA_GPU_KERNELS_LIB:-$PWD/target/release/libxla_gpu_kernels.so} JAX_PLATFORMS=cpu
export XGK_TEST_SEED=${XGK_TEST_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
echo "XGK_TEST_SEED=$XGK_TEST_SEED"
TESTS=(
  "tests/python/test_jax_cpu.py::test_paged_attention_matches_independent_dense_reference"
  "tests/python/test_torch.py::test_python_kernels_compute_paged_attention"
)
if [ "${MUTATION_JAX_REFERENCE:-0}" = 1 ]; then  # also against JAX's reference (slower)
  TESTS+=("tests/python/test_jax_cpu.py::test_paged_attention_matches_jax_reference")
fi
survived=0
rows=()
run() { # mutant ('' for none)
  local m=$1 log="$OUT/${1:-baseline}.log" start=$SECONDS
  XGK_MUTANT=$m timeout -k 10 1800 "$PYTHON" -m pytest -q -p no:cacheprovider -rf "${TESTS[@]}" > "$log" 2>&1
  local rc=$? secs=$((SECONDS - start))
  local failed; failed=$(grep -c '^FAILED' "$log")
  local total; total=$(grep -oE '[0-9]+ (passed|failed)' "$log" | awk '{s += $1} END {print s + 0}')
  local which; which=$(grep '^FAILED' "$log" | sed -E 's/^FAILED tests\/python\/([^:]+)::([a-z_]+).*/\1::\2/' | sort | uniq -c \
                       | awk '{printf "%s%s (%s)", sep, $2, $1; sep = ", "}')
  if [ -z "$m" ]; then
    [ "$rc" = 0 ] || { echo "baseline FAILED (rc=$rc): see $log"; tail -30 "$log"; survived=1; }
    rows+=("| (none: baseline) | $failed of $total | ${secs}s | ${which:-none} |")
  else
    if [ "$failed" = 0 ]; then survived=1; which="SURVIVED (rc=$rc)"; fi
    rows+=("| $m | $failed of $total | ${secs}s | $which |")
  fi
}
run ""
for m in drop_newest_key ignore_cap equal_weight_merge sm_scale_x1.05 zero_second_half; do
  run "$m"
done
echo
echo "Python (JAX CPU handler, torch Python kernels), XGK_TEST_SEED=$XGK_TEST_SEED:"
echo
echo "| fault | tests failed | time | failing tests (count) |"
echo "|---|---:|---:|---|"
printf '%s\n' "${rows[@]}"
echo
echo "Rust (tests/fault_detection.rs: the faults in float64 against the GPU tests' inputs and row tolerance):"
if [ -z "${XGK_PTXAS:-}" ]; then
  XGK_PTXAS="$PWD/$(ls -d .venv/lib/python3*/site-packages/nvidia/cu13/bin 2>/dev/null | head -1)/ptxas"
  export XGK_PTXAS
fi
cargo test -q --release --test fault_detection -- --nocapture > "$OUT/rust.log" 2>&1 || { survived=1; echo "fault_detection FAILED"; }
grep -E '^\||worst|not caught|test result' "$OUT/rust.log"
exit $survived
