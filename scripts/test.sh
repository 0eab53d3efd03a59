#!/usr/bin/env bash
# The test suite (README's test command): Rust unit and integration tests (PTX + ptxas, FFI
# decoding, CPU implementation vs a float64 oracle), the fuzz targets for a bounded time
# (scripts/fuzz.sh; XGK_FUZZ_SECONDS per target, default 60), then Python tests through a real XLA
# (JAX on CPU) and torch. GPU tests are ignored (Rust) / deselected (pytest -m "not gpu") here:
# they run on a GPU machine with scripts/gpu_check.sh. Last, the wheel (scripts/wheel_check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export XGK_PTXAS="$PWD/$(ls -d .venv/lib/python3*/site-packages/nvidia/cu13/bin | head -1)/ptxas"
cargo build --release --lib
cargo test --release --workspace
bash scripts/fuzz.sh "${XGK_FUZZ_SECONDS:-60}"   # each fuzz target for 60 s: 0 crashes, 0 hangs
export XLA_GPU_KERNELS_LIB="$PWD/target/release/libxla_gpu_kernels.so" JAX_PLATFORMS=cpu
.venv/bin/python -m pytest -m "not gpu" -q tests/python
# The wheel as a user installs it: built, installed into a fresh venv, the README's quick starts
# run from outside the checkout with no variable of ours set.
XGK_SKIP_SETUP=1 bash scripts/wheel_check.sh
