"""Tensor- and data-parallel ragged paged attention (xla_gpu_kernels.sharding) on 4 CPU devices,
through our Host handler, against the one-device result.

JAX fixes its device count when it initializes, and other test modules initialize it in this
process, so the multi-device checks run in a fresh process (`sharding_multidevice.py` with
`--xla_force_host_platform_device_count=4`); each check is reported as its own test here. A few
single-device checks run in this process.
"""

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sharding_multidevice
import xla_gpu_kernels.jax as xk
import xla_gpu_kernels.sharding as xs
from rpa_cases import make_case

jax.config.update("jax_platforms", "cpu")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def run_checks(devices: int, extra=()):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT / "python"),
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    return sharding_multidevice.run_in_child(env, extra, timeout=600)


@pytest.fixture(scope="module")
def four_devices():
    done, results = run_checks(4)
    assert "_setup" in results, f"the checks did not start:\n{done.stdout}\n{done.stderr}"
    assert "4 x cpu" in results["_setup"]["detail"], results["_setup"]
    print(results["_setup"]["detail"])
    return done, results


@pytest.mark.parametrize("name", list(sharding_multidevice.CHECKS))
def test_on_four_cpu_devices(four_devices, name):
    done, results = four_devices
    assert name in results, f"check {name} did not report (crash?):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert results[name]["ok"], results[name]["detail"]
    print(f"{name}: {results[name]['detail']}")  # what ran, and what did not (never silently)


def test_every_check_passed_and_process_exited_cleanly(four_devices):
    done, results = four_devices
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert set(results) == {"_setup", *sharding_multidevice.CHECKS}


# --- in this process (one CPU device) ---------------------------------------------------------------------


def test_one_device_is_the_plain_op():
    args, attrs = make_case(np.random.default_rng(), head_dim=64, num_kv_heads=2, group=3, sliding_window=9)
    args = tuple(map(jnp.asarray, args))
    ref = xk.ragged_paged_attention(*args, **attrs)
    out = jax.jit(lambda *a: xs.ragged_paged_attention(*a, **attrs))(*args)
    np.testing.assert_array_equal(np.asarray(out, np.float32), np.asarray(ref, np.float32))
    np.testing.assert_array_equal(np.asarray(xs.ragged_paged_attention(*args, **attrs), np.float32),
                                  np.asarray(ref, np.float32))
    mesh = jax.make_mesh((1,), ("model",))
    out = xs.ragged_paged_attention_sharded(*args, mesh=mesh, head_axis="model", **attrs)
    np.testing.assert_array_equal(np.asarray(out, np.float32), np.asarray(ref, np.float32))


def test_contract_errors_before_tracing():
    args, _ = make_case(np.random.default_rng(), head_dim=64)
    args = tuple(map(jnp.asarray, args))
    with pytest.raises(ValueError, match="sliding_window must be > 0"):
        xs.ragged_paged_attention(*args, sliding_window=0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        xs.ragged_paged_attention(*args, window=3)
    mesh = jax.make_mesh((1,), ("model",))
    with pytest.raises(ValueError, match="name a head_axis"):
        xs.ragged_paged_attention_sharded(*args, mesh=mesh)
    with pytest.raises(ValueError, match="mesh has no axis"):
        xs.ragged_paged_attention_sharded(*args, mesh=mesh, head_axis="heads")


@pytest.mark.parametrize("q_heads,kv_heads,n,ok", [(8, 2, 2, True), (8, 4, 4, True), (8, 2, 4, False),
                                                   (4, 1, 2, False), (6, 3, 2, False), (12, 6, 3, True)])
def test_check_head_split(q_heads, kv_heads, n, ok):
    if ok:
        xs.check_head_split(q_heads, kv_heads, n)
    else:
        with pytest.raises(ValueError, match=f"cannot split {q_heads} query heads / {kv_heads} KV heads over {n}"):
            xs.check_head_split(q_heads, kv_heads, n)


def test_tensor_parallel_benchmark_runs_tiny():
    """benchmarks/tensor_parallel.py --tiny on 2 CPU devices (the GPU numbers come from the GPU machine)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT / "python"))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tensor_parallel.py"), "--tiny", "--calls", "2",
                           "--rounds", "1"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "speedup" in done.stdout and '"tiny": true' in done.stdout, done.stdout
