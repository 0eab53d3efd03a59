"""Our library inside a real XLA (JAX on CPU): the Host FFI handlers under jax.jit, against
numpy and JAX's own `ref_ragged_paged_attention`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ref_ragged_paged_attention

import xla_gpu_kernels
import xla_gpu_kernels.jax as xk
from rpa_cases import ROW_TOLERANCE, case_seed, check_case, dense_reference_array, make_case, random_cases

jax.config.update("jax_platforms", "cpu")


def test_package_finds_and_loads_the_library():
    assert xla_gpu_kernels.version().startswith("xla-gpu-kernels ")
    xk.register()
    xk.register()  # idempotent


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16, jnp.bfloat16])
@pytest.mark.parametrize("shape", [(1,), (7,), (1000,), (3, 5, 17), (4099,)])
def test_simple_add_under_jit_is_exact(dtype, shape):
    rng = np.random.default_rng()
    a = jnp.asarray(rng.uniform(-100, 100, shape), dtype)
    b = jnp.asarray(rng.uniform(-100, 100, shape), dtype)
    out = jax.jit(xk.simple_add)(a, b)
    assert out.dtype == dtype and out.shape == shape
    np.testing.assert_array_equal(np.asarray(out), np.asarray(a + b))


def test_simple_add_hlo_has_our_custom_call():
    a = jnp.ones((8,), jnp.float32)
    compiled = jax.jit(xk.simple_add).lower(a, a).compile().as_text()
    assert 'custom_call_target="xla_gpu_simple_add"' in compiled


def test_simple_add_vmap():
    rng = np.random.default_rng()
    a = jnp.asarray(rng.standard_normal((3, 10)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((3, 10)), jnp.float32)
    np.testing.assert_array_equal(np.asarray(jax.vmap(xk.simple_add)(a, b)), np.asarray(a + b))


def test_simple_add_dtype_mismatch_raises_our_message():
    a, b = jnp.ones((4,), jnp.float32), jnp.ones((4,), jnp.bfloat16)
    with pytest.raises(ValueError, match="dtype mismatch"):
        xk.simple_add(a, b)
    # Past the Python check, the handler itself reports it through XLA.
    xk.register()
    call = jax.ffi.ffi_call(xk.SIMPLE_ADD, jax.ShapeDtypeStruct((4,), jnp.float32))
    with pytest.raises(Exception, match="simple_add: dtype mismatch: a is f32 but b is bf16"):
        jax.block_until_ready(call(a, b))


SEED = case_seed()
CASES = random_cases(seed=SEED, count=56)
WORST = {}


@pytest.mark.parametrize("label,case", CASES, ids=[c[0] for c in CASES])
def test_paged_attention_matches_jax_reference(label, case):
    args, attrs = case
    ours = jax.jit(lambda *a: xk.ragged_paged_attention(*a, **attrs))(*map(jnp.asarray, args))
    assert ours.shape == args[0].shape and ours.dtype == args[0].dtype
    ref = ref_ragged_paged_attention(*map(jnp.asarray, args), **attrs)
    check_case(ours, ref, case, label)


@pytest.mark.parametrize("label,case", CASES, ids=[c[0] for c in CASES])
def test_paged_attention_matches_independent_dense_reference(label, case):
    """Against rpa_cases.dense_reference: float64, written for the tests from the contract's text
    (page-table gather by definition, mask by positions), sharing no code with the library."""
    args, attrs = case
    ours = jax.jit(lambda *a: xk.ragged_paged_attention(*a, **attrs))(*map(jnp.asarray, args))
    rel = check_case(ours, dense_reference_array(args, attrs), case, label)
    key = f"{args[0].dtype}/{args[1].dtype}"
    WORST[key] = max(WORST.get(key, 0.0), rel)


def test_report_worst_errors():
    """Every dtype pair was compared (the tests above ran) and its worst row-relative error is
    under its bound; printed for the log."""
    pairs = {f"{c[1][0][0].dtype}/{c[1][0][1].dtype}" for c in CASES}
    assert set(WORST) == pairs, f"dtype pairs not compared: {pairs - set(WORST)}"
    for k, v in sorted(WORST.items()):
        print(f"worst row-relative |ours - dense reference| on CPU {k}: {v:.3e} (seed {SEED})")
        assert v <= ROW_TOLERANCE[k.split("/")[0]][0] * 8, (k, v)


def test_paged_attention_hlo_and_vmap():
    rng = np.random.default_rng(case_seed())
    args, attrs = make_case(rng, head_dim=64)
    args2, _ = make_case(rng, head_dim=64)  # same shapes, other values
    args = tuple(map(jnp.asarray, args))
    args2 = tuple(map(jnp.asarray, args2))
    text = jax.jit(lambda *a: xk.ragged_paged_attention(*a, **attrs)).lower(*args).compile().as_text()
    assert 'custom_call_target="xla_gpu_paged_attention"' in text
    batched = tuple(jnp.stack([a, b]) for a, b in zip(args, args2))
    out = jax.vmap(lambda *a: xk.ragged_paged_attention(*a, **attrs))(*batched)
    for i, one in enumerate((args, args2)):
        single = xk.ragged_paged_attention(*one, **attrs)
        np.testing.assert_array_equal(np.asarray(out[i], np.float32), np.asarray(single, np.float32),
                                      err_msg=f"vmap entry {i}")
    assert not np.array_equal(np.asarray(out[0], np.float32), np.asarray(out[1], np.float32))


def test_paged_attention_errors_are_readable():
    args, _ = make_case(np.random.default_rng(), head_dim=64)
    args = tuple(map(jnp.asarray, args))
    q, kv = args[0], args[1]
    with pytest.raises(ValueError, match="sliding_window must be > 0"):
        xk.ragged_paged_attention(*args, sliding_window=0)
    with pytest.raises(ValueError, match="soft_cap must not be 0"):
        xk.ragged_paged_attention(*args, soft_cap=0.0)
    with pytest.raises(ValueError, match="must be even"):
        xk.ragged_paged_attention(q, kv[:, :, :3], *args[2:])
    with pytest.raises(ValueError, match="head_dim of q"):
        xk.ragged_paged_attention(q[:, :, :32], *args[1:])
    with pytest.raises(ValueError, match="kv_lens must be int32"):
        xk.ragged_paged_attention(q, kv, args[2].astype(jnp.int64) if jax.config.jax_enable_x64 else args[2].astype(jnp.float32), *args[3:])
    # The library's own checks, reached without the Python front end.
    out = jax.ShapeDtypeStruct(q.shape, q.dtype)
    call = jax.ffi.ffi_call(xk.PAGED_ATTENTION, (out, jax.ShapeDtypeStruct((0,), jnp.uint8)))
    with pytest.raises(Exception, match="expected 6 operands and 2 result"):
        jax.block_until_ready(jax.ffi.ffi_call(xk.PAGED_ATTENTION, out)(*args))
    with pytest.raises(Exception, match="result 1 must be the u8"):
        jax.block_until_ready(jax.ffi.ffi_call(xk.PAGED_ATTENTION, (out, out))(*args))
    with pytest.raises(Exception, match="sliding_window must be > 0, got -3"):
        jax.block_until_ready(call(*args, sliding_window=-3))
    with pytest.raises(Exception, match="unknown attribute 'window'"):
        jax.block_until_ready(call(*args, window=3))
