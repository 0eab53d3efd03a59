#!/usr/bin/env bash
# Fuzzing (cargo-fuzz + libFuzzer on the pinned nightly, AddressSanitizer, debug assertions and
# overflow checks on): runs each target of fuzz/ for SECONDS (default 60) from its committed seed
# corpus (fuzz/corpus/<target>, never modified: new inputs go to a temporary directory), with a
# 10 s per-input timeout (a hang fails) and libFuzzer's 2 GiB memory limit. Prints executions and
# crashes per target; exits non-zero when any target found a crash, a hang or an OOM (the
# reproducer is kept in fuzz/artifacts/<target>/: `cargo fuzz run <target> <file>` replays it).
#
#   bash scripts/fuzz.sh [SECONDS]     # XGK_FUZZ_TARGET_DIR overrides the build dir (fuzz/target)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
cargo_fuzz_version=0.13.2
targets=(ffi_call_frame legacy_opaque capi_descriptors)
target_dir="${XGK_FUZZ_TARGET_DIR:-$PWD/fuzz/target}"

if ! cargo fuzz --version 2>/dev/null | grep -qF " $cargo_fuzz_version"; then
  echo "installing cargo-fuzz $cargo_fuzz_version"
  cargo install cargo-fuzz --locked --version "$cargo_fuzz_version"
fi
cargo fuzz build --target-dir "$target_dir"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=0
summary=()
for t in "${targets[@]}"; do
  mkdir -p "$work/$t" "fuzz/artifacts/$t"
  find "fuzz/artifacts/$t" -type f -delete
  extra=()
  [ -f "fuzz/dict/$t.dict" ] && extra+=("-dict=fuzz/dict/$t.dict")
  rc=0
  cargo fuzz run --target-dir "$target_dir" "$t" "$work/$t" "fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${extra[@]}" \
    >"$work/$t.log" 2>&1 || rc=$?
  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$t.log" | grep -o '[0-9]*$' | tail -1)"
  crashes="$(find "fuzz/artifacts/$t" -type f | wc -l)"
  summary+=("fuzz $t: ${execs:-0} executions in ${seconds} s, $crashes crash(es)/hang(s), exit $rc")
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    failed=1
    echo "---- fuzz $t failed; the end of its log:"
    tail -40 "$work/$t.log"
    find "fuzz/artifacts/$t" -type f -printf 'reproducer: %p\n'
  fi
done
printf '%s\n' "${summary[@]}"
exit "$failed"
