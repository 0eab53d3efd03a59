"""A tensor-parallel decode loop over a paged KV cache: one attention layer split over devices
with `jax.shard_map`, xla_gpu_kernels' ragged paged attention on each device's own heads.

Megatron-style: every device holds the q/k/v projection columns of its block of heads, the KV
cache pages of its KV heads only (`[pages, page, 2 * KV_HEADS / n, head_dim]`, K and V
interleaved), runs attention on them with no communication, and multiplies by its rows of the
output projection; one all-reduce (`psum`) sums the partial outputs. The same layer on one device
(full weights, full cache) is the reference: attention outputs, layer outputs and the cache must
match at every step. Sequences start from prompts of different lengths, prefilled in one ragged
call, then decode one token per step.

    python examples/jax_tensor_parallel_decode.py [--devices 2] [--steps 8]

On CPU the script asks XLA for `--devices` host devices (set before JAX starts); on a machine with
GPUs it uses the first `--devices` GPUs.
"""

import argparse
import os
import sys


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=2, help="tensor-parallel degree (must divide KV_HEADS=4)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


if __name__ == "__main__":
    ARGS = parse_args()
    # Must precede JAX's start; only the CPU platform reads it (GPUs are counted as they are).
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={ARGS.devices}").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import xla_gpu_kernels.jax as xk  # noqa: E402
import xla_gpu_kernels.sharding as xs  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM, PAGE, PAGES_PER_SEQ, MODEL = 8, 4, 128, 16, 4, 256


def layer(hidden, wq, wk, wv, wo, cache, page_indices, kv_lens, cu_q_lens, num_seqs, positions, seq_of_token,
          reduce=lambda x: x):
    """One attention layer on the heads whose weights and cache pages it is given (all of them on
    one device; one block per device under shard_map). Returns (cache, layer output, attention)."""
    heads, kv_heads = wq.shape[1] // HEAD_DIM, wk.shape[1] // HEAD_DIM
    q = (hidden @ wq).reshape(-1, heads, HEAD_DIM).astype(cache.dtype)
    k = (hidden @ wk).reshape(-1, kv_heads, HEAD_DIM)
    v = (hidden @ wv).reshape(-1, kv_heads, HEAD_DIM)
    kv = jnp.stack([k, v], axis=2).reshape(k.shape[0], 2 * kv_heads, HEAD_DIM)  # K0 V0 K1 V1 ...
    pages = page_indices[seq_of_token, positions // PAGE]
    cache = cache.at[pages, positions % PAGE].set(kv.astype(cache.dtype))
    attn = xk.ragged_paged_attention(q, cache, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=HEAD_DIM ** -0.5)
    out = reduce(attn.reshape(attn.shape[0], heads * HEAD_DIM).astype(jnp.float32) @ wo)
    return cache, out, attn


def tensor_parallel_layer(mesh):
    """`layer` under shard_map over mesh axis "model": weights split by heads, cache by KV heads."""
    xs.check_head_split(HEADS, KV_HEADS, mesh.shape["model"], "--devices")  # clear error before tracing
    meta = (P(),) * 6
    in_specs = (P(), P(None, "model"), P(None, "model"), P(None, "model"), P("model", None),
                P(None, None, "model", None)) + meta
    out_specs = (P(None, None, "model", None), P(), P(None, "model", None))
    body = lambda *a: layer(*a, reduce=lambda x: jax.lax.psum(x, "model"))  # noqa: E731
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False),
                   donate_argnums=(5,))


def main(devices: int = 2, steps: int = 8, seed: int = 0) -> float:
    if len(jax.devices()) < devices:
        raise SystemExit(f"--devices {devices}: JAX sees only {len(jax.devices())} {jax.default_backend()} devices")
    mesh = jax.make_mesh((devices,), ("model",), axis_types=(jax.sharding.AxisType.Auto,),
                         devices=jax.devices()[:devices])
    tp_step = tensor_parallel_layer(mesh)
    one_step = jax.jit(layer)  # the reference: the whole layer on one device

    rng = np.random.default_rng(seed)
    prompts = [5, 17, 2, 30]
    batch = len(prompts)
    wq, wk, wv = (jnp.asarray(rng.standard_normal((MODEL, n * HEAD_DIM)) / 16, jnp.float32)
                  for n in (HEADS, KV_HEADS, KV_HEADS))
    wo = jnp.asarray(rng.standard_normal((HEADS * HEAD_DIM, MODEL)) / 32, jnp.float32)
    num_pages = batch * PAGES_PER_SEQ + 3
    cache = jnp.zeros((num_pages, PAGE, 2 * KV_HEADS, HEAD_DIM), jnp.bfloat16)
    page_indices = jnp.asarray(rng.permutation(num_pages)[:batch * PAGES_PER_SEQ].reshape(batch, PAGES_PER_SEQ),
                               jnp.int32)

    # Tensor-parallel state lives on the mesh: weights split by heads, cache split by KV heads.
    put = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))  # noqa: E731
    tp_weights = (put(wq, P(None, "model")), put(wk, P(None, "model")), put(wv, P(None, "model")),
                  put(wo, P("model", None)))
    tp_cache = put(cache, P(None, None, "model", None))
    ref_cache = jax.device_put(jnp.zeros_like(cache), jax.devices()[0])  # its own buffer (tp_cache is donated)

    text = tp_step.lower(jnp.zeros((sum(prompts), MODEL), jnp.float32), *tp_weights, tp_cache, page_indices,
                         jnp.zeros(batch, jnp.int32), jnp.zeros(batch + 1, jnp.int32), jnp.array([batch], jnp.int32),
                         jnp.zeros(sum(prompts), jnp.int32), jnp.zeros(sum(prompts), jnp.int32)).compile().as_text()
    assert "all-gather" not in text and "all-to-all" not in text, "the tensor-parallel step gathers"

    num_seqs = jnp.array([batch], jnp.int32)
    kv_lens = np.zeros(batch, np.int32)
    lengths = list(prompts)  # tokens this step, per sequence (prefill first, then 1)
    worst_attn = worst_out = 0.0
    for it in range(steps + 1):
        cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        positions = np.concatenate([np.arange(kv_lens[s], kv_lens[s] + n) for s, n in enumerate(lengths)])
        seq_of_token = np.concatenate([np.full(n, s) for s, n in enumerate(lengths)])
        kv_lens = kv_lens + np.array(lengths, np.int32)
        hidden = jnp.asarray(rng.standard_normal((int(cu[-1]), MODEL)), jnp.float32)
        meta = (page_indices, jnp.asarray(kv_lens), jnp.asarray(cu), num_seqs, jnp.asarray(positions, jnp.int32),
                jnp.asarray(seq_of_token, jnp.int32))
        tp_cache, tp_out, tp_attn = tp_step(hidden, *tp_weights, tp_cache, *meta)
        ref_cache, ref_out, ref_attn = one_step(hidden, wq, wk, wv, wo, ref_cache, *meta)
        worst_attn = max(worst_attn, float(jnp.max(jnp.abs(jax.device_get(tp_attn).astype(np.float32)
                                                           - jax.device_get(ref_attn).astype(np.float32)))))
        worst_out = max(worst_out, float(np.max(np.abs(jax.device_get(tp_out) - jax.device_get(ref_out)))))
        lengths = [1] * batch
    # The K/V projections run on column blocks of the weights: equal up to summation order, then
    # rounded to bf16 in the cache (an ulp apart at most: relative 2^-7).
    tp_c, ref_c = (np.asarray(jax.device_get(c), np.float32) for c in (tp_cache, ref_cache))
    worst_cache = float(np.max(np.abs(tp_c - ref_c)))
    assert (np.abs(tp_c - ref_c) <= 2.0 ** -7 * np.abs(ref_c) + 1e-3).all(), "caches differ by more than an ulp"
    assert tp_attn.sharding.is_equivalent_to(NamedSharding(mesh, P(None, "model", None)), 3)
    print(f"backend={jax.default_backend()} devices={devices} ({jax.devices()[0].device_kind}) steps={steps} "
          f"context={kv_lens.tolist()} heads/device={HEADS // devices}q+{KV_HEADS // devices}kv "
          f"max error vs one device: attention={worst_attn:.2e} layer={worst_out:.2e} cache={worst_cache:.2e}")
    assert worst_attn < 3e-2 and worst_out < 3e-2, (worst_attn, worst_out)
    return worst_attn


if __name__ == "__main__":
    sys.exit(0 if main(ARGS.devices, ARGS.steps, ARGS.seed) is not None else 1)
