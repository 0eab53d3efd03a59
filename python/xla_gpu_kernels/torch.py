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

import ctypes

import torch

from ._library import load_library

_TORCH_TO_XLA = {
    torch.float32: 11, torch.float16: 10, torch.bfloat16: 16, torch.float8_e4m3fn: 20, torch.float8_e5m2: 19,
    torch.int32: 4, torch.int64: 5, torch.int8: 2, torch.uint8: 6, torch.float64: 12, torch.bool: 1,
}
_CPU, _CUDA = 0, 1


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("rank", ctypes.c_int64),
                ("dims", ctypes.POINTER(ctypes.c_int64))]


class _Attrs(ctypes.Structure):
    _fields_ = [("sm_scale", ctypes.c_float), ("has_sliding_window", ctypes.c_int32), ("sliding_window", ctypes.c_int64),
                ("has_soft_cap", ctypes.c_int32), ("soft_cap", ctypes.c_float), ("has_mask_value", ctypes.c_int32),
                ("mask_value", ctypes.c_float), ("has_k_scale", ctypes.c_int32), ("k_scale", ctypes.c_float),
                ("has_v_scale", ctypes.c_int32), ("v_scale", ctypes.c_float)]


def _describe(tensors):
    descs = (_Tensor * len(tensors))()
    keep = []
    for i, t in enumerate(tensors):
        if t.dtype not in _TORCH_TO_XLA:
            raise ValueError(f"unsupported dtype {t.dtype}")
        dims = (ctypes.c_int64 * t.dim())(*t.shape)
        keep.append(dims)
        descs[i] = _Tensor(t.data_ptr(), _TORCH_TO_XLA[t.dtype], t.dim(), dims)
    return descs, keep


def _platform(tensors):
    devices = {t.device for t in tensors}
    if len(devices) != 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")
    device = devices.pop()
    if device.type == "cuda":
        return _CUDA, torch.cuda.current_stream(device).cuda_stream, device
    if device.type == "cpu":
        return _CPU, 0, device
    raise ValueError(f"no implementation for device {device}")


def _check(code: int, err) -> None:
    if code == 1:
        raise ValueError(err.value.decode())
    if code != 0:
        raise RuntimeError(err.value.decode())


def _run_simple_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.contiguous(), b.contiguous()
    out = torch.empty_like(a)
    platform, stream, device = _platform([a, b, out])
    descs, _keep = _describe([a, b, out])
    err = ctypes.create_string_buffer(1024)
    lib = load_library()
    with torch.cuda.device(device) if platform == _CUDA else _nullcontext():
        _check(lib.xgk_simple_add(platform, ctypes.c_void_p(stream), descs, err, len(err)), err)
    return out


def _run_paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=1.0, sliding_window=None,
                         soft_cap=None, mask_value=None, k_scale=None, v_scale=None):
    inputs = [t.contiguous() for t in (q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs)]
    out = torch.empty_like(inputs[0])
    platform, stream, device = _platform(inputs + [out])
    descs, _keep = _describe(inputs + [out])
    attrs = _Attrs(sm_scale=sm_scale)
    if sliding_window is not None:
        attrs.has_sliding_window, attrs.sliding_window = 1, sliding_window
    for name, value in (("soft_cap", soft_cap), ("mask_value", mask_value), ("k_scale", k_scale), ("v_scale", v_scale)):
        if value is not None:
            setattr(attrs, "has_" + name, 1)
            setattr(attrs, name, value)
    err = ctypes.create_string_buffer(1024)
    lib = load_library()
    with torch.cuda.device(device) if platform == _CUDA else _nullcontext():
        _check(lib.xgk_paged_attention(platform, ctypes.c_void_p(stream), descs, ctypes.byref(attrs), err, len(err)), err)
    return out


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


torch.library.define("xla_gpu::simple_add", "(Tensor a, Tensor b) -> Tensor")
torch.library.define(
    "xla_gpu::paged_attention",
    "(Tensor q, Tensor kv_pages, Tensor kv_lens, Tensor page_indices, Tensor cu_q_lens, Tensor num_seqs, "
    "float sm_scale=1.0, int? sliding_window=None, float? soft_cap=None, float? mask_value=None, "
    "float? k_scale=None, float? v_scale=None) -> Tensor",
)

for _key in ("CPU", "CUDA"):
    torch.library.impl("xla_gpu::simple_add", _key)(_run_simple_add)
    torch.library.impl("xla_gpu::paged_attention", _key)(_run_paged_attention)


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
    torch._check(a.shape == b.shape, lambda: f"simple_add: shape mismatch: {a.shape} vs {b.shape}")
    torch._check(a.dtype == b.dtype, lambda: f"simple_add: dtype mismatch: {a.dtype} vs {b.dtype}")
    return torch.empty_like(a)


@torch.library.register_fake("xla_gpu::paged_attention")
def _paged_attention_fake(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=1.0, sliding_window=None,
                          soft_cap=None, mask_value=None, k_scale=None, v_scale=None):
    return torch.empty_like(q)


def simple_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.ops.xla_gpu.simple_add``."""
    return torch.ops.xla_gpu.simple_add(a, b)


def paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=1.0, sliding_window=None,
                    soft_cap=None, mask_value=None, k_scale=None, v_scale=None):
    """``torch.ops.xla_gpu.paged_attention`` (torch_xla ``ragged_paged_attention`` arguments)."""
    return torch.ops.xla_gpu.paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale,
                                             sliding_window, soft_cap, mask_value, k_scale, v_scale)
