"""Static checks of the ragged paged attention contract, shared by the JAX and torch front ends
(the library checks again; these raise Python errors before anything is traced)."""

from __future__ import annotations

import math
import numbers

SUPPORTED_HEAD_DIMS = (64, 80, 96, 112, 128, 192, 256)
Q_DTYPES = ("float32", "float16", "bfloat16")
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")

# Names the library's opaque/legacy format uses for numpy dtype names.
OPAQUE_DTYPE = {
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "float8_e4m3fn": "f8e4m3fn",
    "float8_e5m2": "f8e5m2",
}


def _check_attributes(sm_scale, sliding_window, soft_cap, mask_value, k_scale, v_scale):
    """TypeError unless each attribute is a static number (a Python or numpy scalar; an integer for
    sliding_window), ValueError for values the library rejects."""
    for name, value in (("sm_scale", sm_scale), ("soft_cap", soft_cap), ("mask_value", mask_value),
                        ("k_scale", k_scale), ("v_scale", v_scale)):
        if value is not None and not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a number (a Python or numpy scalar), got {type(value).__name__} {value!r}")
    if sliding_window is not None:
        if not isinstance(sliding_window, numbers.Integral):
            raise TypeError(f"sliding_window must be an integer, got {type(sliding_window).__name__} {sliding_window!r}")
        if sliding_window <= 0:
            raise ValueError(f"sliding_window must be > 0, got {sliding_window}")
        if sliding_window >= 2**32:
            raise ValueError(f"sliding_window {sliding_window} is too large (must be < 2^32)")
    for name, value in (("sm_scale", sm_scale), ("k_scale", k_scale), ("v_scale", v_scale)):
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value}")
    if soft_cap is not None and (soft_cap == 0 or not math.isfinite(soft_cap)):
        raise ValueError("soft_cap must not be 0" if soft_cap == 0 else f"soft_cap must be finite, got {soft_cap}")
    if mask_value is not None and mask_value != mask_value:
        raise ValueError("mask_value must not be NaN")


def check_paged_attention(q_shape, q_dtype, kv_shape, kv_dtype, kv_lens_shape, page_indices_shape,
                          cu_q_lens_shape, num_seqs_shape, meta_dtypes, *, sliding_window, soft_cap,
                          sm_scale=1.0, mask_value=None, k_scale=None, v_scale=None):
    """Raises ValueError with a readable message when the inputs break the contract (TypeError
    when an attribute is not a static number)."""
    _check_attributes(sm_scale, sliding_window, soft_cap, mask_value, k_scale, v_scale)
    q_dtype, kv_dtype = str(q_dtype), str(kv_dtype)
    if len(q_shape) != 3:
        raise ValueError(f"q must be [max_num_batched_tokens, num_q_heads, head_dim], got shape {tuple(q_shape)}")
    if len(kv_shape) != 4:
        raise ValueError(f"kv_pages must be [total_num_pages, page_size, 2 * num_kv_heads, head_dim], got shape {tuple(kv_shape)}")
    if q_dtype not in Q_DTYPES:
        raise ValueError(f"q dtype must be one of {Q_DTYPES}, got {q_dtype}")
    if kv_dtype != q_dtype and kv_dtype not in FP8_DTYPES:
        raise ValueError(f"kv_pages dtype must be q's dtype ({q_dtype}) or fp8 {FP8_DTYPES}, got {kv_dtype}")
    if q_shape[2] != kv_shape[3]:
        raise ValueError(f"head_dim of q ({q_shape[2]}) and kv_pages ({kv_shape[3]}) differ")
    if q_shape[2] not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim {q_shape[2]} is not supported; supported: {SUPPORTED_HEAD_DIMS}")
    if kv_shape[2] % 2 or kv_shape[2] == 0:
        raise ValueError(f"kv_pages axis 2 ({kv_shape[2]}) must be even: K and V heads are interleaved")
    num_kv_heads = kv_shape[2] // 2
    if q_shape[1] % num_kv_heads:
        raise ValueError(f"num_q_heads ({q_shape[1]}) must be a multiple of num_kv_heads ({num_kv_heads})")
    for name, dt in meta_dtypes.items():
        if str(dt) != "int32":
            raise ValueError(f"{name} must be int32, got {dt}")
    if len(kv_lens_shape) != 1:
        raise ValueError(f"kv_lens must be [max_num_seqs], got shape {tuple(kv_lens_shape)}")
    max_num_seqs = kv_lens_shape[0]
    if len(page_indices_shape) != 2 or page_indices_shape[0] != max_num_seqs:
        raise ValueError(f"page_indices must be [max_num_seqs={max_num_seqs}, pages_per_seq], got shape {tuple(page_indices_shape)}")
    if tuple(cu_q_lens_shape) != (max_num_seqs + 1,):
        raise ValueError(f"cu_q_lens must be [max_num_seqs + 1 = {max_num_seqs + 1}], got shape {tuple(cu_q_lens_shape)}")
    if tuple(num_seqs_shape) != (1,):
        raise ValueError(f"num_seqs must have shape (1,), got {tuple(num_seqs_shape)}")


def paged_attention_opaque(q_shape, q_dtype, kv_shape, kv_dtype, max_num_seqs, pages_per_seq, *, sm_scale,
                           sliding_window, soft_cap, mask_value, k_scale, v_scale) -> str:
    """The legacy opaque string of ``XlaGpuPagedAttention`` (format in host/src/xla/legacy.rs)."""
    def shape(dtype, dims):
        return f"{OPAQUE_DTYPE[str(dtype)]}[{','.join(str(int(d)) for d in dims)}]"

    fields = [
        "xgk1", "op=paged_attention", f"q={shape(q_dtype, q_shape)}", f"kv={shape(kv_dtype, kv_shape)}",
        f"max_num_seqs={int(max_num_seqs)}", f"pages_per_seq={int(pages_per_seq)}", f"sm_scale={float(sm_scale)!r}",
    ]
    for name, value in (("soft_cap", soft_cap), ("mask_value", mask_value), ("k_scale", k_scale), ("v_scale", v_scale)):
        if value is not None:
            fields.append(f"{name}={float(value)!r}")
    if sliding_window is not None:
        fields.append(f"sliding_window={int(sliding_window)}")
    return ";".join(fields)


def simple_add_opaque(dtype, n: int) -> str:
    """The legacy opaque string of ``XlaGpuSimpleAdd`` / ``XlaGpuSimpleAddStatus``."""
    return f"xgk1;op=simple_add;dtype={OPAQUE_DTYPE[str(dtype)]};n={int(n)}"
