"""JAX 0.11 on CUDA: the typed FFI targets and both legacy symbols, against JAX's own add and
`ref_ragged_paged_attention` run on the same GPU. Marked `gpu`: run with
`pytest tests/python/test_jax_gpu.py -m gpu` on the GPU machine (scripts/gpu_check.sh)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import xla_gpu_kernels.jax as xk
from rpa_cases import ROW_TOLERANCE, case_seed, check_case, dense_reference_array, random_cases

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def on_gpu():
    assert jax.default_backend() == "gpu", f"needs a CUDA GPU, JAX backend is {jax.default_backend()}"
    xk.register()


@pytest.mark.parametrize("api", [4, 1, 2])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16, jnp.bfloat16])
@pytest.mark.parametrize("n", [1, 3, 1001, (1 << 20) + 3])
def test_simple_add_every_abi(api, dtype, n):
    rng = np.random.default_rng()
    a = jnp.asarray(rng.uniform(-1e3, 1e3, n), dtype)
    b = jnp.asarray(rng.uniform(-1e3, 1e3, n), dtype)
    out = jax.jit(lambda x, y: xk.simple_add(x, y, custom_call_api_version=api))(a, b)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(jax.jit(jnp.add)(a, b)))


def test_hlo_names_our_targets():
    a = jnp.ones((8,), jnp.float32)
    for api, target in [(4, "xla_gpu_simple_add"), (1, "XlaGpuSimpleAdd"), (2, "XlaGpuSimpleAddStatus")]:
        text = jax.jit(lambda x, y: xk.simple_add(x, y, custom_call_api_version=api)).lower(a, a).compile().as_text()
        assert f'custom_call_target="{target}"' in text


@pytest.mark.parametrize("opaque,message", [
    ("xgk1;op=simple_add;dtype=s32;n=4", "unsupported dtype s32"),  # > 15 bytes: heap-allocated status
    ("{}", "opaque must start with"),  # JSON: XLA swallows it, we see an empty opaque
])
def test_legacy_status_reports_our_error(opaque, message):
    a = jnp.ones((4,), jnp.float32)
    call = jax.ffi.ffi_call(xk.LEGACY_SIMPLE_ADD_STATUS, jax.ShapeDtypeStruct((4,), jnp.float32),
                            custom_call_api_version=2, legacy_backend_config=opaque)
    with pytest.raises(Exception, match=message):
        jax.block_until_ready(jax.jit(call)(a, a))
    # The process survives and the next call works.
    np.testing.assert_array_equal(np.asarray(xk.simple_add(a, a, custom_call_api_version=2)), 2 * np.ones(4))


def test_typed_error_through_xla_on_gpu():
    a, b = jnp.ones((4,), jnp.float32), jnp.ones((4,), jnp.float16)
    call = jax.ffi.ffi_call(xk.SIMPLE_ADD, jax.ShapeDtypeStruct((4,), jnp.float32))
    with pytest.raises(Exception, match="simple_add: dtype mismatch: a is f32 but b is f16"):
        jax.block_until_ready(call(a, b))


SEED = case_seed()
CASES = random_cases(seed=SEED, count=28)
WORST = {}


@pytest.mark.parametrize("api", [4, 2])
@pytest.mark.parametrize("label,case", CASES, ids=[c[0] for c in CASES])
def test_paged_attention_matches_reference_on_gpu(label, case, api):
    args, attrs = case
    dev = tuple(jax.device_put(jnp.asarray(a)) for a in args)
    ours = jax.jit(lambda *a: xk.ragged_paged_attention(*a, custom_call_api_version=api, **attrs))(*dev)
    ref = ref_on_gpu(dev, attrs)
    err = check_case(ours, ref, case, label)
    # And against the independent float64 dense reference (tests/python/rpa_cases.py).
    err = max(err, check_case(ours, dense_reference_array(args, attrs), case, label + " (dense reference)"))
    key = f"{args[0].dtype}/{args[1].dtype}"
    WORST[key] = max(WORST.get(key, 0.0), err)


def ref_on_gpu(dev, attrs):
    from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ref_ragged_paged_attention
    # JAX's GPU matmuls default to TF32 for f32: ask the reference for full f32.
    with jax.default_matmul_precision("highest"):
        return ref_ragged_paged_attention(*dev, **attrs)


def test_report_worst_errors():
    """Every dtype pair was compared under both APIs (the tests above ran: this one comes after
    them in the file) and its worst row-relative error is printed for the closing notes."""
    pairs = {f"{c[1][0][0].dtype}/{c[1][0][1].dtype}" for c in CASES}
    assert set(WORST) == pairs, f"dtype pairs not compared: {pairs - set(WORST)}"
    for k, v in sorted(WORST.items()):
        print(f"worst row-relative |ours - ref| on GPU {k}: {v:.3e} (seed {SEED})")
        assert v <= ROW_TOLERANCE[k.split("/")[0]][0] * 8, (k, v)


@pytest.mark.parametrize("mode", ["on", "off"])
def test_command_buffers_replay_our_calls(mode, tmp_path):
    """A jitted multi-layer step (attention + simple_add per layer) with XLA command buffers on is
    replayed from recorded graphs: on repeated steps the library launches at most half of what it
    launches with command buffers off (XLA re-traces a call whose buffers moved, such as the one
    writing the step's fresh output). Results follow new metadata (child process: XLA_FLAGS must be
    set before JAX starts); on and off agree (benchmarks/overhead.py compares them)."""
    import json
    import os
    import subprocess
    import sys
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    flags = {"on": "--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1",
             "off": "--xla_gpu_enable_command_buffer="}[mode]
    out = str(tmp_path / f"{mode}.json")
    env = dict(os.environ, XLA_FLAGS=flags, XGK_CMDBUF_LAYERS="4", XLA_PYTHON_CLIENT_PREALLOCATE="false")
    p = subprocess.run([sys.executable, os.path.join(root, "benchmarks", "overhead.py"), "--child-cmdbuf", mode, out],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    r = json.load(open(out))
    outputs = np.load(out + ".npz")
    assert np.array_equal(outputs["out1"], outputs["out1_again"])
    assert not np.array_equal(outputs["out1"], outputs["out2"])
    if mode == "on":
        assert r["launches_per_step"] <= 4 * 3 / 2, r
    else:
        assert r["launches_per_step"] >= 2 * 4, r
    print(f"command buffers {mode}: {r['launches_per_step']} launches per step, step {r['step_sync_us']:.0f} us")
