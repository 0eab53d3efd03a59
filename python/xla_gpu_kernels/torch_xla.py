"""torch_xla front end: legacy custom-call targets on the CUDA platform.

torch_xla registers custom calls only in the *legacy* registry (``_xla_register_custom_call_target``
-> api_version 0), so the matching call is ``_xla_custom_call(..., api_version=2)`` (status
returning) with our opaque string; the typed FFI targets cannot be reached from torch_xla.
CUDA support ended in torch_xla 2.8 (deprecated, no CUDA wheels); 2.9 removed CUDA custom-call
registration, so there ``register()`` raises and points to the alternatives.
"""

from __future__ import annotations

import ctypes

from . import _contract
from ._library import load_library

LEGACY_TARGETS = ("XlaGpuSimpleAdd", "XlaGpuSimpleAddStatus", "XlaGpuPagedAttention")
_registered = False


def _capsule(fn) -> object:
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.cast(fn, ctypes.c_void_p).value, None, None)


def _torch_xla():
    try:
        import torch_xla  # noqa: F401
        import torch_xla._XLAC as xlac
    except ImportError as e:
        raise RuntimeError(
            "xla_gpu_kernels.torch_xla needs torch_xla built with CUDA (torch_xla <= 2.8). torch_xla is not "
            "installed here; use xla_gpu_kernels.jax, or torch.ops.xla_gpu.* on CUDA tensors."
        ) from e
    version = tuple(int(p) for p in torch_xla.__version__.split("+")[0].split(".")[:2])
    if version >= (2, 9):
        raise RuntimeError(
            f"torch_xla {torch_xla.__version__} removed CUDA support and CUDA custom-call registration "
            "(_xla_register_custom_call_target is 'not implemented' since 2.9). Use JAX "
            "(xla_gpu_kernels.jax.ragged_paged_attention) or torch.ops.xla_gpu.paged_attention on CUDA tensors."
        )
    return xlac


def register(library: str | None = None) -> None:
    """Registers the legacy targets with torch_xla for platform "CUDA" (idempotent)."""
    global _registered
    if _registered:
        return
    xlac = _torch_xla()
    lib = load_library(library)
    for name in LEGACY_TARGETS:
        xlac._xla_register_custom_call_target(name, _capsule(getattr(lib, name)), "CUDA")
    _registered = True


def simple_add(a, b):
    """``a + b`` on XLA tensors through ``XlaGpuSimpleAddStatus`` (api_version 2)."""
    register()
    xlac = _torch_xla()
    opaque = _contract.simple_add_opaque(str(a.dtype).removeprefix("torch."), a.numel())
    return xlac._xla_custom_call([a, b], "XlaGpuSimpleAddStatus", [list(a.shape)], [a.dtype], False, opaque, 2, {})[0]


def paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *, sm_scale=1.0, sliding_window=None,
                    soft_cap=None, mask_value=None, k_scale=None, v_scale=None):
    """Ragged paged attention on XLA tensors through ``XlaGpuPagedAttention`` (api_version 2)."""
    register()
    xlac = _torch_xla()
    name = lambda t: str(t.dtype).removeprefix("torch.")  # noqa: E731
    _contract.check_paged_attention(
        tuple(q.shape), name(q), tuple(kv_pages.shape), name(kv_pages), tuple(kv_lens.shape), tuple(page_indices.shape),
        tuple(cu_q_lens.shape), tuple(num_seqs.shape),
        {"kv_lens": name(kv_lens), "page_indices": name(page_indices), "cu_q_lens": name(cu_q_lens),
         "num_seqs": name(num_seqs)},
        sliding_window=sliding_window, soft_cap=soft_cap, mask_value=mask_value,
    )
    opaque = _contract.paged_attention_opaque(
        q.shape, name(q), kv_pages.shape, name(kv_pages), kv_lens.shape[0], page_indices.shape[1], sm_scale=sm_scale,
        sliding_window=sliding_window, soft_cap=soft_cap, mask_value=mask_value, k_scale=k_scale, v_scale=v_scale,
    )
    return xlac._xla_custom_call([q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs], "XlaGpuPagedAttention",
                                 [list(q.shape)], [q.dtype], False, opaque, 2, {})[0]
