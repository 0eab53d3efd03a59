"""Tensor- and data-parallel ragged paged attention on >= 2 CUDA GPUs (xla_gpu_kernels.sharding),
and independent calls in flight on two GPUs at once. Marked `gpu`: on the GPU machine run
`pytest tests/python/test_sharding_gpu.py -m gpu`. Never skips: with fewer than 2 GPUs it fails.
"""

import functools
import os
import subprocess
import sys
from pathlib import Path

# JAX takes 75 % of every GPU's memory when it starts, by default: this process would hold it
# while the checks and the example run in child processes on the same two GPUs, each of which
# needs its own pool and NCCL's buffers. Before `import jax`: read when the backend starts.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import sharding_multidevice  # noqa: E402
import xla_gpu_kernels.jax as xk  # noqa: E402
from rpa_cases import check_close, make_case  # noqa: E402

pytestmark = pytest.mark.gpu

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.fixture(scope="module", autouse=True)
def two_gpus():
    assert jax.default_backend() == "gpu", f"needs CUDA GPUs, JAX backend is {jax.default_backend()}"
    assert len(jax.devices()) >= 2, f"needs >= 2 GPUs, JAX sees {jax.devices()}"
    xk.register()


@pytest.fixture(scope="module")
def gpu_checks():
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["PYTHONPATH"] = str(ROOT / "python")
    done, results = sharding_multidevice.run_in_child(env, ["--tolerance"], timeout=900)
    assert "_setup" in results, f"the checks did not start:\n{done.stdout}\n{done.stderr}"
    assert "(gpu)" in results["_setup"]["detail"], results["_setup"]
    print(results["_setup"]["detail"])
    return done, results


@pytest.mark.parametrize("name", list(sharding_multidevice.CHECKS))
def test_on_the_gpus(gpu_checks, name):
    done, results = gpu_checks
    assert name in results, f"check {name} did not report (crash?):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert results[name]["ok"], results[name]["detail"]
    print(f"{name}: {results[name]['detail']}")  # what ran, and what did not (never silently)


def _case(seed, **kw):
    args, attrs = make_case(np.random.default_rng(seed), head_dim=128, num_kv_heads=8, group=4, page_size=16,
                            seqs=((1, 900), (1, 3000), (7, 400), (300, 300)), **kw)
    return args, attrs


def test_concurrent_calls_on_two_gpus_match_one_gpu():
    """The same jitted op dispatched asynchronously to GPU 0 and GPU 1, many calls in flight on
    both: every result equals the result of GPU 0 alone (same kernel, same shapes: bit for bit)."""
    devices = jax.devices()[:2]
    cases = [_case(s) for s in range(3)]
    calls = [jax.jit(functools.partial(xk.ragged_paged_attention, **attrs)) for _, attrs in cases]
    alone = [np.asarray(jax.block_until_ready(call(*jax.device_put(args, devices[0]))), np.float32)
             for call, (args, _) in zip(calls, cases)]
    placed = [(k, d, jax.device_put(args, d)) for k, (args, _) in enumerate(cases) for d in devices]
    outs = []
    for _ in range(8):  # no block between calls: both GPUs busy at once
        for k, d, args in placed:
            outs.append((k, d, calls[k](*args)))
    jax.block_until_ready([o for _, _, o in outs])
    for i, (k, d, out) in enumerate(outs):
        assert out.devices() == {d}, (i, out.devices(), d)
        np.testing.assert_array_equal(np.asarray(out, np.float32), alone[k], err_msg=f"call {i} on {d}")


def test_two_gpu_tensor_parallel_llama_geometry_against_reference():
    """32 q / 8 KV heads, head_dim 128, bf16 over 2 GPUs (the benchmark's geometry, small batch)
    against JAX's reference on one GPU."""
    from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ref_ragged_paged_attention

    import xla_gpu_kernels.sharding as xs

    args, attrs = make_case(np.random.default_rng(7), head_dim=128, num_kv_heads=8, group=4, page_size=16,
                            seqs=((1, 2000), (1, 700), (16, 16)))
    args = tuple(map(jnp.asarray, args))
    mesh = jax.make_mesh((2,), ("model",), devices=jax.devices()[:2])
    qs, kvs, rs = xs.head_shardings(mesh)
    placed = (jax.device_put(args[0], qs), jax.device_put(args[1], kvs)) + tuple(jax.device_put(a, rs) for a in args[2:])
    f = jax.jit(lambda *a: xs.ragged_paged_attention(*a, **attrs))
    text = f.lower(*placed).compile().as_text()
    assert "all-gather" not in text and "all-to-all" not in text
    out = f(*placed)
    ref = ref_ragged_paged_attention(*args, **attrs)
    check_close(out, ref, np.asarray(args[4]), np.asarray(args[5]), args[0].dtype, "TP=2 llama geometry")


def test_tensor_parallel_example_on_two_gpus():
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["PYTHONPATH"] = str(ROOT / "python")
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "jax_tensor_parallel_decode.py"), "--devices", "2",
                           "--steps", "16"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "backend=gpu devices=2" in done.stdout and "max error" in done.stdout, done.stdout
    print(done.stdout)
