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


def _where(tensors):
    """(platform, stream, device index) of tensors that must share one device."""
    device = tensors[0].device
    for t in tensors:
        if t.device != device:
            raise ValueError(f"all tensors must be on one device, got {sorted({str(x.device) for x in tensors})}")
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        # The library launches in the context of the stream it is given, so no device guard is
        # needed: torch's current stream of the tensors' device names it.
        return _capi.PLATFORM_CUDA, _raw_stream(index), index
    if device.type == "cpu":
        return _capi.PLATFORM_CPU, 0, -1
    raise ValueError(f"no implementation for device {device}")


def _run_simple_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.contiguous(), b.contiguous()
    out = torch.empty_like(a)
    platform, stream, _ = _where((a, b, out))
    descs = _capi.descriptors(((_code(a), tuple(a.shape)), (_code(b), tuple(b.shape)), (_code(out), tuple(out.shape))))
    descs[0].data, descs[1].data, descs[2].data = a.data_ptr(), b.data_ptr(), out.data_ptr()
    err = _capi.error_buffer()
    _capi.check(_capi.library().xgk_simple_add(platform, stream, descs, err, _capi.ERR_LEN), err)
    return out


def _run_paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=1.0, sliding_window=None,
                         soft_cap=None, mask_value=None, k_scale=None, v_scale=None):
    inputs = [t.contiguous() for t in (q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs)]
    out = torch.empty_like(inputs[0])
    platform, stream, index = _where(inputs + [out])
    signature = tuple((_code(t), tuple(t.shape)) for t in inputs) + ((_code(out), tuple(out.shape)),)
    attrs = _capi.attrs(sm_scale, sliding_window, soft_cap, mask_value, k_scale, v_scale)
    descs = _capi.descriptors(signature)
    for i, t in enumerate(inputs):
        descs[i].data = t.data_ptr()
    descs[6].data = out.data_ptr()
    err = _capi.error_buffer()
    workspace, nbytes = None, 0
    if platform == _capi.PLATFORM_CUDA:
        # Temporary memory from torch's caching allocator (so under CUDA-graph capture, from the
        # graph's pool), never from the driver's: sized once per shape by the library.
        nbytes = _capi.paged_attention_workspace_bytes(index, signature, attrs)
        if nbytes:
            workspace = torch.empty(nbytes, dtype=torch.uint8, device=out.device)
    lib = _capi.library()
    code = lib.xgk_paged_attention(platform, stream, descs, attrs, workspace.data_ptr() if workspace is not None else None,
                                   nbytes, err, _capi.ERR_LEN)
    _capi.check(code, err)
    return out


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
