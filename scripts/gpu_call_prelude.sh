# Sourced at the top of a GPU call script (`benchmarks/runs/<run>/call<K>.sh`, git-ignored) on the device
# machine, from the repository root: unpacks what `scripts/stage_gpu.sh` packed, installs the
# carried wheels (FlashInfer) into /tmp/site, points the Python front ends at the staged library,
# and defines the helpers every call uses:
#   step NAME LIMIT CMD...  runs CMD under `timeout LIMIT` with its output in $R/NAME.log and
#                           prints one line: NAME, exit status, seconds, and the log's geomean line;
#   pack CALL               packs $R into $OUT/CALL.tgz (the device tool returns at most eight
#                           files; the archive carries the rest).
tar -xJf .carry/gpu.tar.xz || { echo "gpu_call_prelude: cannot unpack .carry/gpu.tar.xz" >&2; return 1; }
mkdir -p /tmp/site
# The wheels (FlashInfer), when carried; --upgrade replaces what a warm machine kept in /tmp/site.
shopt -s nullglob
wheels=(.carry/*.whl)
shopt -u nullglob
if ((${#wheels[@]})); then
  pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/site "${wheels[@]}" 2>&1 \
    | { grep -v WARNING || true; }
fi
export PYTHONPATH=/tmp/site XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=${OUT:?gpu_call_prelude: OUT is not set}/r
mkdir -p "$R"
step() {
  local name=$1 lim=$2 t0=$SECONDS rc
  shift 2
  timeout "$lim" "$@" > "$R/$name.log" 2>&1
  rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s $(grep -E 'geometric' "$R/$name.log" | head -1 | cut -c1-120)"
}
pack() { tar -czf "$OUT/$1.tgz" -C "$OUT" r; }
