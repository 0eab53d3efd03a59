#!/usr/bin/env bash
# Every compute-sanitizer tool (memcheck, racecheck, synccheck, initcheck) over the whole GPU
# suite: each test of tests/gpu/ on its own (case lists shrunk evenly by XGK_GPU_CASES_PERCENT,
# default 25, so racecheck finishes), and the soak at XGK_SOAK_CALLS (default 2000) calls. Runs on
# the GPU machine from the repository root with .gpu/ staged (scripts/stage_gpu.sh). Writes one
# log per (tool, test) and a summary table to $OUT/sanitizers.md; exits non-zero if any tool
# reported an error, any run failed or any run timed out (a timeout is a failure, not a pass). SANITIZE_TOOLS / SANITIZE_TIMEOUT (seconds per run, default 500) narrow it.
# SANITIZE_SKIP lists tests left out, space separated (default: the memory-exhaustion test, which takes every byte
# of device memory, the sanitizer's own included: it checks host-side error handling, no kernel).
# SANITIZE_SOAK=0 leaves the soak out (when its binary is not carried). SANITIZE_TESTS names the
# tests to run (space separated, as `.gpu/bin/gpu --list` names them: `prefill::tiled_ws_kernel_small_cases`;
# default all). SANITIZE_JOBS (default 1) runs that many (tool,
# test) runs at once: the sanitizers are host-bound, so a 16-core machine checks several tests on
# one GPU at a time (correctness only; nothing here is timed).
set -uo pipefail
OUT=${OUT:-/tmp/xgk-out}; mkdir -p "$OUT"
export XGK_GPU_CASES_PERCENT=${XGK_GPU_CASES_PERCENT:-25} XGK_SOAK_CALLS=${XGK_SOAK_CALLS:-2000}
tools=${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}
limit=${SANITIZE_TIMEOUT:-500}
skip=${SANITIZE_SKIP-contract::scratch_allocation_failure_is_an_error_and_the_next_call_works}
all_tests=$(.gpu/bin/gpu --list --include-ignored 2>/dev/null | sed -n 's/: test$//p')
# Names as `--list` gives them (`module::test`): a name that is no test is an error, not a skip
# that silently skips nothing.
skipped=$(tr ' ' '\n' <<< "$skip" | grep . || true)
unknown=$(grep -vxFf <(echo "$all_tests") <<< "$skipped" | grep . || true)
[ -z "$unknown" ] || { echo "sanitize.sh: SANITIZE_SKIP names no GPU test: $unknown" >&2; exit 2; }
tests=$(grep -vxFf <(echo "$skipped") <<< "$all_tests" || true)
if [ -n "${SANITIZE_TESTS:-}" ]; then
  missing=$(tr ' ' '\n' <<< "$SANITIZE_TESTS" | grep . | grep -vxFf <(echo "$tests") || true)
  [ -z "$missing" ] || { echo "sanitize.sh: no such GPU test: $missing" >&2; exit 2; }
  tests=$(tr ' ' '\n' <<< "$SANITIZE_TESTS" | grep .)
fi
jobs_max=${SANITIZE_JOBS:-1}
rows=$(mktemp -d)
{
  echo "# compute-sanitizer over the GPU suite ($(date -u +%F), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1))"
  echo
  echo "XGK_GPU_CASES_PERCENT=$XGK_GPU_CASES_PERCENT, soak calls $XGK_SOAK_CALLS, timeout ${limit}s per run"
  echo
  echo "| tool | test | result | seconds |"
  echo "|---|---|---|---:|"
} > "$OUT/sanitizers.md"
run() { # tool, label, command...: one table row in $rows/<tool>-<label>
  local tool=$1 label=$2; shift 2
  # Files named without the test path's colons (`decode::x` -> `decode.x`).
  local file=${label//::/.}
  local log="$OUT/san-$tool-$file.log" start=$SECONDS
  timeout -k 10 "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 "$@" > "$log" 2>&1
  local rc=$?
  # racecheck reports "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)", the others
  # "ERROR SUMMARY: N errors".
  local summary; summary=$(grep -hE "(ERROR|RACECHECK) SUMMARY" "$log" | tail -1 | sed 's/=* *//')
  case $rc in
    0) result="${summary:-ok}" ;;
    124|137) result="FAILED: timed out after ${limit}s (${summary:-no summary})" ;;
    *) result="FAILED rc=$rc (${summary:-see log})" ;;
  esac
  echo "| $tool | $label | $result | $((SECONDS - start)) |" > "$rows/$tool-$file"
}
throttle() { while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done; }
for tool in $tools; do
  for t in $tests; do
    throttle
    run "$tool" "$t" .gpu/bin/gpu --include-ignored --exact --test-threads=1 "$t" &
  done
  if [ "${SANITIZE_SOAK:-1}" = 1 ]; then throttle; run "$tool" soak .gpu/bin/soak --include-ignored & fi
done
wait
cat "$rows"/* >> "$OUT/sanitizers.md"
grep -q "FAILED" "$rows"/* && failed=1 || failed=0
# A run that left no row (killed before it wrote one) is a failure too.
expected=$(( $(wc -w <<< "$tools") * ($(wc -w <<< "$tests") + ${SANITIZE_SOAK:-1}) ))
[ "$(ls "$rows" | wc -l)" -eq "$expected" ] || { echo "| - | - | FAILED: $(ls "$rows" | wc -l) of $expected runs reported | |" >> "$OUT/sanitizers.md"; failed=1; }
rm -rf "$rows"
cat "$OUT/sanitizers.md"
exit $failed
