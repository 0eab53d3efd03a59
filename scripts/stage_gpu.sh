#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, everything the GPU machine runs, into the git-ignored .gpu/:
# the release .so, the GPU test and soak binaries and the benchmark binaries. The lent GPU
# machine has no Rust. Packs them into .carry/gpu.tar.xz for the device tool's `carry` (below),
# and puts the wheel (scripts/build_wheel.sh) beside it: gpu_call_prelude.sh installs every
# .carry/*.whl into /tmp/site there.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu && mkdir -p .gpu/bin
cargo build --release --lib
cp target/release/libxla_gpu_kernels.so .gpu/
for target in "--test gpu" "--test soak" "--bench kernels" "--bench host_overhead" "--bench hgmma_queue"; do
  # shellcheck disable=SC2086
  exe=$(cargo test --release --no-run $target --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable")][-1])')
  cp "$exe" ".gpu/bin/$(echo $target | awk '{print $2}')"
done
# The device machine takes at most 64 MiB of working tree: strip the binaries (each embeds the
# PTX images and the cubins, ~50 MB) and pack them (PTX and cubins compress ~13-15x) into
# .carry/gpu.tar.xz, the path to `carry`; there, `tar -xJf .carry/gpu.tar.xz` restores .gpu/.
strip .gpu/bin/* .gpu/libxla_gpu_kernels.so
mkdir -p .carry && rm -f .carry/xla_gpu_kernels-*.whl && XZ_OPT=-T2 tar -cJf .carry/gpu.tar.xz .gpu
XGK_SKIP_SETUP=1 bash scripts/build_wheel.sh >/dev/null
cp dist/xla_gpu_kernels-*.whl .carry/
ls -la .gpu .gpu/bin .carry
