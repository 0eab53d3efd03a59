"""A JAX decode loop over a paged KV cache, with xla_gpu_kernels' ragged paged attention.

Each step writes the new token's K and V into the cache pages (K and V interleaved on axis 2, as in
the torch_xla / JAX TPU layout) and attends over the whole context of every sequence. Sequences
start from prompts of different lengths, prefilled in one ragged call. Runs on CUDA when JAX sees
a GPU, on CPU (our Host handler) otherwise; checks the last step against JAX's reference.

    python examples/jax_decode_loop.py [--steps 16]
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ref_ragged_paged_attention

import xla_gpu_kernels.jax as xk

HEADS, KV_HEADS, HEAD_DIM, PAGE, PAGES_PER_SEQ = 8, 2, 128, 16, 8


def write_kv(cache, page_indices, positions, seq_of_token, k, v):
    """Scatters one K/V row per token into its sequence's page at `positions`."""
    pages = page_indices[seq_of_token, positions // PAGE]
    slots = positions % PAGE
    kv = jnp.stack([k, v], axis=2).reshape(k.shape[0], 2 * KV_HEADS, HEAD_DIM)  # interleave K0 V0 K1 V1...
    return cache.at[pages, slots].set(kv.astype(cache.dtype))


@jax.jit
def step(cache, wq, wk, wv, hidden, page_indices, kv_lens, cu_q_lens, num_seqs, positions, seq_of_token):
    """One ragged step: project, append K/V, attend. Returns (new cache, attention output)."""
    q = (hidden @ wq).reshape(-1, HEADS, HEAD_DIM)
    k = (hidden @ wk).reshape(-1, KV_HEADS, HEAD_DIM)
    v = (hidden @ wv).reshape(-1, KV_HEADS, HEAD_DIM)
    cache = write_kv(cache, page_indices, positions, seq_of_token, k, v)
    out = xk.ragged_paged_attention(q.astype(cache.dtype), cache, kv_lens, page_indices, cu_q_lens, num_seqs,
                                    sm_scale=HEAD_DIM ** -0.5)
    return cache, out, q.astype(cache.dtype)


def main(steps: int = 16, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    prompts = [5, 17, 2]
    batch, model = len(prompts), 256
    wq, wk, wv = (jnp.asarray(rng.standard_normal((model, n * HEAD_DIM)) / 16, jnp.float32)
                  for n in (HEADS, KV_HEADS, KV_HEADS))
    cache = jnp.zeros((batch * PAGES_PER_SEQ + 4, PAGE, 2 * KV_HEADS, HEAD_DIM), jnp.bfloat16)
    page_indices = jnp.asarray(rng.permutation(cache.shape[0])[:batch * PAGES_PER_SEQ].reshape(batch, PAGES_PER_SEQ),
                               jnp.int32)
    num_seqs = jnp.array([batch], jnp.int32)
    kv_lens = np.zeros(batch, np.int32)
    lengths = list(prompts)  # tokens this step, per sequence (prefill first, then 1)
    for it in range(steps + 1):
        cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        positions = np.concatenate([np.arange(kv_lens[s], kv_lens[s] + n) for s, n in enumerate(lengths)])
        seq_of_token = np.concatenate([np.full(n, s) for s, n in enumerate(lengths)])
        kv_lens = kv_lens + np.array(lengths, np.int32)
        hidden = jnp.asarray(rng.standard_normal((int(cu[-1]), model)), jnp.float32)
        cache, out, q = step(cache, wq, wk, wv, hidden, page_indices, jnp.asarray(kv_lens), jnp.asarray(cu), num_seqs,
                             jnp.asarray(positions, jnp.int32), jnp.asarray(seq_of_token, jnp.int32))
        lengths = [1] * batch
    ref = ref_ragged_paged_attention(q, cache, jnp.asarray(kv_lens), page_indices, jnp.asarray(cu), num_seqs,
                                     sm_scale=HEAD_DIM ** -0.5)
    err = float(jnp.max(jnp.abs(out.astype(jnp.float32) - ref.astype(jnp.float32))))
    print(f"backend={jax.default_backend()} steps={steps} context={kv_lens.tolist()} max error vs reference={err:.2e}")
    assert err < 3e-2, err
    return err


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16)
    main(parser.parse_args().steps)
