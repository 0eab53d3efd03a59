"""The CUDA-only bad inputs of `test_bad_inputs.py` (marked `gpu`: run with
`pytest tests/python/test_bad_inputs_gpu.py -m gpu` on the GPU machine, scripts/gpu_check.sh):
CUDA tensors mixed with CPU tensors, wrong dtypes and non-contiguous CUDA tensors in the torch ops,
the library's dtype error through XLA on the GPU, and the legacy target's static checks."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import xla_gpu_kernels.jax as xk
import xla_gpu_kernels.torch as xt
from rpa_cases import make_case

pytestmark = pytest.mark.gpu


def raises(exc, start):
    return pytest.raises(exc, match=r"^(\w+: )?" + re.escape(start))


def test_bad_inputs_on_cuda():
    args, _ = make_case(np.random.default_rng(7), q_dtype="float32", head_dim=64)
    kw = {"sm_scale": 0.125}
    t = [torch.from_numpy(a).cuda() for a in args]
    with raises(ValueError, "all tensors must be on one device, got q on cuda:0, kv_pages on cuda:0, kv_lens on "
                            "cuda:0, page_indices on cuda:0, cu_q_lens on cuda:0, num_seqs on cpu"):
        xt.paged_attention(*t[:5], t[5].cpu(), **kw)
    with raises(ValueError, "all tensors must be on one device, got a on cuda:0, b on cpu"):
        xt.simple_add(torch.ones(4, device="cuda"), torch.ones(4))
    with raises(ValueError, "q dtype must be f32, f16 or bf16, got s32"):
        xt.paged_attention(t[0].int(), *t[1:], **kw)
    want = xt.paged_attention(*t, **kw)
    q = t[0].transpose(0, 1).contiguous().transpose(0, 1)
    assert not q.is_contiguous()
    torch.testing.assert_close(xt.paged_attention(q, *t[1:], **kw), want, rtol=0, atol=0)

    assert jax.default_backend() == "gpu", f"needs a CUDA GPU, JAX backend is {jax.default_backend()}"
    with raises(jax.errors.JaxRuntimeError, "INVALID_ARGUMENT: simple_add: unsupported dtype s32"):
        jax.block_until_ready(xk.simple_add(jnp.ones(4, jnp.int32), jnp.ones(4, jnp.int32)))
    with raises(ValueError, "kv_lens must be int32, got float32"):
        xk.ragged_paged_attention(args[0], args[1], args[2].astype(np.float32), *args[3:], custom_call_api_version=2,
                                  **kw)
