"""Ragged paged attention on several devices: tensor parallel over heads, data parallel over pools.

Tensor parallelism splits the query heads and the KV heads in contiguous blocks, one block per
device: device ``i`` of ``n`` holds query heads ``[i*Hq/n, (i+1)*Hq/n)`` and KV heads
``[i*Hkv/n, (i+1)*Hkv/n)``, that is kv_pages axis-2 entries ``[2*i*Hkv/n, 2*(i+1)*Hkv/n)`` (each
head's K and V pair stays together). Those are exactly the GQA groups (query head ``h`` uses KV
head ``h // (Hq/Hkv)``), so every device attends over its own heads with no communication and the
result is the one-device result. The split needs ``n`` to divide ``num_kv_heads``; otherwise
``ValueError``.

Three entry points:

- :func:`ragged_paged_attention`: the op of ``xla_gpu_kernels.jax`` with the same signature,
  wrapped in ``jax.experimental.custom_partitioning``. Under ``jax.jit`` with inputs sharded over
  heads (``q`` on axis 1, ``kv_pages`` on axis 2, metadata replicated: :func:`head_shardings`
  builds them) XLA runs one custom call per device on its local heads, with no all-gather of q or
  of the KV pool (Shardy and GSPMD). Unsharded, or inside ``jax.shard_map``, it is the plain op.
- :func:`ragged_paged_attention_sharded`: the same through ``jax.shard_map`` over a mesh you name
  (``head_axis`` for tensor parallel, ``data_axis`` for data parallel, or both); checks the head
  split before anything is traced.
- Inside your own ``jax.shard_map``, call ``xla_gpu_kernels.jax.ragged_paged_attention`` (or this
  module's) on the local blocks.

Data parallel: every operand gets a leading axis, one entry per KV pool (each with its own
metadata: its sequences, its pages), sharded over ``data_axis``; each device runs its pools.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from . import _contract
from . import jax as _xk

__all__ = [
    "ragged_paged_attention",
    "ragged_paged_attention_sharded",
    "head_shardings",
    "check_head_split",
]

_ATTR_NAMES = ("sm_scale", "sliding_window", "soft_cap", "mask_value", "k_scale", "v_scale",
               "num_kv_pages_per_block", "num_queries_per_block", "vmem_limit_bytes", "custom_call_api_version")


def _axis_names(entry) -> tuple:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)


def _axes_size(mesh, entry) -> int:
    return math.prod(mesh.shape[a] for a in _axis_names(entry))


def check_head_split(num_q_heads: int, num_kv_heads: int, num_shards: int, where: str = "") -> None:
    """Raises ``ValueError`` unless ``num_shards`` devices can each take whole KV heads (with their
    K/V pairs and the GQA groups of query heads that use them)."""
    if num_q_heads <= 0 or num_kv_heads <= 0:
        raise ValueError(f"ragged_paged_attention: head counts must be > 0, got {num_q_heads} query heads / "
                         f"{num_kv_heads} KV heads")
    if num_shards <= 1:
        return
    where = f" ({where})" if where else ""
    if num_kv_heads % num_shards or num_q_heads % num_shards:
        raise ValueError(
            f"ragged_paged_attention: cannot split {num_q_heads} query heads / {num_kv_heads} KV heads over "
            f"{num_shards} devices{where}: tensor parallelism gives each device whole KV heads (K and V together) "
            f"and their query-head groups, so the device count must divide num_kv_heads ({num_kv_heads}); "
            f"use a mesh axis of a size that divides {num_kv_heads}, or replicate the heads")


def head_shardings(mesh: Mesh, head_axis: Any = "model"):
    """``(q, kv_pages, metadata)`` NamedShardings for tensor parallelism over ``head_axis`` (a mesh
    axis name or a tuple of them): q split on its head axis, kv_pages on its combined K/V head axis,
    metadata replicated."""
    return (NamedSharding(mesh, P(None, head_axis, None)), NamedSharding(mesh, P(None, None, head_axis, None)),
            NamedSharding(mesh, P()))


# --- automatic partitioning (custom_partitioning) ---------------------------------------------------


def _static_attrs(kwargs: dict) -> tuple:
    unknown = set(kwargs) - set(_ATTR_NAMES)
    if unknown:
        raise TypeError(f"ragged_paged_attention: unexpected keyword arguments {sorted(unknown)}")
    return tuple(sorted(kwargs.items()))


def _call_op(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, attrs):
    return _xk.ragged_paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **dict(attrs))


_partitioned = custom_partitioning(_call_op, static_argnums=(6,))


def _head_entry(arg_shapes):
    """The mesh axes the heads are split over: q's head axis, else kv_pages' combined axis."""
    q, kv = arg_shapes[0].sharding, arg_shapes[1].sharding
    for sharding, dim in ((q, 1), (kv, 2)):
        if not isinstance(sharding, NamedSharding):
            raise ValueError(
                "ragged_paged_attention: sharded inputs need a NamedSharding (a jax.sharding.Mesh), got "
                f"{type(sharding).__name__}")
        spec = tuple(sharding.spec) + (None,) * 4
        if spec[dim] is not None:
            return sharding.mesh, spec[dim]
    return q.mesh, None


def _result_and_args(attrs, arg_shapes):
    mesh, entry = _head_entry(arg_shapes)
    q_shape, kv_shape = arg_shapes[0].shape, arg_shapes[1].shape
    check_head_split(q_shape[1], kv_shape[2] // 2, _axes_size(mesh, entry), f"mesh axes {_axis_names(entry)}")
    q_sharding, kv_sharding, replicated = head_shardings(mesh, entry)
    return mesh, q_sharding, (q_sharding, kv_sharding) + (replicated,) * 4


def _partition(attrs, mesh, arg_shapes, result_shape):
    del mesh, result_shape
    mesh, out_sharding, arg_shardings = _result_and_args(attrs, arg_shapes)

    def lower_fn(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs):
        return _call_op(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, attrs)

    return mesh, lower_fn, out_sharding, arg_shardings


def _infer_sharding_from_operands(attrs, mesh, arg_shapes, result_shape):
    """GSPMD only (Shardy uses the rule). Must not raise: XLA aborts the process on an error here;
    an impossible split is reported by ``_partition``."""
    del attrs, result_shape
    try:
        mesh, entry = _head_entry(arg_shapes)
        check_head_split(arg_shapes[0].shape[1], arg_shapes[1].shape[2] // 2, _axes_size(mesh, entry))
    except ValueError:
        entry = None
    return NamedSharding(mesh, P(None, entry, None))


def _sharding_rule(attrs, mesh, operand_types, result_types):
    """Shardy rule: q heads = (kv head k, group member g), kv_pages axis 2 = (kv head k, K/V c); only
    the kv-head factor k may be sharded. Shardy rejects size-1 factors inside compound factors, so
    those are left out, and wants the special factors listed in order of first appearance."""
    del attrs, mesh, result_types
    from jax._src.lib.mlir import ir  # the types the rule callback receives

    q_heads = ir.ShapedType(operand_types[0]).shape[1]
    kv_heads = ir.ShapedType(operand_types[1]).shape[2] // 2
    group = q_heads // kv_heads
    sizes = {"k": kv_heads, "g": group, "c": 2}

    def dim(factors):
        factors = [f for f in factors if sizes[f] > 1]
        return factors[0] if len(factors) == 1 else "(" + " ".join(factors) + ")"

    q_dim = dim(["k", "g"]) if q_heads > 1 else "h"
    kv_dim = dim(["k", "c"])
    rule = f"t {q_dim} d, p s {kv_dim} d, m, m n, m1, o -> t {q_dim} d"
    whole = {d for d in (q_dim, kv_dim) if not d.startswith("(")}  # sizes come from the dimension
    compound = {f: sizes[f] for d in (q_dim, kv_dim) if d.startswith("(") for f in d[1:-1].split() if f not in whole}
    order = ["t", "k", "g", "h", "d", "p", "s", "c", "m", "n", "m1", "o"]
    used = set(rule.replace("(", " ").replace(")", " ").replace(",", " ").split()) - {"->"}
    replicated = tuple(f for f in order if f in used and f != "k")
    return rule, dict(compound, need_replication_factors=replicated)


_partitioned.def_partition(partition=_partition, infer_sharding_from_operands=_infer_sharding_from_operands,
                           sharding_rule=_sharding_rule)
_partitioned_jit = jax.jit(_partitioned, static_argnums=(6,))


def _known_head_split(x, dim):
    """(mesh axes, device count) of ``x``'s dimension ``dim`` where the sharding is known before
    tracing (a concrete array, or a tracer with an Explicit mesh axis); None otherwise."""
    if isinstance(x, jax.core.Tracer):
        try:
            sharding = jax.typeof(x).sharding
        except Exception:  # noqa: BLE001 - older/other tracers without a typed sharding
            return None
    else:
        sharding = getattr(x, "sharding", None)
    if not isinstance(sharding, NamedSharding):
        return None
    spec = tuple(sharding.spec) + (None,) * 4
    if spec[dim] is None:
        return None
    try:
        return _axis_names(spec[dim]), _axes_size(sharding.mesh, spec[dim])
    except (KeyError, TypeError):
        return None


def ragged_paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **kwargs):
    """``xla_gpu_kernels.jax.ragged_paged_attention`` (same arguments and output) that partitions
    over heads under ``jax.jit``: with q sharded on axis 1 and kv_pages on axis 2 over the same
    mesh axes (:func:`head_shardings`), each device calls the kernel on its own heads and the
    output is sharded like q. Other shardings are resharded to that (sharded tokens, pages or
    head_dim are gathered). Unsharded inputs, or calls inside ``jax.shard_map``, run the plain op
    (inside a shard_map that leaves some mesh axes Auto, heads sharded over those axes are gathered:
    make the head axis manual too, or use :func:`ragged_paged_attention_sharded`).

    Raises ``ValueError`` on contract violations before tracing, and on a head split that does not
    divide ``num_kv_heads``: before tracing where the shardings are known then (concrete arrays,
    Explicit mesh axes), else when XLA partitions the call (inside ``jax.jit`` with Auto axes,
    surfaced by ``.compile()`` or the first call). No ``vmap``: use the plain op for that.
    """
    attrs = _static_attrs(kwargs)
    q, kv_pages = jnp.asarray(q), jnp.asarray(kv_pages)
    kv_lens, page_indices = jnp.asarray(kv_lens), jnp.asarray(page_indices)
    cu_q_lens, num_seqs = jnp.asarray(cu_q_lens), jnp.asarray(num_seqs)
    _check_contract(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, kwargs)
    for x, dim, name in ((q, 1, "q"), (kv_pages, 2, "kv_pages")):
        known = _known_head_split(x, dim)
        if known is not None:
            check_head_split(q.shape[1], kv_pages.shape[2] // 2, known[1], f"{name} sharded over mesh axes {known[0]}")
    if any(t == AxisType.Manual for t in getattr(jax.sharding.get_abstract_mesh(), "axis_types", ())):
        # Inside jax.shard_map the operands are the local blocks: the plain op. (A shard_map manual
        # over only some axes cannot host custom partitioning: XLA fails or aborts.)
        return _call_op(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, attrs)
    return _partitioned_jit(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, attrs)


def _check_contract(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, attrs):
    _contract.check_paged_attention(
        q.shape, q.dtype, kv_pages.shape, kv_pages.dtype, kv_lens.shape, page_indices.shape, cu_q_lens.shape,
        num_seqs.shape,
        {"kv_lens": kv_lens.dtype, "page_indices": page_indices.dtype, "cu_q_lens": cu_q_lens.dtype,
         "num_seqs": num_seqs.dtype},
        sliding_window=attrs.get("sliding_window"), soft_cap=attrs.get("soft_cap"),
        sm_scale=attrs.get("sm_scale", 1.0), mask_value=attrs.get("mask_value"), k_scale=attrs.get("k_scale"),
        v_scale=attrs.get("v_scale"),
    )


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
