"""JAX front end: target registration and the two ops, for CUDA and CPU, under jit and vmap.

Registration pairs (see shared reference, "api_version means two things"):

| target | registered with | called with |
|---|---|---|
| ``xla_gpu_simple_add``, ``xla_gpu_paged_attention`` (typed FFI; CUDA and Host) | ``register_ffi_target(api_version=1)`` | ``ffi_call(custom_call_api_version=4)`` |
| ``XlaGpuSimpleAdd`` (legacy, CUDA) | ``register_ffi_target(api_version=0)`` | ``custom_call_api_version=1`` + opaque |
| ``XlaGpuSimpleAddStatus``, ``XlaGpuPagedAttention`` (legacy, CUDA) | ``api_version=0`` | ``custom_call_api_version=2`` + opaque |
"""

from __future__ import annotations

import functools
import threading

import jax
import jax.numpy as jnp
import numpy as np

from . import _capi, _contract, _heads
from ._library import load_library

SIMPLE_ADD = "xla_gpu_simple_add"
PAGED_ATTENTION = "xla_gpu_paged_attention"
LEGACY_SIMPLE_ADD = "XlaGpuSimpleAdd"
LEGACY_SIMPLE_ADD_STATUS = "XlaGpuSimpleAddStatus"
LEGACY_PAGED_ATTENTION = "XlaGpuPagedAttention"

_registered = False
_lock = threading.Lock()


def register(library: str | None = None) -> None:
    """Registers every target of the library with JAX (idempotent). Typed FFI handlers go to
    both "cpu" (Host) and "CUDA"; legacy targets to "CUDA" only. CUDA registrations are queued by
    JAX until its CUDA plugin initializes, so this is safe on CPU-only machines."""
    global _registered
    with _lock:
        if _registered:
            return
        lib = load_library(library)
        for name in (SIMPLE_ADD, PAGED_ATTENTION):
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, f"{name}_host")), platform="cpu", api_version=1)
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, f"{name}_cuda")), platform="CUDA", api_version=1)
        for name in (LEGACY_SIMPLE_ADD, LEGACY_SIMPLE_ADD_STATUS, LEGACY_PAGED_ATTENTION):
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, name)), platform="CUDA", api_version=0)
        _registered = True


def simple_add(a: jax.Array, b: jax.Array, *, custom_call_api_version: int = 4) -> jax.Array:
    """``a + b`` through our kernel (f32, f16, bf16; any shape).

    ``custom_call_api_version`` 4 uses the typed FFI target (CUDA and CPU); 1 and 2 the legacy
    GPU symbols ``XlaGpuSimpleAdd`` / ``XlaGpuSimpleAddStatus`` (CUDA only).
    """
    register()
    a, b = jnp.asarray(a), jnp.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"simple_add: shape mismatch: {a.shape} vs {b.shape}")
    if a.dtype != b.dtype:
        raise ValueError(f"simple_add: dtype mismatch: {a.dtype} vs {b.dtype}")
    out = jax.ShapeDtypeStruct(a.shape, a.dtype)
    if custom_call_api_version == 4:
        return jax.ffi.ffi_call(SIMPLE_ADD, out, vmap_method="broadcast_all")(a, b)
    if custom_call_api_version in (1, 2):
        target = LEGACY_SIMPLE_ADD if custom_call_api_version == 1 else LEGACY_SIMPLE_ADD_STATUS
        opaque = _contract.simple_add_opaque(a.dtype, a.size)
        return jax.ffi.ffi_call(
            target, out, vmap_method="sequential", custom_call_api_version=custom_call_api_version,
            legacy_backend_config=opaque,
        )(a, b)
    raise ValueError(f"custom_call_api_version must be 1, 2 or 4, got {custom_call_api_version}")


def ragged_paged_attention(
    q: jax.Array,
    kv_pages: jax.Array,
    kv_lens: jax.Array,
    page_indices: jax.Array,
    cu_q_lens: jax.Array,
    num_seqs: jax.Array,
    *,
    sm_scale: float = 1.0,
    sliding_window: int | None = None,
    soft_cap: float | None = None,
    mask_value: float | None = None,
    k_scale: float | None = None,
    v_scale: float | None = None,
    num_kv_pages_per_block: int | None = None,
    num_queries_per_block: int | None = None,
    vmem_limit_bytes: int | None = None,
    custom_call_api_version: int = 4,
) -> jax.Array:
    """Ragged paged attention with the signature and output of JAX's TPU
    ``ragged_paged_attention``: returns ``q.shape`` in q's dtype, rows past
    ``cu_q_lens[num_seqs]`` are zeros. The TPU block-size arguments are accepted and ignored.

    ``custom_call_api_version=2`` calls the legacy ``XlaGpuPagedAttention`` symbol (CUDA only).
    Under ``vmap`` (a leading batch axis on every operand) the calls run one after another.

    Several devices (tensor parallel): the op partitions itself under ``jax.jit``
    (``jax.experimental.custom_partitioning``, a Shardy rule and GSPMD callbacks). With q sharded
    on its head axis (axis 1) and kv_pages on its combined K/V head axis (axis 2) over the same
    mesh axis, e.g. ``P(None, 'tp', None)`` and ``P(None, None, 'tp', None)``, each device calls
    the kernel on its own heads (whole KV heads and their GQA groups), with no all-gather of q or
    the pool, and the output is sharded like q. Sharded tokens, pages, head_dim or metadata are
    gathered by XLA (replicated). Inside ``jax.shard_map`` the operands are the local blocks and
    this is the plain call. A head split that does not give every device whole KV heads (a
    device count that does not divide ``num_kv_heads``, or q and kv_pages split over different
    mesh axes) is a ``ValueError``: before tracing where the shardings are known (concrete
    arrays, Explicit mesh axes), else when XLA partitions the call (``.compile()`` or the first
    call of the jitted function).
    """
    del num_kv_pages_per_block, num_queries_per_block, vmem_limit_bytes  # TPU tuning knobs
    register()
    q, kv_pages = jnp.asarray(q), jnp.asarray(kv_pages)
    kv_lens, page_indices = jnp.asarray(kv_lens), jnp.asarray(page_indices)
    cu_q_lens, num_seqs = jnp.asarray(cu_q_lens), jnp.asarray(num_seqs)
    _check_paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=sm_scale,
                           sliding_window=sliding_window, soft_cap=soft_cap, mask_value=mask_value, k_scale=k_scale,
                           v_scale=v_scale)
    if custom_call_api_version not in (2, 4):
        raise ValueError(f"custom_call_api_version must be 2 or 4, got {custom_call_api_version}")
    attrs = _static_attrs(sm_scale=sm_scale, sliding_window=sliding_window, soft_cap=soft_cap, mask_value=mask_value,
                          k_scale=k_scale, v_scale=v_scale, custom_call_api_version=custom_call_api_version)
    operands = (q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs)
    _heads.check_known_split(q, kv_pages)
    if _heads.inside_manual_mesh():
        # Inside jax.shard_map the operands are the local blocks: the plain call. (A shard_map
        # manual over only some axes cannot host custom partitioning: XLA fails or aborts.)
        return _local_op(*operands, attrs)
    return _entry(*operands, attrs)


def _check_paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **attrs):
    _contract.check_paged_attention(
        q.shape, q.dtype, kv_pages.shape, kv_pages.dtype, kv_lens.shape, page_indices.shape, cu_q_lens.shape,
        num_seqs.shape,
        {"kv_lens": kv_lens.dtype, "page_indices": page_indices.dtype, "cu_q_lens": cu_q_lens.dtype,
         "num_seqs": num_seqs.dtype},
        sliding_window=attrs.get("sliding_window"), soft_cap=attrs.get("soft_cap"),
        sm_scale=attrs.get("sm_scale", 1.0), mask_value=attrs.get("mask_value"), k_scale=attrs.get("k_scale"),
        v_scale=attrs.get("v_scale"),
    )


def _static_attrs(**attrs) -> tuple:
    """The attributes as a hashable, sorted tuple of Python numbers (a jit static argument)."""
    out = []
    for name, value in sorted(attrs.items()):
        if value is not None:
            value = int(value) if name in ("sliding_window", "custom_call_api_version") else float(value)
        out.append((name, value))
    return tuple(out)


def _local_op(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, attrs):
    """The custom call on the shapes it is given (one device, or one device's blocks)."""
    attrs = dict(attrs)
    sm_scale, sliding_window, soft_cap = attrs.get("sm_scale", 1.0), attrs.get("sliding_window"), attrs.get("soft_cap")
    mask_value, k_scale, v_scale = attrs.get("mask_value"), attrs.get("k_scale"), attrs.get("v_scale")
    out = jax.ShapeDtypeStruct(q.shape, q.dtype)
    operands = (q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs)
    if attrs.get("custom_call_api_version", 4) == 2:
        opaque = _contract.paged_attention_opaque(
            q.shape, q.dtype, kv_pages.shape, kv_pages.dtype, kv_lens.shape[0], page_indices.shape[1],
            sm_scale=sm_scale, sliding_window=sliding_window, soft_cap=soft_cap, mask_value=mask_value,
            k_scale=k_scale, v_scale=v_scale,
        )
        return jax.ffi.ffi_call(
            LEGACY_PAGED_ATTENTION, out, vmap_method="sequential", custom_call_api_version=2,
            legacy_backend_config=opaque,
        )(*operands)
    ffi_attrs = {"sm_scale": np.float32(sm_scale)}
    if sliding_window is not None:
        ffi_attrs["sliding_window"] = np.int64(sliding_window)
    for name, value in (("soft_cap", soft_cap), ("mask_value", mask_value), ("k_scale", k_scale), ("v_scale", v_scale)):
        if value is not None:
            ffi_attrs[name] = np.float32(value)
    signature = _capi.paged_attention_signature(q.shape, q.dtype, kv_pages.shape, kv_pages.dtype, kv_lens.shape[0],
                                                page_indices.shape[1])
    c_attrs = _capi.attrs(sm_scale, sliding_window, soft_cap, mask_value, k_scale, v_scale)
    # The workspace is per call: under partitioning, sized for this device's blocks.
    workspace = jax.ShapeDtypeStruct((workspace_bytes(signature, c_attrs),), jnp.uint8)
    result, _ = jax.ffi.ffi_call(PAGED_ATTENTION, (out, workspace), vmap_method="sequential")(*operands, **ffi_attrs)
    return result


# Partitions over heads under jit (custom_partitioning has no batching rule: custom_vmap sends
# vmap to the plain call, which runs the batch entries one after another).
_partitioned = _heads.make_partitioned(_local_op)


@functools.partial(jax.jit, static_argnums=(6,))
def _entry(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, attrs):
    @jax.custom_batching.custom_vmap
    def op(*operands):
        return _partitioned(*operands, attrs)

    @op.def_vmap
    def _batched(axis_size, in_batched, *operands):
        del axis_size
        in_axes = tuple(0 if b else None for b in in_batched)
        return jax.vmap(lambda *a: _local_op(*a, attrs), in_axes=in_axes)(*operands), True

    return op(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs)


def _gpu_ordinals() -> tuple[int, ...]:
    """CUDA ordinals of this process's GPUs as JAX sees them (none without a CUDA backend)."""
    try:
        devices = jax.local_devices(backend="gpu")
    except RuntimeError:
        return ()
    return tuple(sorted({d.local_hardware_id for d in devices if getattr(d, "platform", "") == "gpu"}))


def workspace_bytes(signature, c_attrs) -> int:
    """Size of the typed call's second result, the workspace XLA allocates for it (split-KV
    partials, the tiled kernel's plan): the library's need for these static shapes on the largest
    of this process's GPUs (0 with no GPU; the Host handler needs none). Taking the memory from
    XLA keeps the call free of allocations, so XLA can record it into command buffers."""
    return max((_capi.paged_attention_workspace_bytes(o, signature, c_attrs) for o in _gpu_ordinals()), default=0)
