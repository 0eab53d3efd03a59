"""torch ops ``torch.ops.xla_gpu.simple_add`` and ``torch.ops.xla_gpu.paged_attention``.

Implementations (``torch.library``):
- CUDA: our kernels, launched on torch's current stream of the tensors' device;
- CPU: our Host (CPU) code;
  both registered by the library itself through libtorch's stable C ABI (``KERNELS`` says
  "native"), so a call runs no Python past torch's dispatcher; with ``XGK_TORCH_KERNELS=python``,
  or a torch without that ABI, Python kernels calling the library's C API through ctypes;
- XLA: the legacy custom call through torch_xla (``xla_gpu_kernels.torch_xla``), where torch_xla
  still supports CUDA custom calls (<= 2.8); otherwise a clear error;
- fake: shapes only, so the ops trace under ``torch.compile``.

``paged_attention`` takes torch_xla's ``ragged_paged_attention`` argument names.
"""

from __future__ import annotations

import os
import threading
import warnings

import torch

from . import _capi

_TORCH_TO_XLA = {dtype: _capi.XLA_DTYPE[str(dtype).removeprefix("torch.")] for dtype in (
    torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2, torch.int32, torch.int64,
    torch.int8, torch.uint8, torch.float64, torch.bool)}
_CPU_DEVICE = torch.device("cpu")

try:  # torch's current CUDA stream of a device as an int, without building a Stream object
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - older torch
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


def _code(t: torch.Tensor) -> int:
    code = _TORCH_TO_XLA.get(t.dtype)
    if code is None:
        raise ValueError(f"unsupported dtype {t.dtype}")
    return code


def _check_args(op: str, names, tensors) -> None:
    """TypeError for an argument that is not a tensor (None reaches the implementations), ValueError
    for tensors on different devices. `get_device()` cannot tell CPU from "meta" (-1 for both), and
    torch dispatches a CPU + meta mix to the fake implementation, so it compares `.device`."""
    for name, t in zip(names, tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if len({t.device for t in tensors}) > 1:
        where = ", ".join(f"{name} on {t.device}" for name, t in zip(names, tensors))
        raise ValueError(f"{op}: all tensors must be on one device, got {where}")


_SIMPLE_ADD_ARGS = ("a", "b")
_PAGED_ATTENTION_ARGS = ("q", "kv_pages", "kv_lens", "page_indices", "cu_q_lens", "num_seqs")

_local = threading.local()


def _call_cache() -> dict:
    cache = getattr(_local, "calls", None)
    if cache is None:
        cache = _local.calls = {}
    return cache


class _Prepared:
    """What a call signature needs, built once per thread: the descriptor array and a view of each
    descriptor (a call writes only the data pointers), the attributes, the workspace size, and the
    tensors' device index (-1 on the CPU)."""

    __slots__ = ("descs", "views", "attrs", "nbytes", "index")

    def __init__(self, op, names, tensors, attrs_args, platform):
        _check_args(op, names, tensors)
        self.index = tensors[0].get_device()
        signature = tuple((_code(t), tuple(t.shape)) for t in tensors)
        self.descs = _capi.descriptors(signature)
        self.views = [self.descs[i] for i in range(len(signature))]
        self.attrs = _capi.attrs(*attrs_args) if attrs_args is not None else None
        self.nbytes = 0
        if self.attrs is not None and platform == _capi.PLATFORM_CUDA:
            # Temporary memory from torch's caching allocator (under CUDA-graph capture, from the
            # graph's pool), never the driver's: sized by the library for these shapes.
            self.nbytes = _capi.paged_attention_workspace_bytes(self.index, signature, self.attrs)


def _prepared(key, op, names, tensors, attrs_args, platform) -> _Prepared:
    """This thread's `_Prepared` for `key` (shapes, dtypes and devices of every tensor, the
    attributes, the settings generation)."""
    cache = _call_cache()
    entry = cache.get(key)
    if entry is None:
        if len(cache) >= _CALL_CACHE_ENTRIES:  # bounded: a NaN attribute never compares equal
            cache.clear()
        entry = cache[key] = _Prepared(op, names, tensors, attrs_args, platform)
    return entry


_CALL_CACHE_ENTRIES = 1024


def _run_simple_add(a: torch.Tensor, b: torch.Tensor, platform: int) -> torch.Tensor:
    try:
        a, b = a.contiguous(), b.contiguous()
    except AttributeError:  # not a tensor (None): checked only then, off the per-call path
        _check_args("simple_add", _SIMPLE_ADD_ARGS, (a, b))
        raise
    out = torch.empty_like(a)
    p = _prepared((a.dtype, a.shape, a.device, b.dtype, b.shape, b.device), "simple_add", _SIMPLE_ADD_ARGS + ("out",),
                  (a, b, out), None, platform)
    v = p.views
    v[0].data, v[1].data, v[2].data = a.data_ptr(), b.data_ptr(), out.data_ptr()
    # The library launches in the context of the stream it is given (torch's default stream, NULL,
    # in the context of the device holding the output): no device guard needed.
    stream = _raw_stream(p.index) if platform == _capi.PLATFORM_CUDA else 0
    err = _capi.error_buffer()
    code = _LIB().xgk_simple_add(platform, stream, p.descs, err, _capi.ERR_LEN)
    if code:
        _capi.check(code, err)
    return out


def _run_paged_attention(platform, q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=1.0,
                         sliding_window=None, soft_cap=None, mask_value=None, k_scale=None, v_scale=None):
    try:
        q, kv_pages, kv_lens = q.contiguous(), kv_pages.contiguous(), kv_lens.contiguous()
        page_indices, cu_q_lens, num_seqs = page_indices.contiguous(), cu_q_lens.contiguous(), num_seqs.contiguous()
    except AttributeError:  # not a tensor (None): checked only then, off the per-call path
        _check_args("paged_attention", _PAGED_ATTENTION_ARGS, (q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs))
        raise
    out = torch.empty_like(q)
    attrs_args = (sm_scale, sliding_window, soft_cap, mask_value, k_scale, v_scale)
    key = (q.dtype, q.shape, q.device, kv_pages.dtype, kv_pages.shape, kv_pages.device, kv_lens.dtype, kv_lens.shape,
           kv_lens.device, page_indices.dtype, page_indices.shape, page_indices.device, cu_q_lens.dtype,
           cu_q_lens.shape, cu_q_lens.device, num_seqs.dtype, num_seqs.shape, num_seqs.device, attrs_args,
           _capi._generation[0])
    p = _prepared(key, "paged_attention", _PAGED_ATTENTION_ARGS + ("out",),
                  (q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, out), attrs_args, platform)
    v = p.views
    v[0].data, v[1].data, v[2].data = q.data_ptr(), kv_pages.data_ptr(), kv_lens.data_ptr()
    v[3].data, v[4].data, v[5].data = page_indices.data_ptr(), cu_q_lens.data_ptr(), num_seqs.data_ptr()
    v[6].data = out.data_ptr()
    nbytes, workspace = p.nbytes, None
    if nbytes:
        workspace = torch.empty(nbytes, dtype=torch.uint8, device=out.device).data_ptr()
    stream = _raw_stream(p.index) if platform == _capi.PLATFORM_CUDA else 0
    err = _capi.error_buffer()
    code = _LIB().xgk_paged_attention(platform, stream, p.descs, p.attrs, workspace, nbytes, err, _capi.ERR_LEN)
    if code:
        _capi.check(code, err)
    return out


def _LIB():
    """The library with its C signatures (looked up once)."""
    global _lib
    if _lib is None:
        _lib = _capi.library()
    return _lib


_lib = None


torch.library.define("xla_gpu::simple_add", "(Tensor a, Tensor b) -> Tensor")
torch.library.define(
    "xla_gpu::paged_attention",
    "(Tensor q, Tensor kv_pages, Tensor kv_lens, Tensor page_indices, Tensor cu_q_lens, Tensor num_seqs, "
    "float sm_scale=1.0, int? sliding_window=None, float? soft_cap=None, float? mask_value=None, "
    "float? k_scale=None, float? v_scale=None) -> Tensor",
)



def _simple_add_cpu(a, b):
    return _run_simple_add(a, b, _capi.PLATFORM_CPU)


def _simple_add_cuda(a, b):
    return _run_simple_add(a, b, _capi.PLATFORM_CUDA)


def _paged_attention_cpu(*args, **kwargs):
    return _run_paged_attention(_capi.PLATFORM_CPU, *args, **kwargs)


def _paged_attention_cuda(*args, **kwargs):
    return _run_paged_attention(_capi.PLATFORM_CUDA, *args, **kwargs)


_PYTHON_KERNELS = {
    "CPU": {"simple_add": _simple_add_cpu, "paged_attention": _paged_attention_cpu},
    "CUDA": {"simple_add": _simple_add_cuda, "paged_attention": _paged_attention_cuda},
}


def _register_kernels() -> dict:
    """Registers the CPU and CUDA kernels; returns {dispatch key: "native" | "python"}.

    Native kernels (the library's, registered through libtorch's stable C ABI) run with no Python
    per call. ``XGK_TORCH_KERNELS=python`` selects the Python kernels (ctypes into the library's C
    API) instead; they also serve where the native registration is unavailable (a torch without
    the stable ABI: a warning says why) or the library is not found at import (its calls then
    raise the library's FileNotFoundError).
    """
    native: set = set()
    if os.environ.get("XGK_TORCH_KERNELS", "native") != "python":
        try:
            native = _capi.register_torch_kernels(os.path.join(os.path.dirname(torch.__file__), "lib"))
        except FileNotFoundError:
            pass
        except RuntimeError as e:
            warnings.warn(f"xla_gpu_kernels: native torch kernels unavailable, using the Python ones: {e}")
    kinds = {}
    for key, kernels in _PYTHON_KERNELS.items():
        if key in native:
            kinds[key] = "native"
            continue
        for name, fn in kernels.items():
            torch.library.impl(f"xla_gpu::{name}", key)(fn)
        kinds[key] = "python"
    return kinds


KERNELS = _register_kernels()
"""How each dispatch key's kernels are implemented: ``{"CPU": "native", "CUDA": "native"}``."""


@torch.library.impl("xla_gpu::simple_add", "XLA")
def _simple_add_xla(a, b):
    from . import torch_xla as txla
    return txla.simple_add(a, b)


@torch.library.impl("xla_gpu::paged_attention", "XLA")
def _paged_attention_xla(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=1.0, sliding_window=None,
                         soft_cap=None, mask_value=None, k_scale=None, v_scale=None):
    from . import torch_xla as txla
    return txla.paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=sm_scale,
                                sliding_window=sliding_window, soft_cap=soft_cap, mask_value=mask_value,
                                k_scale=k_scale, v_scale=v_scale)


@torch.library.register_fake("xla_gpu::simple_add")
def _simple_add_fake(a, b):
    _check_args("simple_add", _SIMPLE_ADD_ARGS, (a, b))
    torch._check(a.shape == b.shape, lambda: f"simple_add: shape mismatch: {a.shape} vs {b.shape}")
    torch._check(a.dtype == b.dtype, lambda: f"simple_add: dtype mismatch: {a.dtype} vs {b.dtype}")
    return torch.empty_like(a)


@torch.library.register_fake("xla_gpu::paged_attention")
def _paged_attention_fake(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=1.0, sliding_window=None,
                          soft_cap=None, mask_value=None, k_scale=None, v_scale=None):
    _check_args("paged_attention", _PAGED_ATTENTION_ARGS, (q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs))
    return torch.empty_like(q)


def simple_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.ops.xla_gpu.simple_add``."""
    return torch.ops.xla_gpu.simple_add(a, b)


def paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=1.0, sliding_window=None,
                    soft_cap=None, mask_value=None, k_scale=None, v_scale=None):
    """``torch.ops.xla_gpu.paged_attention`` (torch_xla ``ragged_paged_attention`` arguments)."""
    return torch.ops.xla_gpu.paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale,
                                             sliding_window, soft_cap, mask_value, k_scale, v_scale)
