"""torch ops ``torch.ops.xla_gpu.simple_add`` and ``torch.ops.xla_gpu.paged_attention``.

Implementations (``torch.library``):
- CUDA: our kernels, launched on torch's current stream of the tensors' device;
- CPU: our Host (CPU) code;
- XLA: the legacy custom call through torch_xla (``xla_gpu_kernels.torch_xla``), where torch_xla
  still supports CUDA custom calls (<= 2.8); otherwise a clear error;
- fake: shapes only, so the ops trace under ``torch.compile``.

``paged_attention`` takes torch_xla's ``ragged_paged_attention`` argument names.
"""

from __future__ import annotations

import threading

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


def _same_device(tensors) -> int:
    """The tensors' device index (-1 on the CPU); a clear error when they are on several devices."""
    index = tensors[0].get_device()
    for t in tensors:
        if t.get_device() != index:
            raise ValueError(f"all tensors must be on one device, got {sorted({str(x.device) for x in tensors})}")
    return index


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


def _prepared(key, tensors, attrs_args, cuda_index):
    """This thread's (descriptors, attrs, workspace bytes) for a call signature: built once per
    (shapes, dtypes, attributes, device), so a call only writes its data pointers."""
    cache = _call_cache()
    entry = cache.get(key)
    if entry is None:
        signature = tuple((_code(t), tuple(t.shape)) for t in tensors)
        descs = _capi.descriptors(signature)
        attrs = _capi.attrs(*attrs_args) if attrs_args is not None else None
        nbytes = 0
        if attrs is not None and cuda_index >= 0:
            # Temporary memory from torch's caching allocator (under CUDA-graph capture, from the
            # graph's pool), never the driver's: sized by the library for these shapes.
            nbytes = _capi.paged_attention_workspace_bytes(cuda_index, signature, attrs)
        entry = cache[key] = (descs, attrs, nbytes)
    return entry


def _run_simple_add(a: torch.Tensor, b: torch.Tensor, platform: int) -> torch.Tensor:
    try:
        a, b = a.contiguous(), b.contiguous()
    except AttributeError:  # not a tensor (None): checked only then, off the per-call path
        _check_args("simple_add", _SIMPLE_ADD_ARGS, (a, b))
        raise
    out = torch.empty_like(a)
    index = _same_device((a, b))
    descs, _, _ = _prepared(("add", a.dtype, a.shape, b.dtype, b.shape), (a, b, out), None, index)
    descs[0].data, descs[1].data, descs[2].data = a.data_ptr(), b.data_ptr(), out.data_ptr()
    # The library launches in the context of the stream it is given: no device guard needed.
    stream = _raw_stream(index) if platform == _capi.PLATFORM_CUDA else 0
    err = _capi.error_buffer()
    _capi.check(_LIB().xgk_simple_add(platform, stream, descs, err, _capi.ERR_LEN), err)
    return out


def _run_paged_attention(platform, q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=1.0,
                         sliding_window=None, soft_cap=None, mask_value=None, k_scale=None, v_scale=None):
    try:
        inputs = (q.contiguous(), kv_pages.contiguous(), kv_lens.contiguous(), page_indices.contiguous(),
                  cu_q_lens.contiguous(), num_seqs.contiguous())
    except AttributeError:  # not a tensor (None): checked only then, off the per-call path
        _check_args("paged_attention", _PAGED_ATTENTION_ARGS, (q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs))
        raise
    index = _same_device(inputs)
    out = torch.empty_like(inputs[0])
    attrs_args = (sm_scale, sliding_window, soft_cap, mask_value, k_scale, v_scale)
    key = ("rpa", index, attrs_args, _capi.settings_generation()) + tuple((t.dtype, t.shape) for t in inputs)
    descs, attrs, nbytes = _prepared(key, inputs + (out,), attrs_args, index if platform == _capi.PLATFORM_CUDA else -1)
    for i in range(6):
        descs[i].data = inputs[i].data_ptr()
    descs[6].data = out.data_ptr()
    workspace = None
    if nbytes:
        workspace = torch.empty(nbytes, dtype=torch.uint8, device=out.device).data_ptr()
    stream = _raw_stream(index) if platform == _capi.PLATFORM_CUDA else 0
    err = _capi.error_buffer()
    _capi.check(_LIB().xgk_paged_attention(platform, stream, descs, attrs, workspace, nbytes, err, _capi.ERR_LEN), err)
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


torch.library.impl("xla_gpu::simple_add", "CPU")(_simple_add_cpu)
torch.library.impl("xla_gpu::simple_add", "CUDA")(_simple_add_cuda)
torch.library.impl("xla_gpu::paged_attention", "CPU")(_paged_attention_cpu)
torch.library.impl("xla_gpu::paged_attention", "CUDA")(_paged_attention_cuda)


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
