"""The dense reference: the same model and weights with no pages and no cache, every sequence
recomputed from scratch with full causal attention in f32 (written here, independently of the op).

Differences from the paged engine, by design: q, K and V stay f32 here (the engine rounds them to
bf16 for the cache and the op, whose output is bf16). Everything else (bf16 weights, f32
accumulation, f32 residual) is the same code. So the two agree to bf16 rounding of q/K/V, and
greedy tokens agree except where the top two logits are closer than that (a near-tie).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .model import Config, logits_from_hidden, mlp, qkv, rms_norm, row_parallel

__all__ = ["dense_logits", "dense_greedy", "teacher_forced_logits", "compare_greedy"]


def _causal_attention_f32(q, k, v, sm_scale):
    """q ``[B, T, Hq, D]``, k/v ``[B, T, Hkv, D]``, f32; GQA by repeating KV heads."""
    group = q.shape[2] // k.shape[2]
    k = jnp.repeat(k, group, axis=2)
    v = jnp.repeat(v, group, axis=2)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision=jax.lax.Precision.HIGHEST) * sm_scale
    t = q.shape[1]
    mask = jnp.tril(jnp.ones((t, t), bool))
    s = jnp.where(mask, s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v, precision=jax.lax.Precision.HIGHEST)


@functools.partial(jax.jit, static_argnums=(2, 3))
def dense_logits(params: dict, tokens: jax.Array, cfg: Config, round_qkv: bool = False,
                 rows: jax.Array | None = None) -> jax.Array:
    """f32 logits ``[B, T, vocab]`` of right-padded token rows ``[B, T]`` (causal: padding after a
    sequence's end does not change its logits); with ``rows`` ``[B, K]`` only at those positions,
    ``[B, K, vocab]`` (the LM head on K rows, not T: what keeps Llama-3-8B's vocab affordable).
    ``round_qkv`` rounds q, K, V and the attention
    output to the model dtype as the paged engine does (the attention itself stays f32): a
    diagnostic that isolates the bf16 rounding from everything else."""
    b, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    x = params["embed"][tokens].astype(jnp.float32)
    for layer in params["layers"]:
        h = rms_norm(x, layer["attn_norm"], cfg.rms_eps)
        q, k, v = qkv(h, layer, positions, cfg)
        if round_qkv:
            q, k, v = (a.astype(cfg.dtype).astype(jnp.float32) for a in (q, k, v))
        o = _causal_attention_f32(q, k, v, cfg.sm_scale)
        if round_qkv:
            o = o.astype(cfg.dtype)
        x = x + row_parallel(o.reshape(b, t, cfg.num_q_heads * cfg.head_dim), layer["wo"], cfg)
        x = x + mlp(x, layer, cfg)
    if rows is not None:
        x = jnp.take_along_axis(x, rows[..., None], axis=1)
    return logits_from_hidden(x, params, cfg)


def _pad(rows: list[list[int]], width: int) -> np.ndarray:
    out = np.zeros((len(rows), width), np.int32)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def dense_greedy(params: dict, cfg: Config, prompts: list[list[int]], max_new_tokens: int, width: int | None = None,
                 round_qkv: bool = False):
    """Greedy generation, recomputing every sequence densely each step. Returns (tokens ``[N,
    max_new_tokens]``, logits ``[N, max_new_tokens, vocab]`` f32 at each sampled position)."""
    width = width or max(len(p) for p in prompts) + max_new_tokens
    seqs = [list(p) for p in prompts]
    toks, logs = [], []
    for _ in range(max_new_tokens):
        rows = jnp.asarray([[len(s) - 1] for s in seqs], jnp.int32)
        last = np.asarray(dense_logits(params, jnp.asarray(_pad(seqs, width)), cfg, round_qkv, rows))[:, 0]
        nxt = last.argmax(-1)
        for s, t in zip(seqs, nxt):
            s.append(int(t))
        toks.append(nxt)
        logs.append(last)
    return np.stack(toks, 1), np.stack(logs, 1)


def teacher_forced_logits(params: dict, cfg: Config, prompts: list[list[int]], outputs: list[list[int]],
                          width: int | None = None, round_qkv: bool = False) -> np.ndarray:
    """The dense logits at every position where ``outputs[i][j]`` was sampled, given the prompt and
    ``outputs[i][:j]``: one forward pass. Returns ``[N, len(outputs[0]), vocab]``."""
    n = len(outputs[0])
    seqs = [list(p) + list(o[:-1]) for p, o in zip(prompts, outputs)]
    width = width or max(len(s) for s in seqs)
    rows = jnp.asarray([np.arange(len(p) - 1, len(p) - 1 + n) for p in prompts], jnp.int32)
    return np.asarray(dense_logits(params, jnp.asarray(_pad(seqs, width)), cfg, round_qkv, rows))


def compare_greedy(engine_tokens: np.ndarray, engine_logits: np.ndarray, dense_tokens: np.ndarray,
                   forced_logits: np.ndarray, tol: float) -> dict:
    """Checks paged greedy generation against the dense one, allowing for bf16 near-ties.

    ``engine_tokens`` / ``dense_tokens`` ``[N, T]``: free-running greedy tokens of each; ``engine_logits``
    ``[N, T, V]``: the engine's logits at each sampled position; ``forced_logits``: the dense logits
    at the same positions given the engine's own tokens (``teacher_forced_logits``), so the two
    logit sets are comparable at every step even after the sequences diverge.

    Raises ``AssertionError`` unless, at every step of every sequence, (1) the logits agree within
    ``tol`` (max abs), and (2) the engine's token is the dense argmax, or a near-tie: its dense logit
    is within ``2 * tol`` of the dense maximum. Returns the first divergence of each sequence that
    has one (``{seq: (step, engine_token, dense_token, dense_top2_gap)}``) and the max logit error."""
    n, t = engine_tokens.shape
    err = np.abs(engine_logits - forced_logits).max(axis=-1)  # [N, T]
    bad = np.argwhere(err > tol)
    assert not len(bad), f"logits differ by {err.max():.3g} > {tol} at (seq, step) {bad[:5].tolist()}"
    dense_max = forced_logits.max(-1)
    chosen = np.take_along_axis(forced_logits, engine_tokens[..., None], -1)[..., 0]
    lag = dense_max - chosen  # 0 where the engine took the dense argmax
    bad = np.argwhere(lag > 2 * tol)
    assert not len(bad), f"engine token not a near-tie of the dense argmax at (seq, step) {bad[:5].tolist()}"
    divergences = {}
    for i in range(n):
        diff = np.nonzero(engine_tokens[i] != dense_tokens[i])[0]
        if len(diff):
            j = int(diff[0])
            top2 = np.sort(forced_logits[i, j])[-2:]
            gap = float(top2[1] - top2[0])
            assert gap <= 2 * tol, f"seq {i} diverges at step {j} where the dense top-2 gap {gap:.3g} is no near-tie"
            divergences[i] = (j, int(engine_tokens[i, j]), int(dense_tokens[i, j]), gap)
    return {"divergences": divergences, "max_logit_error": float(err.max())}
