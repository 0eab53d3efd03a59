"""Ragged paged attention on several devices: tensor parallel over heads, data parallel over pools.

Tensor parallelism splits the query heads and the KV heads in contiguous blocks, one block per
device: device ``i`` of ``n`` holds query heads ``[i*Hq/n, (i+1)*Hq/n)`` and KV heads
``[i*Hkv/n, (i+1)*Hkv/n)``, that is kv_pages axis-2 entries ``[2*i*Hkv/n, 2*(i+1)*Hkv/n)`` (each
head's K and V pair stays together). Those are exactly the GQA groups (query head ``h`` uses KV
head ``h // (Hq/Hkv)``), so every device attends over its own heads with no communication and the
result is the one-device result. The split needs ``n`` to divide ``num_kv_heads``; otherwise
``ValueError``.

Three entry points:

- :func:`ragged_paged_attention`: ``xla_gpu_kernels.jax.ragged_paged_attention`` itself, which
  partitions itself (``jax.experimental.custom_partitioning``, in ``_heads.py``). Under ``jax.jit``
  with inputs sharded over heads (``q`` on axis 1, ``kv_pages`` on axis 2, metadata replicated:
  :func:`head_shardings` builds them) XLA runs one custom call per device on its local heads, with
  no all-gather of q or of the KV pool (Shardy and GSPMD). Unsharded, or inside
  ``jax.shard_map``, it is the plain call.
- :func:`ragged_paged_attention_sharded`: the same through ``jax.shard_map`` over a mesh you name
  (``head_axis`` for tensor parallel, ``data_axis`` for data parallel, or both); checks the head
  split before anything is traced.
- Inside your own ``jax.shard_map``, call ``xla_gpu_kernels.jax.ragged_paged_attention`` (or this
  module's) on the local blocks.

Data parallel: every operand gets a leading axis, one entry per KV pool (each with its own
metadata: its sequences, its pages), sharded over ``data_axis``; each device runs its pools.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from . import _heads
from . import jax as _xk

__all__ = [
    "ragged_paged_attention",
    "ragged_paged_attention_sharded",
    "head_shardings",
    "check_head_split",
]

_ATTR_NAMES = ("sm_scale", "sliding_window", "soft_cap", "mask_value", "k_scale", "v_scale",
               "num_kv_pages_per_block", "num_queries_per_block", "vmem_limit_bytes", "custom_call_api_version")


_axis_names, _axes_size = _heads.axis_names, _heads.axes_size
check_head_split = _heads.check_head_split
head_shardings = _heads.head_shardings


def _static_attrs(kwargs: dict) -> tuple:
    unknown = set(kwargs) - set(_ATTR_NAMES)
    if unknown:
        raise TypeError(f"ragged_paged_attention: unexpected keyword arguments {sorted(unknown)}")
    return tuple(sorted(kwargs.items()))


def ragged_paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **kwargs):
    """``xla_gpu_kernels.jax.ragged_paged_attention``, which partitions itself over heads under
    ``jax.jit`` (this name is kept for code written before it did): with q sharded on axis 1 and
    kv_pages on axis 2 over the same mesh axes (:func:`head_shardings`), each device calls the
    kernel on its own heads and the output is sharded like q. See that function for the rest."""
    _static_attrs(kwargs)
    return _xk.ragged_paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **kwargs)


def _check_contract(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, attrs):
    _xk._check_paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **attrs)


# --- explicit entry point (shard_map over a named mesh) ----------------------------------------------


def ragged_paged_attention_sharded(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *, mesh: Mesh,
                                   head_axis: Any = None, data_axis: Any = None, **kwargs):
    """Ragged paged attention through ``jax.shard_map`` over ``mesh``.

    - ``head_axis`` (a mesh axis name or tuple of names): tensor parallel. q ``[T, Hq, D]`` is
      split on axis 1, kv_pages ``[P, S, 2*Hkv, D]`` on axis 2 (whole K/V pairs), the metadata is
      replicated; the output ``[T, Hq, D]`` is split like q.
    - ``data_axis``: data parallel. Every operand has one more leading axis, one entry per KV pool
      with its own metadata (``q [B, T, Hq, D]``, ``kv_pages [B, P, S, 2*Hkv, D]``, ``kv_lens [B, S]``,
      ``page_indices [B, S, pages_per_seq]``, ``cu_q_lens [B, S+1]``, ``num_seqs [B, 1]``), split
      over ``data_axis``; entry ``b`` of the output is the op on entry ``b`` of the inputs. Pools
      that share a device run one after another.
    - both: a 2-D mesh, pools over ``data_axis`` and heads over ``head_axis``.

    The split is checked before tracing: ``ValueError`` when the ``head_axis`` size does not divide
    ``num_kv_heads`` or the ``data_axis`` size does not divide ``B``. Works under ``jax.jit``; the
    inputs may be placed anywhere (``jax.device_put`` them with the matching shardings to avoid a
    copy). Other keyword arguments are the op's.
    """
    if head_axis is None and data_axis is None:
        raise ValueError("ragged_paged_attention_sharded: name a head_axis (tensor parallel) and/or a data_axis "
                         "(data parallel)")
    _static_attrs(kwargs)
    for entry in (head_axis, data_axis):
        missing = [a for a in _axis_names(entry) if a not in mesh.shape]
        if missing:
            raise ValueError(f"ragged_paged_attention_sharded: mesh has no axis {missing}; its axes are "
                             f"{tuple(mesh.axis_names)}")
    operands = tuple(map(jnp.asarray, (q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs)))
    lead = 1 if data_axis is not None else 0
    if lead:
        batch = {x.shape[0] if x.ndim else None for x in operands}
        if len(batch) != 1:
            raise ValueError("ragged_paged_attention_sharded: with data_axis every operand needs the same leading "
                             f"(pool) axis, got shapes {[tuple(x.shape) for x in operands]}")
        (batch,) = batch
        n_data = _axes_size(mesh, data_axis)
        if batch % n_data:
            raise ValueError(f"ragged_paged_attention_sharded: {batch} KV pools cannot be split over the {n_data} "
                             f"devices of mesh axes {_axis_names(data_axis)}")
    local = [jax.ShapeDtypeStruct(x.shape[lead:], x.dtype) for x in operands]
    _check_contract(*local, kwargs)
    q_heads, kv_heads = local[0].shape[1], local[1].shape[2] // 2
    check_head_split(q_heads, kv_heads, _axes_size(mesh, head_axis), f"mesh axes {_axis_names(head_axis)}")

    d = (data_axis,) if lead else ()
    q_spec = P(*d, None, head_axis, None)
    in_specs = (q_spec, P(*d, None, None, head_axis, None)) + (P(*d),) * 4

    if any(t == AxisType.Explicit for t in getattr(mesh, "axis_types", ())):
        # Explicit axes: shard_map wants the inputs' types to carry exactly these specs.
        operands = tuple(jax.sharding.reshard(x, NamedSharding(mesh, spec)) for x, spec in zip(operands, in_specs))

    def per_device(*xs):
        if lead:
            return jax.vmap(lambda *a: _xk.ragged_paged_attention(*a, **kwargs))(*xs)
        return _xk.ragged_paged_attention(*xs, **kwargs)

    return jax.shard_map(per_device, mesh=mesh, in_specs=in_specs, out_specs=q_spec, check_vma=False)(*operands)
