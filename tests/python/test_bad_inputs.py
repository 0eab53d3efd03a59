"""Every public function given bad inputs raises a clear exception (docs/reliability.md, "Bad inputs
from Python", lists them): wrong dtypes, wrong shapes, bad attributes, non-tensor operands, wrong or mixed
devices; non-contiguous inputs are accepted (torch ops make them contiguous; JAX arrays have no
strides) and give the contiguous result.

Functions: ``xla_gpu_kernels.jax.{simple_add, ragged_paged_attention}``,
``xla_gpu_kernels.sharding.{ragged_paged_attention, ragged_paged_attention_sharded, head_shardings,
check_head_split}``, ``xla_gpu_kernels.torch.{simple_add, paged_attention}`` (= ``torch.ops.xla_gpu.*``),
``xla_gpu_kernels.library_path``. Mixed JAX devices run in a fresh process with 2 CPU devices;
CUDA-only cases are in ``test_bad_inputs_gpu.py`` (marked ``gpu``; this module pins JAX to the CPU).
"""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.sharding import Mesh

import xla_gpu_kernels
import xla_gpu_kernels.jax as xk
import xla_gpu_kernels.sharding as xs
import xla_gpu_kernels.torch as xt
from rpa_cases import make_case

jax.config.update("jax_platforms", "cpu")

ROOT = Path(__file__).resolve().parents[2]
JaxRuntimeError = jax.errors.JaxRuntimeError


def valid_case():
    """A small valid f32 batch: q [8, 8, 64], kv_pages [8, 16, 4, 64], 3 sequences (2 used)."""
    args, _ = make_case(np.random.default_rng(7), q_dtype="float32", head_dim=64)
    return list(args), {"sm_scale": 0.125}


def raises(exc, start):
    """pytest.raises for `exc` whose message starts with `start` (after XLA's 'INVALID_ARGUMENT: ')."""
    return pytest.raises(exc, match=r"^(\w+: )?" + re.escape(start))


# --- bad inputs of ragged paged attention, shared by the JAX, sharding and torch front ends -------
# name -> (mutation of (args, kwargs), (JAX exception, message start), (torch exception, message start))


def _set(i, f):
    def mutate(args, kw):
        args[i] = f(args[i])
    return mutate


def _kw(**extra):
    def mutate(args, kw):
        kw.update(extra)
    return mutate


def _both(exc, start):
    return (exc, start), (exc, start)


RPA_BAD = {
    # wrong dtypes
    "q_int32": (_set(0, lambda q: q.astype(np.int32)),
                (ValueError, "q dtype must be one of ('float32', 'float16', 'bfloat16'), got int32"),
                (ValueError, "q dtype must be f32, f16 or bf16, got s32")),
    "kv_dtype_not_q_dtype": (_set(1, lambda kv: kv.astype(np.float16)),
                             (ValueError, "kv_pages dtype must be q's dtype (float32) or fp8"),
                             (ValueError, "kv_pages dtype must be q's dtype (f32) or fp8 (f8e4m3fn, f8e5m2), got f16")),
    "kv_lens_float32": (_set(2, lambda x: x.astype(np.float32)),
                        (ValueError, "kv_lens must be int32, got float32"),
                        (ValueError, "kv_lens must be int32 (s32), got f32[3]")),
    "page_indices_int8": (_set(3, lambda x: x.astype(np.int8)),
                          (ValueError, "page_indices must be int32, got int8"),
                          (ValueError, "page_indices must be int32 (s32), got s8[3,4]")),
    "num_seqs_uint8": (_set(5, lambda x: x.astype(np.uint8)),
                       (ValueError, "num_seqs must be int32, got uint8"),
                       (ValueError, "num_seqs must be int32 (s32), got u8[1]")),
    # wrong shapes
    "q_rank_2": (_set(0, lambda q: q[:, 0]),
                 (ValueError, "q must be [max_num_batched_tokens, num_q_heads, head_dim], got shape (8, 64)"),
                 (ValueError, "q must have rank 3 [max_num_batched_tokens, num_q_heads, head_dim], got f32[8,64]")),
    "kv_pages_rank_3": (_set(1, lambda kv: kv[0]),
                        (ValueError, "kv_pages must be [total_num_pages, page_size, 2 * num_kv_heads, head_dim]"),
                        (ValueError, "kv_pages must have rank 4 [total_num_pages, page_size, 2 * num_kv_heads, head_dim]")),
    "head_dim_unsupported": (lambda a, kw: a.__setitem__(slice(0, 2), [a[0][:, :, :48], a[1][..., :48]]),
                             *_both(ValueError, "head_dim 48 is not supported; supported: ")),
    "head_dim_q_vs_kv": (_set(1, lambda kv: np.concatenate([kv, kv], axis=3)),
                         *_both(ValueError, "head_dim of q (64) and kv_pages (128) differ")),
    "kv_axis2_odd": (_set(1, lambda kv: kv[:, :, :3]),
                     (ValueError, "kv_pages axis 2 (3) must be even"),
                     (ValueError, "kv_pages axis 2 (num_combined_kv_heads = 3) must be even and > 0")),
    "q_heads_not_multiple": (_set(0, lambda q: q[:, :3]),
                             *_both(ValueError, "num_q_heads (3) must be a multiple of num_kv_heads (2)")),
    "kv_lens_rank_2": (_set(2, lambda x: x[:, None]),
                       (ValueError, "kv_lens must be [max_num_seqs], got shape (3, 1)"),
                       (ValueError, "kv_lens must have shape [max_num_seqs], got s32[3,1]")),
    "page_indices_rows": (_set(3, lambda x: x[:-1]),
                          (ValueError, "page_indices must be [max_num_seqs=3, pages_per_seq], got shape (2, 4)"),
                          (ValueError, "page_indices must have shape [max_num_seqs = 3, pages_per_seq], got s32[2,4]")),
    "cu_q_lens_length": (_set(4, lambda x: x[:-1]),
                         (ValueError, "cu_q_lens must be [max_num_seqs + 1 = 4], got shape (3,)"),
                         (ValueError, "cu_q_lens must have shape [max_num_seqs + 1 = 4], got s32[3]")),
    "num_seqs_scalar": (_set(5, lambda x: x.reshape(())),
                        (ValueError, "num_seqs must have shape (1,), got ()"),
                        (ValueError, "num_seqs must have shape [1], got s32[]")),
    # bad attributes
    "sliding_window_0": (_kw(sliding_window=0), *_both(ValueError, "sliding_window must be > 0, got 0")),
    "sliding_window_float": (_kw(sliding_window=2.5),
                             (TypeError, "sliding_window must be an integer, got float 2.5"),
                             (RuntimeError, "xla_gpu::paged_attention() Expected a value of type 'Optional[int]' for "
                                            "argument 'sliding_window'")),
    "sliding_window_2_40": (_kw(sliding_window=2**40),
                            (ValueError, "sliding_window 1099511627776 is too large"),
                            (ValueError, "sliding_window 1099511627776 is too large")),
    "soft_cap_0": (_kw(soft_cap=0.0), (ValueError, "soft_cap must not be 0"),
                   (ValueError, "soft_cap must be finite and != 0, got 0")),
    "sm_scale_nan": (_kw(sm_scale=float("nan")), (ValueError, "sm_scale must be finite, got nan"),
                     (ValueError, "sm_scale must be finite, got NaN")),
    "k_scale_inf": (_kw(k_scale=float("inf")), *_both(ValueError, "k_scale must be finite, got inf")),
    "mask_value_nan": (_kw(mask_value=float("nan")), *_both(ValueError, "mask_value must not be NaN")),
    "sm_scale_string": (_kw(sm_scale="0.1"), (TypeError, "sm_scale must be a number (a Python or numpy scalar), got str"),
                        (RuntimeError, "xla_gpu::paged_attention() Expected a value of type 'float' for argument "
                                       "'sm_scale'")),
    "v_scale_list": (_kw(v_scale=[0.5]), (TypeError, "v_scale must be a number (a Python or numpy scalar), got list"),
                     (RuntimeError, "xla_gpu::paged_attention() Expected a value of type 'Optional[float]' for "
                                    "argument 'v_scale'")),
    # not an array / tensor
    "q_none": (_set(0, lambda q: None), (ValueError, "None is not a valid value for jnp.array"),
               (TypeError, "paged_attention: q must be a torch.Tensor, got NoneType")
               if xt.KERNELS["CPU"] == "python" else (ValueError, "paged_attention: q must be a tensor, got None")),
}


def _bad_case(name):
    args, kw = valid_case()
    RPA_BAD[name][0](args, kw)
    return args, kw


def _one_device_mesh():
    return Mesh(np.array(jax.devices()[:1]), ("model",))


RPA_JAX_FRONT_ENDS = {
    "jax": lambda a, kw: xk.ragged_paged_attention(*a, **kw),
    "jax_jit": lambda a, kw: jax.jit(lambda *x: xk.ragged_paged_attention(*x, **kw))(*a),
    "sharding": lambda a, kw: xs.ragged_paged_attention(*a, **kw),
    "sharding_sharded": lambda a, kw: xs.ragged_paged_attention_sharded(*a, mesh=_one_device_mesh(), head_axis="model",
                                                                        **kw),
}


@pytest.mark.parametrize("front_end", list(RPA_JAX_FRONT_ENDS))
@pytest.mark.parametrize("name", list(RPA_BAD))
def test_jax_ragged_paged_attention_bad_input(front_end, name):
    args, kw = _bad_case(name)
    exc, start = RPA_BAD[name][1]
    with raises(exc, start):
        jax.block_until_ready(RPA_JAX_FRONT_ENDS[front_end](args, kw))


@pytest.mark.parametrize("name", list(RPA_BAD))
def test_torch_paged_attention_bad_input(name):
    args, kw = _bad_case(name)
    tensors = [a if a is None else torch.from_numpy(np.array(a)) for a in args]
    exc, start = RPA_BAD[name][2]
    with raises(exc, start):
        xt.paged_attention(*tensors, **kw)


def test_unknown_keyword_arguments():
    args, kw = valid_case()
    with raises(TypeError, "ragged_paged_attention() got an unexpected keyword argument 'window'"):
        xk.ragged_paged_attention(*args, window=3)
    with raises(TypeError, "ragged_paged_attention: unexpected keyword arguments ['window']"):
        xs.ragged_paged_attention(*args, window=3)
    with raises(TypeError, "ragged_paged_attention: unexpected keyword arguments ['window']"):
        xs.ragged_paged_attention_sharded(*args, mesh=_one_device_mesh(), head_axis="model", window=3)
    t = [torch.from_numpy(a) for a in args]
    with raises(TypeError, "paged_attention() got an unexpected keyword argument 'window'"):
        xt.paged_attention(*t, window=3)


def test_torch_only_dtypes_and_operands():
    args, kw = valid_case()
    t = [torch.from_numpy(a) for a in args]
    with raises(ValueError, "q dtype must be f32, f16 or bf16, got f64"):  # JAX (x64 off) converts f64 to f32
        xt.paged_attention(t[0].double(), t[1].double(), *t[2:])
    # u32: the C API of the Python kernels has no code for it; the native kernels map it.
    with raises(ValueError, "unsupported dtype torch.uint32" if xt.KERNELS["CPU"] == "python"
                else "num_seqs must be int32 (s32), got u32[1]"):
        xt.paged_attention(*t[:5], t[5].to(torch.uint32))
    with raises(ValueError, "unsupported dtype torch.complex64"):
        xt.paged_attention(*t[:5], t[5].to(torch.complex64))
    with raises(RuntimeError, "xla_gpu::paged_attention() Expected a value of type 'Tensor' for argument 'q'"):
        xt.paged_attention(args[0].tolist(), *t[1:])


# --- devices and non-contiguous inputs -------------------------------------------------------------


def test_torch_non_contiguous_inputs_are_accepted():
    args, kw = valid_case()
    t = [torch.from_numpy(a) for a in args]
    want = xt.paged_attention(*t, **kw)
    # Same values, other strides: transposed copies transposed back, and a page table in column order.
    q = t[0].transpose(0, 1).contiguous().transpose(0, 1)
    kv = t[1].permute(1, 0, 2, 3).contiguous().permute(1, 0, 2, 3)
    pages = t[3].t().contiguous().t()
    assert not (q.is_contiguous() or kv.is_contiguous() or pages.is_contiguous())
    torch.testing.assert_close(xt.paged_attention(q, kv, t[2], pages, *t[4:], **kw), want, rtol=0, atol=0)
    a = torch.rand(6, 4).t()
    b = torch.rand(12, 4)[::2].t()  # every other row
    assert not (a.is_contiguous() or b.is_contiguous())
    torch.testing.assert_close(xt.simple_add(a, b), a + b, rtol=0, atol=0)


def test_torch_meta_and_mixed_devices():
    args, kw = valid_case()
    t = [torch.from_numpy(a) for a in args]
    # All on "meta": the fake implementation gives the output's shape, dtype and device.
    out = xt.paged_attention(*[x.to("meta") for x in t], **kw)
    assert (out.shape, out.dtype, out.device.type) == (t[0].shape, t[0].dtype, "meta")
    out = xt.simple_add(torch.ones(4, device="meta"), torch.ones(4, device="meta"))
    assert (out.shape, out.device.type) == ((4,), "meta")
    with raises(RuntimeError, "simple_add: shape mismatch: torch.Size([4]) vs torch.Size([3])"):
        xt.simple_add(torch.ones(4, device="meta"), torch.ones(3, device="meta"))
    # CPU mixed with meta: torch sends the call to the fake implementation, which once returned
    # an uninitialized CPU tensor; now a clear error naming each tensor's device.
    with raises(ValueError, "simple_add: all tensors must be on one device, got a on cpu, b on meta"):
        xt.simple_add(torch.ones(4), torch.ones(4, device="meta"))
    with raises(ValueError, "paged_attention: all tensors must be on one device, got q on cpu, kv_pages on cpu, "
                            "kv_lens on cpu, page_indices on cpu, cu_q_lens on cpu, num_seqs on meta"):
        xt.paged_attention(*t[:5], t[5].to("meta"), **kw)
    with raises(ValueError, "paged_attention: all tensors must be on one device, got q on meta"):
        xt.paged_attention(t[0].to("meta"), *t[1:], **kw)


def test_jax_non_contiguous_and_legacy_targets_on_cpu():
    args, kw = valid_case()
    want = np.asarray(xk.ragged_paged_attention(*args, **kw))
    q = np.asfortranarray(args[0])  # numpy arrays with other strides: JAX copies them in
    pages = np.asfortranarray(args[3])
    assert not q.flags.c_contiguous and not pages.flags.c_contiguous
    np.testing.assert_array_equal(np.asarray(xk.ragged_paged_attention(q, args[1], args[2], pages, *args[4:], **kw)),
                                  want)
    a = np.arange(12, dtype=np.float32).reshape(3, 4).T
    np.testing.assert_array_equal(np.asarray(xk.simple_add(a, a)), a + a)
    # The legacy symbols are CUDA-only: on the CPU XLA finds no implementation.
    with raises(JaxRuntimeError, "NOT_FOUND: No registered implementation for untyped custom call to "
                                 "XlaGpuPagedAttention for Host"):
        jax.block_until_ready(xk.ragged_paged_attention(*args, custom_call_api_version=2, **kw))
    for version, target in ((1, "XlaGpuSimpleAdd"), (2, "XlaGpuSimpleAddStatus")):
        with raises(JaxRuntimeError, f"NOT_FOUND: No registered implementation for untyped custom call to {target}"):
            jax.block_until_ready(xk.simple_add(a, a, custom_call_api_version=version))


MIXED_DEVICES_SCRIPT = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    sys.path.insert(0, sys.argv[1])
    import xla_gpu_kernels.jax as xk, xla_gpu_kernels.sharding as xs
    from rpa_cases import make_case
    d0, d1 = jax.devices()
    args, _ = make_case(np.random.default_rng(7), q_dtype="float32", head_dim=64)
    a = [jax.device_put(x, d0) for x in args]
    a[1] = jax.device_put(args[1], d1)
    x = np.ones(4, np.float32)
    calls = {
        "jax.simple_add": lambda: xk.simple_add(jax.device_put(x, d0), jax.device_put(x, d1)),
        "jax.ragged_paged_attention": lambda: xk.ragged_paged_attention(*a),
        "sharding.ragged_paged_attention": lambda: xs.ragged_paged_attention(*a),
    }
    for name, call in calls.items():
        try:
            jax.block_until_ready(call())
            row = {"name": name, "error": None}
        except Exception as e:  # noqa: BLE001
            row = {"name": name, "error": type(e).__name__, "message": str(e)}
        print(json.dumps(row))
""")


def test_jax_mixed_devices_in_a_fresh_process():
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT / "python"),
               XLA_FLAGS="--xla_force_host_platform_device_count=2")
    done = subprocess.run([sys.executable, "-c", MIXED_DEVICES_SCRIPT, str(ROOT / "tests" / "python")], env=env,
                          capture_output=True, text=True, timeout=300)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 3, f"{done.stdout}\n{done.stderr}"
    for row in rows:
        assert row["error"] == "ValueError", row
        assert row["message"].startswith("Received incompatible devices for jitted computation"), row


# --- simple_add ----------------------------------------------------------------------------------


def test_jax_simple_add_bad_inputs():
    f = jnp.ones(4, jnp.float32)
    with raises(ValueError, "simple_add: dtype mismatch: float32 vs bfloat16"):
        xk.simple_add(f, f.astype(jnp.bfloat16))
    with raises(ValueError, "simple_add: shape mismatch: (4,) vs (2, 2)"):
        xk.simple_add(f, jnp.ones((2, 2)))
    with raises(ValueError, "simple_add: shape mismatch: (3, 4) vs (4,)"):  # no broadcasting
        xk.simple_add(jnp.ones((3, 4)), f)
    # Dtypes without a kernel reach the library, which fails the XLA execution with its message.
    for dtype, name in ((jnp.int32, "s32"), (jnp.bool_, "pred"), (jnp.float8_e4m3fn, "f8e4m3fn")):
        with raises(JaxRuntimeError, f"INVALID_ARGUMENT: simple_add: unsupported dtype {name}; supported: f32, f16, bf16"):
            jax.block_until_ready(xk.simple_add(jnp.ones(4, dtype), jnp.ones(4, dtype)))
    with raises(ValueError, "custom_call_api_version must be 1, 2 or 4, got 3"):
        xk.simple_add(f, f, custom_call_api_version=3)
    with raises(ValueError, "None is not a valid value for jnp.array"):
        xk.simple_add(None, f)
    with raises(TypeError, "Value 'hello' with dtype <U5 is not a valid JAX array type"):
        xk.simple_add("hello", f)


def test_torch_simple_add_bad_inputs():
    a = torch.ones(4)
    for dtype, start in ((torch.int32, "simple_add: unsupported dtype s32; supported: f32, f16, bf16"),
                         (torch.float64, "simple_add: unsupported dtype f64; supported: f32, f16, bf16"),
                         (torch.bool, "simple_add: unsupported dtype pred; supported: f32, f16, bf16"),
                         (torch.complex64, "unsupported dtype torch.complex64")):
        with raises(ValueError, start):
            xt.simple_add(a.to(dtype), a.to(dtype))
    with raises(ValueError, "simple_add: dtype mismatch: a is f32 but b is f16"):
        xt.simple_add(a, a.half())
    with raises(ValueError, "simple_add: shape mismatch: a is f32[4] but b is f32[2,2]"):
        xt.simple_add(a, torch.ones(2, 2))
    with raises(ValueError, "simple_add: shape mismatch: a is f32[3,4] but b is f32[4]"):  # no broadcasting
        xt.simple_add(torch.ones(3, 4), a)
    # A None tensor: the native kernels see an undefined tensor (C++ kernels can raise only
    # ValueError / RuntimeError); the Python ones check the argument's type.
    none_error = ((TypeError, "must be a torch.Tensor, got NoneType") if xt.KERNELS["CPU"] == "python"
                  else (ValueError, "must be a tensor, got None"))
    with raises(none_error[0], "simple_add: a " + none_error[1]):
        xt.simple_add(None, a)
    with raises(none_error[0], "simple_add: b " + none_error[1]):
        torch.ops.xla_gpu.simple_add(a, None)
    with raises(RuntimeError, "xla_gpu::simple_add() Expected a value of type 'Tensor' for argument 'a'"):
        xt.simple_add([1.0], a)


# --- sharding helpers and the library path ----------------------------------------------------------


def test_sharding_helpers_bad_inputs():
    mesh = _one_device_mesh()
    args, kw = valid_case()
    with raises(ValueError, "ragged_paged_attention_sharded: name a head_axis (tensor parallel) and/or a data_axis"):
        xs.ragged_paged_attention_sharded(*args, mesh=mesh)
    with raises(ValueError, "ragged_paged_attention_sharded: mesh has no axis ['heads']; its axes are ('model',)"):
        xs.ragged_paged_attention_sharded(*args, mesh=mesh, head_axis="heads")
    with raises(ValueError, "ragged_paged_attention_sharded: with data_axis every operand needs the same leading"):
        xs.ragged_paged_attention_sharded(*args, mesh=mesh, data_axis="model")
    with raises(ValueError, "ragged_paged_attention: cannot split 8 query heads / 3 KV heads over 2 devices"):
        xs.check_head_split(8, 3, 2)
    with raises(ValueError, "ragged_paged_attention: head counts must be > 0, got 8 query heads / 0 KV heads"):
        xs.check_head_split(8, 0, 2)
    with raises(ValueError, "Resource axis: heads of"):
        xs.head_shardings(mesh, "heads")


def test_library_path_bad_inputs():
    with raises(FileNotFoundError, "xla_gpu_kernels: shared library not found (tried /nonexistent/lib.so)"):
        xla_gpu_kernels.library_path("/nonexistent/lib.so")
    with raises(RuntimeError, "xla_gpu_kernels: already loaded from"):
        xla_gpu_kernels.load_library("/nonexistent/lib.so")
