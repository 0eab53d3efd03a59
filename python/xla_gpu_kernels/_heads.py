"""How ragged paged attention splits over heads: the one place ``jax.py`` (the op partitions
itself under ``jax.jit``) and ``sharding.py`` (shard_map entry points) take it from.

Device ``i`` of ``n`` holds query heads ``[i*Hq/n, (i+1)*Hq/n)`` and KV heads
``[i*Hkv/n, (i+1)*Hkv/n)``, i.e. kv_pages axis-2 entries ``[2*i*Hkv/n, 2*(i+1)*Hkv/n)`` (K and V
interleaved, each head's pair stays together). Those are exactly the GQA groups, so each device
computes the one-device result for its heads with no communication; ``n`` must divide
``num_kv_heads``.

:func:`make_partitioned` wraps a local op (the plain custom call on whatever shapes it gets) in
``jax.experimental.custom_partitioning`` with a Shardy sharding rule, GSPMD callbacks and the
``partition`` callback that runs the local op on each device's heads.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P


def axis_names(entry) -> tuple:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)


def axes_size(mesh, entry) -> int:
    return math.prod(mesh.shape[a] for a in axis_names(entry))


def fix_hint(num_kv_heads: int) -> str:
    return (f"shard q's head axis (axis 1) and kv_pages' combined K/V head axis (axis 2) over the same mesh "
            f"axis, with a device count that divides num_kv_heads={num_kv_heads} (e.g. "
            f"NamedSharding(mesh, P(None, 'tp', None)) and NamedSharding(mesh, P(None, None, 'tp', None))), "
            f"or replicate the heads")


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
            f"{fix_hint(num_kv_heads)}")


def head_shardings(mesh: Mesh, head_axis: Any = "model"):
    """``(q, kv_pages, metadata)`` NamedShardings for tensor parallelism over ``head_axis`` (a mesh
    axis name or a tuple of them): q split on its head axis, kv_pages on its combined K/V head axis,
    metadata replicated."""
    return (NamedSharding(mesh, P(None, head_axis, None)), NamedSharding(mesh, P(None, None, head_axis, None)),
            NamedSharding(mesh, P()))


def _spec_entry(sharding, dim):
    spec = tuple(sharding.spec) + (None,) * 5
    entry = spec[dim]
    return None if entry is None or axis_names(entry) == () else entry


def _known_sharding(x):
    """``x``'s NamedSharding where it is known before tracing: a concrete array, or a tracer whose
    type carries one (Explicit mesh axes); None otherwise."""
    if isinstance(x, jax.core.Tracer):
        try:
            sharding = jax.typeof(x).sharding
        except Exception:  # noqa: BLE001 - tracers without a typed sharding
            return None
    else:
        sharding = getattr(x, "sharding", None)
    return sharding if isinstance(sharding, NamedSharding) else None


def check_known_split(q, kv_pages) -> None:
    """The head split checked before tracing, where the shardings are known (concrete arrays,
    Explicit mesh axes): each device count divides num_kv_heads, and q and kv_pages, if both are
    head-sharded, are sharded over the same mesh axes."""
    q_heads, kv_heads = q.shape[1], kv_pages.shape[2] // 2
    seen = {}
    for x, dim, name in ((q, 1, "q"), (kv_pages, 2, "kv_pages")):
        sharding = _known_sharding(x)
        if sharding is None:
            continue
        entry = _spec_entry(sharding, dim)
        if entry is None:
            continue
        try:
            size = axes_size(sharding.mesh, entry)
        except (KeyError, TypeError):
            continue
        check_head_split(q_heads, kv_heads, size, f"{name} sharded over mesh axes {axis_names(entry)}")
        seen[name] = axis_names(entry)
    if len(seen) == 2 and seen["q"] != seen["kv_pages"]:
        raise ValueError(
            f"ragged_paged_attention: q's head axis is sharded over mesh axes {seen['q']} but kv_pages' axis 2 "
            f"over {seen['kv_pages']}: {fix_hint(kv_heads)}")


def inside_manual_mesh() -> bool:
    """Inside ``jax.shard_map`` (some mesh axis Manual): the operands are local blocks."""
    return any(t == AxisType.Manual for t in getattr(jax.sharding.get_abstract_mesh(), "axis_types", ()))


# --- custom_partitioning -------------------------------------------------------------------------------------


def _head_entry(arg_shapes):
    """(mesh, mesh axes) the heads are split over, from the operand shardings XLA hands the
    callbacks: q's head axis, else kv_pages' combined axis. ValueError when they disagree."""
    q, kv = arg_shapes[0].sharding, arg_shapes[1].sharding
    for sharding in (q, kv):
        if not isinstance(sharding, NamedSharding):
            raise ValueError(
                "ragged_paged_attention: sharded inputs need a NamedSharding (a jax.sharding.Mesh), got "
                f"{type(sharding).__name__}")
    q_entry, kv_entry = _spec_entry(q, 1), _spec_entry(kv, 2)
    if q_entry is not None and kv_entry is not None and axis_names(q_entry) != axis_names(kv_entry):
        raise ValueError(
            f"ragged_paged_attention: q's head axis is sharded over mesh axes {axis_names(q_entry)} but kv_pages' "
            f"axis 2 over {axis_names(kv_entry)}: {fix_hint(arg_shapes[1].shape[2] // 2)}")
    entry = q_entry if q_entry is not None else kv_entry
    return (q if q_entry is not None else kv).mesh, entry


def make_partitioned(local_op: Callable) -> Callable:
    """``local_op(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, attrs)`` (``attrs`` a
    hashable tuple, static) wrapped in ``custom_partitioning``: q's axis 1 and kv_pages' axis 2
    split together over one set of mesh axes (whole KV heads per device), everything else
    replicated, the output sharded like q."""

    def partition(attrs, mesh, arg_shapes, result_shape):
        del mesh, result_shape
        mesh, entry = _head_entry(arg_shapes)
        q_shape, kv_shape = arg_shapes[0].shape, arg_shapes[1].shape
        check_head_split(q_shape[1], kv_shape[2] // 2, axes_size(mesh, entry), f"mesh axes {axis_names(entry)}")
        q_sharding, kv_sharding, replicated = head_shardings(mesh, entry)

        def lower_fn(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs):
            return local_op(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, attrs)

        return mesh, lower_fn, q_sharding, (q_sharding, kv_sharding) + (replicated,) * 4

    def infer_sharding_from_operands(attrs, mesh, arg_shapes, result_shape):
        """GSPMD only (Shardy uses the rule). Must not raise: XLA aborts the process on an error
        here; an impossible split is reported by ``partition``."""
        del attrs, result_shape
        try:
            mesh, entry = _head_entry(arg_shapes)
            check_head_split(arg_shapes[0].shape[1], arg_shapes[1].shape[2] // 2, axes_size(mesh, entry))
        except ValueError:
            entry = None
        return NamedSharding(mesh, P(None, entry, None))

    def sharding_rule(attrs, mesh, operand_types, result_types):
        """Shardy rule: q heads = (kv head k, group member g), kv_pages axis 2 = (kv head k, K/V c);
        only the kv-head factor k may be sharded (tokens, pages, head_dim and the metadata are
        replicated: XLA gathers them if they come sharded). Shardy rejects size-1 factors inside
        compound factors, so those are left out, and wants the factors listed in order of first
        appearance."""
        del attrs, mesh, result_types
        from jax._src.lib.mlir import ir  # the types the rule callback receives

        q_heads = ir.ShapedType(operand_types[0]).shape[1]
        kv_heads = ir.ShapedType(operand_types[1]).shape[2] // 2
        sizes = {"k": kv_heads, "g": q_heads // kv_heads, "c": 2}

        def dim(factors):
            factors = [f for f in factors if sizes[f] > 1]
            return factors[0] if len(factors) == 1 else "(" + " ".join(factors) + ")"

        q_dim = dim(["k", "g"]) if q_heads > 1 else "h"
        kv_dim = dim(["k", "c"])
        rule = f"t {q_dim} d, p s {kv_dim} d, m, m n, m1, o -> t {q_dim} d"
        whole = {d for d in (q_dim, kv_dim) if not d.startswith("(")}  # sizes come from the dimension
        compound = {f: sizes[f] for d in (q_dim, kv_dim) if d.startswith("(") for f in d[1:-1].split()
                    if f not in whole}
        order = ["t", "k", "g", "h", "d", "p", "s", "c", "m", "n", "m1", "o"]
        used = set(rule.replace("(", " ").replace(")", " ").replace(",", " ").split()) - {"->"}
        replicated = tuple(f for f in order if f in used and f != "k")
        return rule, dict(compound, need_replication_factors=replicated)

    partitioned = custom_partitioning(local_op, static_argnums=(6,))
    partitioned.def_partition(partition=partition, infer_sharding_from_operands=infer_sharding_from_operands,
                              sharding_rule=sharding_rule)
    return partitioned
