"""The examples run as shipped (on CPU in CI; on CUDA too on the GPU machine)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script", ["jax_decode_loop.py", "torch_paged_attention.py"])
def test_example_runs(script):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    done = subprocess.run([sys.executable, str(ROOT / "examples" / script)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "max error" in done.stdout
    print(done.stdout)


@pytest.mark.parametrize("devices", [2, 4])
def test_tensor_parallel_example_on_cpu_devices(devices):
    """The tensor-parallel decode loop on `devices` host devices (our Host handler on each); on two
    GPUs it runs in test_sharding_gpu.py."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "jax_tensor_parallel_decode.py"), "--devices",
                           str(devices)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"backend=cpu devices={devices}" in done.stdout and "max error" in done.stdout, done.stdout
    print(done.stdout)
