#!/usr/bin/env bash
# The main job (README's first command): builds the shared library and runs it through XLA. On a
# machine with a CUDA GPU, JAX runs our CUDA kernels; otherwise our Host (CPU) handlers. Last, a
# short continuous-batching trace of the serving step (tiny Llama-3-style model, checked against
# its dense f32 reference).
# Set XGK_SKIP_SETUP=1 where the toolchain and the Python packages are already there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=python3
if [ "${XGK_SKIP_SETUP:-0}" != 1 ]; then
  bash scripts/setup.sh
  PY=.venv/bin/python
fi
if command -v cargo >/dev/null; then cargo build --release --lib; fi
export XLA_GPU_KERNELS_LIB="${XLA_GPU_KERNELS_LIB:-$PWD/target/release/libxla_gpu_kernels.so}" PYTHONPATH="$PWD/python"
"$PY" - <<'PYEOF'
import jax, jax.numpy as jnp, numpy as np
import xla_gpu_kernels, xla_gpu_kernels.jax as xk
print(xla_gpu_kernels.version(), "| JAX", jax.__version__, "on", jax.default_backend())
a = jnp.arange(10, dtype=jnp.bfloat16); b = jnp.full(10, 0.5, jnp.bfloat16)
print("simple_add:", np.asarray(jax.jit(xk.simple_add)(a, b), np.float32))
PYEOF
"$PY" examples/jax_decode_loop.py --steps 8
"$PY" examples/serving_step.py --config tiny --requests 8 --new-tokens 16 --trace 6
