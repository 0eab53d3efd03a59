"""Multi-device checks of xla_gpu_kernels.sharding and of xla_gpu_kernels.jax.ragged_paged_attention
(which partitions itself under jax.jit), run in a fresh process (JAX reads the device count once):
on CPU with `--xla_force_host_platform_device_count=4` (our Host handler on each "device"), or on
the GPUs of a GPU machine.

    python tests/python/sharding_multidevice.py [--tolerance] [--seed N] [--only NAME ...]

Prints one JSON line per check: {"check", "ok", "detail"}; exits 0 when every check passed.
`test_sharding_cpu.py` and `test_sharding_gpu.py` run it. On CPU the sharded result must equal the
one-device result bit for bit (the Host code computes each head on its own); on GPUs the kernel's
split-KV count depends on the heads per device, so `--tolerance` compares within the dtype's
tolerance instead.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    # Before JAX initializes: 4 host devices when running on CPU (ignored by the GPU backend).
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " --xla_force_host_platform_device_count=4").strip()
    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("XGK_TEST_INSTALLED") != "1":  # else the installed wheel
        sys.path.insert(0, os.path.join(here, "..", "..", "python"))
    sys.path.insert(0, here)

import argparse  # noqa: E402
import json  # noqa: E402
import traceback  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

import xla_gpu_kernels.jax as xk  # noqa: E402
import xla_gpu_kernels.sharding as xs  # noqa: E402
from rpa_cases import check_close, make_case  # noqa: E402

CHECKS = {}
OPTS = argparse.Namespace(tolerance=False, seed=0)


def check(fn):
    CHECKS[fn.__name__.removeprefix("check_")] = fn
    return fn


# --- helpers ------------------------------------------------------------------------------------------


def rng(salt: int) -> np.random.Generator:
    return np.random.default_rng([OPTS.seed, salt])


def case(salt, *, kv_heads, group, q_dtype="bfloat16", kv_dtype=None, head_dim=64, **attrs):
    """A ragged batch (decode rows, a chunk, a prefill, padding) with fresh random values."""
    args, attrs = make_case(rng(salt), q_dtype=q_dtype, kv_dtype=kv_dtype, head_dim=head_dim, num_kv_heads=kv_heads,
                            group=group, page_size=8, seqs=((1, 37), (4, 21), (9, 9)), pad=2, **attrs)
    return tuple(map(jnp.asarray, args)), attrs


def mesh_of(n, names=("model",), shape=None, axis_type=AxisType.Auto):
    shape = shape or (n,)
    return jax.make_mesh(shape, names, axis_types=(axis_type,) * len(names), devices=jax.devices()[:int(np.prod(shape))])


def place(args, mesh, head_axis="model"):
    qs, kvs, rs = xs.head_shardings(mesh, head_axis)
    return (jax.device_put(args[0], qs), jax.device_put(args[1], kvs)) + tuple(jax.device_put(a, rs) for a in args[2:])


def same(out, ref, args, label):
    out, ref = jax.device_get(out), jax.device_get(ref)
    assert out.shape == ref.shape and out.dtype == ref.dtype, (label, out.shape, out.dtype, ref.shape, ref.dtype)
    if OPTS.tolerance:
        check_close(out, ref, np.asarray(args[4]), np.asarray(args[5]), args[0].dtype, label)
    else:
        np.testing.assert_array_equal(np.asarray(out, np.float32), np.asarray(ref, np.float32), err_msg=label)


def no_gathers(text, label):
    for op in ("all-gather", "all-to-all"):
        assert op not in text, f"{label}: compiled HLO has {op}"


def local_custom_call(text, args, n, label):
    """The compiled module calls our target once, on the per-device blocks of q and kv_pages."""
    calls = [line for line in text.splitlines() if 'custom_call_target="xla_gpu_paged_attention"' in line]
    assert len(calls) == 1, f"{label}: {len(calls)} calls of our target"
    q, kv = args[0], args[1]
    qd, kvd = jnp.dtype(q.dtype).name, jnp.dtype(kv.dtype).name
    short = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "float8_e4m3fn": "f8e4m3fn", "float8_e5m2": "f8e5m2"}
    want_q = f"{short[qd]}[{q.shape[0]},{q.shape[1] // n},{q.shape[2]}]"
    want_kv = f"{short[kvd]}[{kv.shape[0]},{kv.shape[1]},{kv.shape[2] // n},{kv.shape[3]}]"
    assert want_q in calls[0] and want_kv in calls[0], f"{label}: want {want_q} and {want_kv} in {calls[0]}"


def ndev():
    return len(jax.devices())


# --- tensor parallel ------------------------------------------------------------------------------------


GEOMETRIES = [  # (kv heads, group, devices, q dtype, kv dtype, attrs)
    (2, 4, 2, "bfloat16", None, {}),
    (4, 2, 4, "bfloat16", None, {"sliding_window": 11, "soft_cap": 30.0}),
    (4, 3, 2, "float32", None, {"mask_value": -3.0}),
    (8, 2, 4, "float16", "float8_e4m3fn", {}),
    (4, 1, 4, "bfloat16", None, {}),  # MHA
]


@check
def check_tensor_parallel_jit(axis_type=AxisType.Auto, label="auto"):
    """jax.jit of the custom_partitioning op on head-sharded inputs: per-device calls on local
    heads, no all-gather / all-to-all, the one-device result, output sharded like q."""
    ran = 0
    for i, (kvh, group, n, qd, kvd, extra) in enumerate(GEOMETRIES):
        # Fewer devices than the geometry names: the same geometry over every device there is
        # (every KV head count here divides by 2 and 4), never left out.
        n = min(n, ndev())
        ran += 1
        args, attrs = case(10 + i, kv_heads=kvh, group=group, q_dtype=qd, kv_dtype=kvd, **extra)
        ref = xk.ragged_paged_attention(*args, **attrs)
        mesh = mesh_of(n, axis_type=axis_type)
        placed = place(args, mesh)
        f = jax.jit(lambda *a: xs.ragged_paged_attention(*a, **attrs))
        text = f.lower(*placed).compile().as_text()
        tag = f"{label} Hkv={kvh} G={group} n={n} {qd}/{kvd or qd}"
        no_gathers(text, tag)
        local_custom_call(text, args, n, tag)
        out = f(*placed)
        assert out.sharding.is_equivalent_to(NamedSharding(mesh, P(None, "model", None)), 3), \
            f"{tag}: output sharding {out.sharding}"
        same(out, ref, args, tag)
        same(xs.ragged_paged_attention(*placed, **attrs), ref, args, tag + " eager")
    return f"{ran} of {len(GEOMETRIES)} geometries ({ndev()} devices)"


@check
def check_tensor_parallel_jit_explicit_axes():
    return check_tensor_parallel_jit(AxisType.Explicit, "explicit")


@check
def check_tensor_parallel_shard_map_entry():
    """ragged_paged_attention_sharded(mesh=, head_axis=) under jit."""
    for i, (kvh, group, n, qd, kvd, extra) in enumerate(GEOMETRIES):
        n = min(n, ndev())  # as in check_tensor_parallel_jit: every geometry runs
        args, attrs = case(20 + i, kv_heads=kvh, group=group, q_dtype=qd, kv_dtype=kvd, **extra)
        ref = xk.ragged_paged_attention(*args, **attrs)
        mesh = mesh_of(n)
        f = jax.jit(lambda *a: xs.ragged_paged_attention_sharded(*a, mesh=mesh, head_axis="model", **attrs))
        placed = place(args, mesh)
        text = f.lower(*placed).compile().as_text()
        tag = f"shard_map entry Hkv={kvh} G={group} n={n}"
        no_gathers(text, tag)
        local_custom_call(text, args, n, tag)
        same(f(*placed), ref, args, tag)
        same(f(*args), ref, args, tag + " unplaced inputs")
        explicit = mesh_of(n, axis_type=AxisType.Explicit)
        same(xs.ragged_paged_attention_sharded(*args, mesh=explicit, head_axis="model", **attrs), ref, args,
             tag + " explicit axes, eager")
        same(jax.jit(lambda *a: xs.ragged_paged_attention_sharded(*a, mesh=explicit, head_axis="model", **attrs))(
            *place(args, explicit)), ref, args, tag + " explicit axes, jit")


@check
def check_inside_user_shard_map():
    """The plain op and the partitioned one inside a user's own jax.shard_map over heads."""
    n = min(ndev(), 4)
    args, attrs = case(30, kv_heads=4, group=2)
    ref = xk.ragged_paged_attention(*args, **attrs)
    mesh = mesh_of(n)
    specs = (P(None, "model", None), P(None, None, "model", None)) + (P(),) * 4
    for op in (xk.ragged_paged_attention, xs.ragged_paged_attention):
        f = jax.jit(jax.shard_map(lambda *a: op(*a, **attrs), mesh=mesh, in_specs=specs,
                                  out_specs=P(None, "model", None), check_vma=False))
        text = f.lower(*place(args, mesh)).compile().as_text()
        tag = f"user shard_map {op.__module__}"
        no_gathers(text, tag)
        local_custom_call(text, args, n, tag)
        same(f(*place(args, mesh)), ref, args, tag)
    if ndev() >= 4:
        # Manual over "data" only, heads sharded over the Auto "model" axis: the plain op on the
        # data blocks (XLA cannot partition a custom call there); correct, heads gathered.
        mesh2 = mesh_of(4, ("data", "model"), shape=(2, 2))
        pools = [case(31 + b, kv_heads=4, group=2)[0] for b in range(2)]
        stacked = [jnp.stack([p[i] for p in pools]) for i in range(6)]
        stacked[0] = jax.device_put(stacked[0], NamedSharding(mesh2, P("data", None, "model", None)))
        stacked[1] = jax.device_put(stacked[1], NamedSharding(mesh2, P("data", None, None, "model", None)))
        body = lambda *a: xs.ragged_paged_attention(*(x[0] for x in a), **attrs)[None]  # noqa: E731
        f = jax.jit(jax.shard_map(body, mesh=mesh2, in_specs=(P("data"),) * 6, out_specs=P("data"),
                                  axis_names={"data"}, check_vma=False))
        out = jax.device_get(f(*stacked))
        for b in range(2):
            same(out[b], xk.ragged_paged_attention(*pools[b], **attrs), pools[b], f"partially manual pool {b}")


@check
def check_model_step_keeps_heads_local():
    """A projection from head-sharded weights, attention, an output projection over the local
    heads and an all-reduce (the Megatron pattern): the compiled step has no all-gather."""
    n = min(ndev(), 2)
    args, attrs = case(40, kv_heads=2, group=4, q_dtype="float32")
    T, Hq, D = args[0].shape
    mesh = mesh_of(n)
    r = rng(41)
    hidden = jnp.asarray(r.standard_normal((T, 48)), jnp.float32)
    wq = jnp.asarray(r.standard_normal((48, Hq * D)) / 8, jnp.float32)
    wo = jnp.asarray(r.standard_normal((Hq * D, 48)) / 8, jnp.float32)

    def step(wq, wo, hidden, kv, *meta):
        q = (hidden @ wq).reshape(T, Hq, D)
        return xs.ragged_paged_attention(q, kv, *meta, **attrs).reshape(T, Hq * D) @ wo

    put = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))  # noqa: E731
    sharded = (put(wq, P(None, "model")), put(wo, P("model", None)), put(hidden, P()),
               put(args[1], P(None, None, "model", None))) + tuple(put(a, P()) for a in args[2:])
    with jax.default_matmul_precision("highest"):  # no TF32 on GPUs: compare the sums, not roundings
        f = jax.jit(step)
        text = f.lower(*sharded).compile().as_text()
        no_gathers(text, "model step")
        assert "all-reduce" in text, "model step: expected the output projection's all-reduce"
        ref = jax.jit(step)(wq, wo, hidden, *args[1:])
        tol = 2e-3 if OPTS.tolerance else 1e-4
        np.testing.assert_allclose(np.asarray(f(*sharded)), np.asarray(ref), rtol=tol, atol=tol)


@check
def check_other_shardings_are_resharded():
    """Tokens sharded, or only q sharded: still the one-device result (XLA reshards)."""
    n = min(ndev(), 2)
    args, attrs = case(50, kv_heads=2, group=2)
    ref = xk.ragged_paged_attention(*args, **attrs)
    mesh = mesh_of(n)
    f = jax.jit(lambda *a: xs.ragged_paged_attention(*a, **attrs))
    q_tokens = jax.device_put(args[0], NamedSharding(mesh, P("model", None, None)))
    same(f(q_tokens, *args[1:]), ref, args, "q sharded over tokens")
    q_heads = jax.device_put(args[0], NamedSharding(mesh, P(None, "model", None)))
    text = f.lower(q_heads, *args[1:]).compile().as_text()
    no_gathers(text, "only q sharded")  # the replicated pool is sliced locally
    same(f(q_heads, *args[1:]), ref, args, "only q sharded")
    same(f(*args), ref, args, "unsharded")


@check
def check_uneven_heads_raise():
    """A device count that does not divide num_kv_heads: ValueError before tracing where the
    shardings are known (shard_map entry, concrete arrays, Explicit axes), at partitioning
    (compile) under jit with Auto axes. MQA over 2 devices would split a K from its V."""
    if ndev() < 2:
        return "needs 2 devices"
    msg = "cannot split"
    ran, left_out = [], []
    for kvh, group, n in ((2, 2, 4), (1, 4, 2), (3, 2, 2)):
        if n > ndev():
            left_out.append(f"Hkv={kvh} over {n} (only {ndev()} devices)")  # reported in the result
            continue
        ran.append(f"Hkv={kvh} over {n}")
        args, attrs = case(60, kv_heads=kvh, group=group)
        mesh = mesh_of(n)
        try:
            xs.ragged_paged_attention_sharded(*args, mesh=mesh, head_axis="model", **attrs)
        except ValueError as e:
            assert msg in str(e) and f"{kvh} KV heads" in str(e), str(e)
        else:
            raise AssertionError(f"shard_map entry Hkv={kvh} n={n}: no error")
        # Concrete head-sharded arrays: our check, before tracing (the last placement, on Explicit
        # axes, is traced below).
        for axis_type in (AxisType.Auto, AxisType.Explicit):
            placed = place(args, mesh_of(n, axis_type=axis_type))
            try:
                xs.ragged_paged_attention(*placed, **attrs)
            except ValueError as e:
                assert msg in str(e), str(e)
            else:
                raise AssertionError(f"eager {axis_type} Hkv={kvh} n={n}: no error")
        try:
            jax.jit(lambda *a: xs.ragged_paged_attention(*a, **attrs)).trace(*placed)  # Explicit: at trace time
        except ValueError as e:
            assert msg in str(e), str(e)
        else:
            raise AssertionError(f"jit explicit Hkv={kvh} n={n}: no error")
        placed = place(args, mesh_of(n))
        try:
            jax.jit(lambda *a: xs.ragged_paged_attention(*a, **attrs)).lower(*placed).compile()
        except Exception as e:  # noqa: BLE001 - XLA wraps the partitioner's ValueError
            assert msg in str(e), str(e)
        else:
            raise AssertionError(f"jit auto Hkv={kvh} n={n}: no error")
    return f"errors raised for {', '.join(ran)}" + (f"; not run: {', '.join(left_out)}" if left_out else "")


# --- the main entry point (xla_gpu_kernels.jax.ragged_paged_attention partitions itself) ----------------


def collectives(text):
    """Counts of each collective in a compiled HLO text (async pairs counted once, by their start)."""
    ops = ("all-gather", "all-to-all", "collective-permute", "reduce-scatter", "all-reduce")
    counts = dict.fromkeys(ops, 0)
    for line in text.splitlines():
        if "=" not in line:
            continue
        rhs = line.split("=", 1)[1]
        for op in ops:
            if f" {op}(" in rhs or f" {op}-start(" in rhs:
                counts[op] += 1
    return counts


def tp(mesh, *spec):
    return NamedSharding(mesh, P(*spec))


@check
def check_main_entry_point_partitions_itself():
    """Plain jax.jit of xla_gpu_kernels.jax.ragged_paged_attention with q on P(None, 'tp', None)
    and the pool on P(None, None, 'tp', None): the one-device result bit for bit, output sharded
    like q, one call per device on its local heads, and no collective at all in the compiled
    module (no all-gather / all-to-all / collective-permute of q or the pool)."""
    ran = 0
    for i, (kvh, group, n, qd, kvd, extra) in enumerate(GEOMETRIES):
        if n > ndev():
            continue
        ran += 1
        args, attrs = case(90 + i, kv_heads=kvh, group=group, q_dtype=qd, kv_dtype=kvd, **extra)
        ref = xk.ragged_paged_attention(*args, **attrs)
        mesh = mesh_of(n, ("tp",))
        placed = (jax.device_put(args[0], tp(mesh, None, "tp", None)),
                  jax.device_put(args[1], tp(mesh, None, None, "tp", None))) + args[2:]
        f = jax.jit(lambda *a: xk.ragged_paged_attention(*a, **attrs))
        text = f.lower(*placed).compile().as_text()
        tag = f"main entry Hkv={kvh} G={group} n={n} {qd}/{kvd or qd}"
        counts = collectives(text)
        assert not any(counts.values()), f"{tag}: collectives in the compiled module: {counts}"
        local_custom_call(text, args, n, tag)
        out = f(*placed)
        assert out.sharding.is_equivalent_to(tp(mesh, None, "tp", None), 3), f"{tag}: output sharding {out.sharding}"
        same(out, ref, args, tag)
    # Control: the plain custom call (no partitioning) on the same inputs makes XLA gather q and
    # the pool, and `collectives` sees it.
    counts = collectives(jax.jit(lambda *a: xk._local_op(*a, xk._static_attrs(**attrs, custom_call_api_version=4)))
                         .lower(*placed).compile().as_text())
    assert counts["all-gather"] >= 1, f"control: the unpartitioned call should gather: {counts}"
    # Under vmap (a leading pool axis) it is the plain call, one entry after another.
    args, attrs = case(99, kv_heads=2, group=2)
    batched = tuple(jnp.stack([a, a]) for a in args)
    out = jax.jit(jax.vmap(lambda *a: xk.ragged_paged_attention(*a, **attrs)))(*batched)
    same(out[1], xk.ragged_paged_attention(*args, **attrs), args, "main entry under vmap")
    # Other axes sharded (tokens, pages, head_dim, metadata): replicated for the call (XLA
    # gathers them), heads still split where they are; the one-device result.
    args, attrs = case(98, kv_heads=4, group=2)
    if ndev() < 4:
        return f"{ran} of {len(GEOMETRIES)} geometries ({ndev()} devices); other axes need 4 devices"
    if args[1].shape[0] % 2:  # an even page count (an unused page) so that pages can be split
        args = (args[0], jnp.concatenate([args[1], jnp.zeros_like(args[1][:1])])) + args[2:]
    ref = xk.ragged_paged_attention(*args, **attrs)
    mesh = mesh_of(4, ("a", "b"), shape=(2, 2))
    f = jax.jit(lambda *a: xk.ragged_paged_attention(*a, **attrs))
    for label, q_spec, kv_spec, meta_spec in (
            ("tokens", ("a", None, None), (None, None, None, None), ("a",)),
            ("pages + heads", (None, "b", None), ("a", None, "b", None), (None,)),
            ("head_dim + heads", (None, "b", "a"), (None, None, "b", "a"), (None,))):
        placed = (jax.device_put(args[0], tp(mesh, *q_spec)), jax.device_put(args[1], tp(mesh, *kv_spec)),
                  jax.device_put(args[2], tp(mesh, *meta_spec))) + args[3:]
        same(f(*placed), ref, args, f"main entry, {label} sharded")
    return f"{ran} of {len(GEOMETRIES)} geometries ({ndev()} devices)"


@check
def check_main_entry_point_megatron_layer():
    """A Megatron-style attention layer under plain jax.jit, everything placed by NamedSharding:
    x replicated; q/k/v projections column-parallel (output features split by whole heads); the new
    K/V written into the head-sharded paged cache; our attention; the output projection
    row-parallel (input features split). The compiled step holds exactly the row-parallel
    matmul's all-reduce, and no all-gather / all-to-all / collective-permute / reduce-scatter; its
    result is the one-device layer's."""
    n = min(ndev(), 4)
    kvh, group, D, model = 4, 2, 64, 96
    args, attrs = case(100, kv_heads=kvh, group=group, q_dtype="float32")
    q0, cache, kv_lens, page_indices, cu, num_seqs = args
    T, Hq = q0.shape[0], q0.shape[1]
    # Where each new token's K/V goes: its sequence's page and slot; padding rows to a free page.
    cu_np, lens_np, pages_np = np.asarray(cu), np.asarray(kv_lens), np.asarray(page_indices)
    page_size = cache.shape[1]
    used = {int(p) for s in range(int(np.asarray(num_seqs)[0])) for p in pages_np[s, :-(-lens_np[s] // page_size)]}
    free = min(set(range(cache.shape[0])) - used)
    pages, slots = np.full(T, free, np.int32), np.arange(T, dtype=np.int32) % page_size
    for s in range(int(np.asarray(num_seqs)[0])):
        start, stop = int(cu_np[s]), int(cu_np[s + 1])
        pos = lens_np[s] - (stop - start) + np.arange(stop - start)
        pages[start:stop], slots[start:stop] = pages_np[s, pos // page_size], pos % page_size
    r = rng(101)
    x = jnp.asarray(r.standard_normal((T, model)), jnp.float32)
    wq, wk, wv = (jnp.asarray(r.standard_normal((model, h * D)) / 10, jnp.float32) for h in (Hq, kvh, kvh))
    wo = jnp.asarray(r.standard_normal((Hq * D, model)) / 10, jnp.float32)

    def layer(x, wq, wk, wv, wo, cache, pages, slots, kv_lens, page_indices, cu, num_seqs):
        q = (x @ wq).reshape(T, Hq, D)
        k, v = (x @ wk).reshape(T, kvh, D), (x @ wv).reshape(T, kvh, D)
        kv = jnp.stack([k, v], axis=2).reshape(T, 2 * kvh, D)  # K0 V0 K1 V1 ...
        cache = cache.at[pages, slots].set(kv)
        attn = xk.ragged_paged_attention(q, cache, kv_lens, page_indices, cu, num_seqs, **attrs)
        return attn.reshape(T, Hq * D) @ wo, cache

    mesh = mesh_of(n, ("tp",))
    put = lambda a, *spec: jax.device_put(a, tp(mesh, *spec))  # noqa: E731
    meta = (pages, slots, kv_lens, page_indices, cu, num_seqs)
    sharded = (put(x), put(wq, None, "tp"), put(wk, None, "tp"), put(wv, None, "tp"), put(wo, "tp", None),
               put(cache, None, None, "tp", None)) + tuple(put(jnp.asarray(a)) for a in meta)
    with jax.default_matmul_precision("highest"):
        f = jax.jit(layer)
        text = f.lower(*sharded).compile().as_text()
        counts = collectives(text)
        assert counts["all-reduce"] == 1, f"Megatron layer: want the one all-reduce of the output projection: {counts}"
        others = {k: v for k, v in counts.items() if k != "all-reduce" and v}
        assert not others, f"Megatron layer: unexpected collectives {others}"
        local_custom_call(text, (q0, cache), n, "Megatron layer")
        out, new_cache = f(*sharded)
        ref_out, ref_cache = jax.jit(layer)(x, wq, wk, wv, wo, cache, *map(jnp.asarray, meta))
    assert new_cache.sharding.is_equivalent_to(tp(mesh, None, None, "tp", None), 4), new_cache.sharding
    np.testing.assert_array_equal(np.asarray(new_cache), np.asarray(ref_cache))
    tol = 2e-3 if OPTS.tolerance else 1e-4
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref_out), rtol=tol, atol=tol)
    return f"{n} devices: {counts}"


@check
def check_main_entry_point_bad_head_splits():
    """Head splits that do not give every device whole KV heads: a ValueError naming the fix.
    Before tracing where the shardings are known (concrete arrays, Explicit axes); under jit with
    Auto axes only XLA's partitioner knows them, and the same ValueError text comes back from
    .compile() (JAX wraps it in a JaxRuntimeError)."""
    if ndev() < 4:
        return "needs 4 devices"
    fix = "over the same mesh axis, with a device count that divides num_kv_heads"
    f = lambda *a: xk.ragged_paged_attention(*a)  # noqa: E731
    # 2 KV heads over 4 devices (q's 8 heads would divide: the pool's K/V pairs do not).
    args, _ = case(110, kv_heads=2, group=4)
    for axis_type in (AxisType.Auto, AxisType.Explicit):
        mesh = mesh_of(4, ("tp",), axis_type=axis_type)
        placed = (jax.device_put(args[0], tp(mesh, None, "tp", None)),
                  jax.device_put(args[1], tp(mesh, None, None, "tp", None))) + args[2:]
        try:
            f(*placed)
        except ValueError as e:
            assert "cannot split 8 query heads / 2 KV heads over 4 devices" in str(e) and fix in str(e), str(e)
        else:
            raise AssertionError(f"eager, {axis_type}: no error")
        if axis_type == AxisType.Explicit:
            try:
                jax.jit(f).trace(*placed)
            except ValueError as e:
                assert fix in str(e) and "num_kv_heads=2" in str(e), str(e)
            else:
                raise AssertionError("jit, Explicit axes: no error")
        else:
            try:
                jax.jit(f).lower(*placed).compile()
            except Exception as e:  # noqa: BLE001 - JaxRuntimeError around our ValueError
                assert "ValueError: ragged_paged_attention: cannot split" in str(e) and fix in str(e), str(e)
            else:
                raise AssertionError("jit, Auto axes: no error")
    # q and the pool split over different mesh axes.
    args, _ = case(111, kv_heads=4, group=2)
    for axis_type in (AxisType.Auto, AxisType.Explicit):
        mesh = mesh_of(4, ("a", "b"), shape=(2, 2), axis_type=axis_type)
        placed = (jax.device_put(args[0], tp(mesh, None, "a", None)),
                  jax.device_put(args[1], tp(mesh, None, None, "b", None))) + args[2:]
        try:
            f(*placed)
        except ValueError as e:
            assert "q's head axis is sharded over mesh axes ('a',) but kv_pages' axis 2 over ('b',)" in str(e), str(e)
            assert fix in str(e), str(e)
        else:
            raise AssertionError(f"different axes, eager, {axis_type}: no error")
    return "errors raised"


# --- data parallel ----------------------------------------------------------------------------------------


@check
def check_data_parallel():
    """One KV pool with its own metadata per data-parallel slot (stacked on a leading axis):
    entry b of the output is the one-device op on entry b; no collectives. Also pools x heads on a
    2-D mesh, and two pools per device."""
    pools = 4
    cases = [case(70 + b, kv_heads=4, group=2, sliding_window=5 + 7 * b)[0] for b in range(pools)]
    attrs = {"sm_scale": 0.125}
    stacked = tuple(jnp.stack([c[i] for c in cases]) for i in range(6))
    refs = [xk.ragged_paged_attention(*c, **attrs) for c in cases]
    layouts = [((min(ndev(), 4),), ("data",), None), ((min(ndev(), 2),), ("data",), None)]
    if ndev() >= 4:
        layouts.append(((2, 2), ("data", "model"), "model"))
    for shape, names, head in layouts:
        mesh = jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(names),
                             devices=jax.devices()[:int(np.prod(shape))])
        f = jax.jit(lambda *a: xs.ragged_paged_attention_sharded(*a, mesh=mesh, data_axis="data", head_axis=head,
                                                                 **attrs))
        text = f.lower(*stacked).compile().as_text()
        tag = f"data parallel {dict(zip(names, shape))}"
        no_gathers(text, tag)
        out = f(*stacked)
        for b in range(pools):
            same(out[b], refs[b], cases[b], f"{tag} pool {b}")
    explicit = mesh_of(min(ndev(), 4), ("data",), axis_type=AxisType.Explicit)
    out = jax.device_get(xs.ragged_paged_attention_sharded(*stacked, mesh=explicit, data_axis="data", **attrs))
    for b in range(pools):
        same(out[b], refs[b], cases[b], f"data parallel, explicit axes, pool {b}")
    try:
        xs.ragged_paged_attention_sharded(*(x[:3] for x in stacked), mesh=mesh_of(2, ("data",)), data_axis="data")
    except ValueError as e:
        assert "3 KV pools cannot be split" in str(e), str(e)
    else:
        raise AssertionError("3 pools over 2 devices: no error")


# --- the partitioner --------------------------------------------------------------------------------------


@check
def check_gspmd_partitioner():
    """The same with Shardy off (GSPMD callbacks), as older setups run it."""
    previous = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", False)
    try:
        n = min(ndev(), 4)
        args, attrs = case(80, kv_heads=4, group=2)
        ref = xk.ragged_paged_attention(*args, **attrs)
        f = jax.jit(lambda *a: xs.ragged_paged_attention(*a, **attrs))
        placed = place(args, mesh_of(n))
        text = f.lower(*placed).compile().as_text()
        no_gathers(text, "gspmd")
        local_custom_call(text, args, n, "gspmd")
        same(f(*placed), ref, args, "gspmd")
    finally:
        jax.config.update("jax_use_shardy_partitioner", previous)


def run_in_child(env, args=(), timeout=600):
    """Runs this script in a fresh process with `env` and `args`; returns the finished process and
    its reports by check name (the callers: test_sharding_cpu.py, test_sharding_gpu.py)."""
    import subprocess
    done = subprocess.run([sys.executable, os.path.abspath(__file__), *args], env=env, capture_output=True,
                          text=True, timeout=timeout)
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            results[row["check"]] = row
    return done, results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tolerance", action="store_true", help="compare within the dtype tolerance (GPUs)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    if a.list:
        print("\n".join(CHECKS))
        return 0
    OPTS.tolerance = a.tolerance
    OPTS.seed = a.seed if a.seed is not None else int(np.random.SeedSequence().entropy % 2**32)
    print(json.dumps({"check": "_setup", "ok": True, "detail": f"jax {jax.__version__}, {ndev()} x "
                      f"{jax.devices()[0].device_kind} ({jax.default_backend()}), seed {OPTS.seed}"}), flush=True)
    failed = 0
    for name, fn in CHECKS.items():
        if a.only and name not in a.only:
            continue
        try:
            detail = fn() or ""
            ok = True
        except Exception:  # noqa: BLE001 - report every check
            detail, ok = traceback.format_exc(), False
            failed += 1
        print(json.dumps({"check": name, "ok": ok, "detail": str(detail)}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
