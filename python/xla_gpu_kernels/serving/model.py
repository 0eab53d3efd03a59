"""A Llama-3-style decoder whose attention is ``xla_gpu_kernels.jax.ragged_paged_attention``.

RMSNorm, RoPE (rotate-half, theta 500000), grouped-query attention over a paged KV cache, SwiGLU
MLP, untied LM head. Weights are bf16, drawn from a fixed seed (no checkpoint is read): each
matrix is normal with std ``init_scale / sqrt(fan_in)``, norms are ones. Weight ``i`` of layer ``l``
comes from ``fold_in(fold_in(key(seed), l), i)``, so a model cut to fewer layers has the same first
layers as the full one.

Numerics: matmuls take bf16 operands and accumulate in f32 (``preferred_element_type``); the
residual stream, norms, RoPE and softmax are f32; q, K and V are rounded to the cache dtype (bf16)
for the paged attention, whose output is bf16. The dense reference (``reference.py``) uses the
same weights and helpers but keeps q/K/V in f32 and writes its own causal attention.

Parameters are a plain pytree (``{"embed", "layers": [dict per layer], "final_norm", "lm_head"}``)
so ``param_shardings`` can give every leaf a ``NamedSharding`` (Megatron tensor parallelism:
column-parallel q/k/v/gate/up, row-parallel o/down) and ``init_params(..., shardings=...)``
materializes each device's shard only.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from .. import jax as _xk

__all__ = ["Config", "check_tensor_parallel", "llama3_8b", "llama3_70b", "tiny", "CONFIGS", "init_params", "param_shardings", "forward_paged",
           "paged_attend", "rms_norm", "linear", "row_parallel", "rope", "mlp", "qkv", "logits_from_hidden"]


@dataclasses.dataclass(frozen=True)
class Config:
    vocab_size: int
    hidden: int
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    mlp_hidden: int
    rms_eps: float = 1e-5
    rope_theta: float = 500000.0
    dtype: Any = jnp.bfloat16
    init_scale: float = 1.0
    # The dtype of the row-parallel products (the o and down projections) before they join the
    # f32 residual: under tensor parallelism, the dtype of the model's two all-reduces a layer.
    # f32 (default) keeps the residual exact; bf16 halves the all-reduces' bytes (Megatron's
    # choice) at the cost of one bf16 rounding of each layer's attention and MLP outputs.
    reduce_dtype: Any = jnp.float32

    def __post_init__(self):
        if self.num_q_heads % self.num_kv_heads:
            raise ValueError(f"num_q_heads {self.num_q_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError("head_dim must be even (RoPE rotates pairs)")

    def with_layers(self, num_layers: int | None) -> "Config":
        return self if num_layers is None else dataclasses.replace(self, num_layers=num_layers)

    @property
    def sm_scale(self) -> float:
        return self.head_dim ** -0.5

    def num_params(self) -> int:
        h, d = self.hidden, self.head_dim
        per_layer = (2 * h + h * d * (self.num_q_heads + 2 * self.num_kv_heads) + self.num_q_heads * d * h
                     + 3 * h * self.mlp_hidden)
        return 2 * self.vocab_size * h + h + self.num_layers * per_layer


def llama3_8b(num_layers: int | None = None) -> Config:
    """Llama-3-8B's shapes (32 layers, hidden 4096, 32 q / 8 KV heads of 128, MLP 14336, vocab 128256)."""
    return Config(vocab_size=128256, hidden=4096, num_layers=32, num_q_heads=32, num_kv_heads=8, head_dim=128,
                  mlp_hidden=14336).with_layers(num_layers)


def llama3_70b(num_layers: int | None = None) -> Config:
    """Llama-3-70B's shapes (80 layers, hidden 8192, 64 q / 8 KV heads of 128, MLP 28672, vocab 128256).
    Tensor parallel up to 8 devices (one KV head and its 8 query heads each)."""
    return Config(vocab_size=128256, hidden=8192, num_layers=80, num_q_heads=64, num_kv_heads=8, head_dim=128,
                  mlp_hidden=28672).with_layers(num_layers)


def tiny(num_layers: int | None = None) -> Config:
    """The same architecture, small enough for CI on two CPU cores."""
    return Config(vocab_size=1000, hidden=256, num_layers=2, num_q_heads=4, num_kv_heads=2, head_dim=64,
                  mlp_hidden=512).with_layers(num_layers)


CONFIGS: dict[str, Callable[..., Config]] = {"tiny": tiny, "llama3-8b": llama3_8b, "llama3-70b": llama3_70b}

_LAYER_SHAPES = ("attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down")


def _layer_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    h, d, f = cfg.hidden, cfg.head_dim, cfg.mlp_hidden
    return {"attn_norm": (h,), "wq": (h, cfg.num_q_heads * d), "wk": (h, cfg.num_kv_heads * d),
            "wv": (h, cfg.num_kv_heads * d), "wo": (cfg.num_q_heads * d, h), "mlp_norm": (h,),
            "w_gate": (h, f), "w_up": (h, f), "w_down": (f, h)}


def _weight(cfg: Config, key, shape, std):
    if len(shape) == 1:
        return jnp.ones(shape, cfg.dtype)
    return (jax.random.normal(key, shape, jnp.float32) * std).astype(cfg.dtype)


def _init_top(cfg: Config, base) -> dict:
    top = jax.random.fold_in(base, 1 << 20)
    return {
        "embed": _weight(cfg, jax.random.fold_in(top, 0), (cfg.vocab_size, cfg.hidden), cfg.init_scale),
        "final_norm": jnp.ones((cfg.hidden,), cfg.dtype),
        "lm_head": _weight(cfg, jax.random.fold_in(top, 1), (cfg.hidden, cfg.vocab_size),
                           cfg.init_scale / math.sqrt(cfg.hidden)),
    }


def _init_layer(cfg: Config, base, layer) -> dict:
    key = jax.random.fold_in(base, layer)
    return {name: _weight(cfg, jax.random.fold_in(key, i), shape, cfg.init_scale / math.sqrt(shape[0]))
            for i, (name, shape) in enumerate(_layer_shapes(cfg).items())}


def init_params(cfg: Config, seed: int = 0, shardings: Any = None) -> dict:
    """bf16 weights from ``seed``. Jitted per layer (one compile for all layers, one layer's f32
    temporaries at a time) with ``out_shardings`` from ``shardings`` (``param_shardings(cfg,
    mesh)``: every device computes only its shard)."""
    base = jax.random.key(seed)
    sh = shardings or {}
    top = jax.jit(functools.partial(_init_top, cfg),
                  out_shardings={k: sh[k] for k in ("embed", "final_norm", "lm_head")} if sh else None)(base)
    jitted = {}
    layers = []
    for layer in range(cfg.num_layers):
        out = sh["layers"][layer] if sh else None
        key = tuple(sorted(out.items())) if out else None
        if key not in jitted:
            jitted[key] = jax.jit(functools.partial(_init_layer, cfg), out_shardings=out)
        layers.append(jitted[key](base, jnp.uint32(layer)))
    return {**top, "layers": layers}


def check_tensor_parallel(cfg: Config, n: int, axis: str = "tp") -> None:
    """Raises ``ValueError`` naming the widths that work unless ``n`` devices on mesh axis ``axis``
    each get whole KV heads (with their query heads) and an equal share of the MLP."""
    if cfg.num_kv_heads % n or cfg.num_q_heads % n or cfg.mlp_hidden % n:
        ok = [d for d in range(1, cfg.num_kv_heads + 1)
              if cfg.num_kv_heads % d == 0 and cfg.num_q_heads % d == 0 and cfg.mlp_hidden % d == 0]
        raise ValueError(f"tensor parallel over {n} devices (mesh axis {axis!r}) must divide num_kv_heads="
                         f"{cfg.num_kv_heads}, num_q_heads={cfg.num_q_heads} and mlp_hidden={cfg.mlp_hidden}: "
                         f"use a mesh axis of {', '.join(map(str, ok))} devices")


def param_shardings(cfg: Config, mesh: Mesh, axis: str = "tp") -> dict:
    """Megatron tensor parallelism over mesh axis ``axis``: q/k/v and gate/up split on their output
    features (whole heads, whole GQA groups per device), o and down on their input features (XLA
    adds one all-reduce after each), norms, embedding and LM head replicated. The KV cache goes with
    ``cache.cache_sharding``."""
    check_tensor_parallel(cfg, mesh.shape[axis], axis)
    rep = NamedSharding(mesh, P())
    col = NamedSharding(mesh, P(None, axis))
    row = NamedSharding(mesh, P(axis, None))
    layer = {"attn_norm": rep, "wq": col, "wk": col, "wv": col, "wo": row, "mlp_norm": rep, "w_gate": col,
             "w_up": col, "w_down": row}
    return {"embed": rep, "final_norm": rep, "lm_head": rep, "layers": [dict(layer) for _ in range(cfg.num_layers)]}


# ---- building blocks (shared with the dense reference) ----

def rms_norm(x: jax.Array, w: jax.Array, eps: float) -> jax.Array:
    x = x.astype(jnp.float32)
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w.astype(jnp.float32)


def linear(x: jax.Array, w: jax.Array) -> jax.Array:
    """``x @ w`` with bf16 operands (w's dtype) and an f32 result."""
    return jnp.matmul(x.astype(w.dtype), w, preferred_element_type=jnp.float32)


def rope(x: jax.Array, positions: jax.Array, theta: float) -> jax.Array:
    """Rotate-half RoPE (Llama / Hugging Face convention): x ``[..., T, H, D]`` f32, positions ``[..., T]``."""
    d = x.shape[-1]
    inv_freq = theta ** (-jnp.arange(0, d, 2, dtype=jnp.float32) / d)
    angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [..., T, D/2]
    cos, sin = jnp.cos(angles)[..., None, :], jnp.sin(angles)[..., None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def qkv(h: jax.Array, layer: dict, positions: jax.Array, cfg: Config):
    """Projections of normed hidden states ``[..., T, hidden]``: q ``[..., T, Hq, D]``, k and v
    ``[..., T, Hkv, D]``, all f32, RoPE applied to q and k."""
    lead = h.shape[:-1]
    q = linear(h, layer["wq"]).reshape(*lead, cfg.num_q_heads, cfg.head_dim)
    k = linear(h, layer["wk"]).reshape(*lead, cfg.num_kv_heads, cfg.head_dim)
    v = linear(h, layer["wv"]).reshape(*lead, cfg.num_kv_heads, cfg.head_dim)
    return rope(q, positions, cfg.rope_theta), rope(k, positions, cfg.rope_theta), v


def row_parallel(x: jax.Array, w: jax.Array, cfg: Config, reduce: Callable | None = None) -> jax.Array:
    """``x @ w`` for a row-parallel weight (o, down): the product in ``cfg.reduce_dtype``, passed
    through ``reduce`` (under tensor parallelism a replicated sharding constraint, which puts the
    all-reduce on the product in that dtype), then widened to f32 for the residual."""
    y = jnp.matmul(x.astype(w.dtype), w, preferred_element_type=cfg.reduce_dtype)
    if reduce is not None:
        y = reduce(y)
    return y.astype(jnp.float32)


def mlp(x: jax.Array, layer: dict, cfg: Config, reduce: Callable | None = None) -> jax.Array:
    h = rms_norm(x, layer["mlp_norm"], cfg.rms_eps)
    return row_parallel(jax.nn.silu(linear(h, layer["w_gate"])) * linear(h, layer["w_up"]), layer["w_down"], cfg,
                        reduce)


def logits_from_hidden(x: jax.Array, params: dict, cfg: Config) -> jax.Array:
    return linear(rms_norm(x, params["final_norm"], cfg.rms_eps), params["lm_head"])


def paged_attend(op: Callable | None = None) -> Callable:
    """The default KV backend: K/V rows scattered into the interleaved paged cache (``write_kv``),
    then ``op`` (our ragged paged attention, or anything with its signature) over the pages."""
    from .cache import write_kv  # noqa: PLC0415

    def attend(q, k, v, cache, batch, cfg: Config):
        cache = write_kv(cache, k, v, batch.write_pages, batch.write_slots)
        call = op or _xk.ragged_paged_attention  # looked up when traced (so a patched op is seen)
        o = call(q.astype(cache.dtype), cache, batch.kv_lens, batch.page_indices, batch.cu_q_lens, batch.num_seqs,
                 sm_scale=cfg.sm_scale)
        return o, cache

    return attend


def forward_paged(params: dict, caches: list, batch, cfg: Config, attention: Callable | None = None,
                  attend: Callable | None = None, reduce: Callable | None = None):
    """One ragged forward pass over ``batch`` (an ``engine.Batch``): every token's K/V is written
    into its layer's cache at (``batch.write_pages``, ``batch.write_slots``), then every query row
    attends over its sequence's pages. Returns (f32 logits of each sequence's last row
    ``[max_num_seqs, vocab]``, the updated caches).

    ``attention``: the op (default ``xla_gpu_kernels.jax.ragged_paged_attention``). ``attend``
    replaces the whole KV backend, cache layout included: ``attend(q, k, v, cache, batch, cfg) ->
    (out [tokens, Hq, D], cache)`` with q/k/v f32 after RoPE (benchmarks plug baselines in here).
    ``reduce``: applied to each row-parallel product (see ``row_parallel``)."""
    attend = attend or paged_attend(attention)
    tokens = batch.token_ids.shape[0]
    x = params["embed"][batch.token_ids].astype(jnp.float32)
    new_caches = []
    for layer, cache in zip(params["layers"], caches, strict=True):
        h = rms_norm(x, layer["attn_norm"], cfg.rms_eps)
        q, k, v = qkv(h, layer, batch.positions, cfg)
        o, cache = attend(q, k, v, cache, batch, cfg)
        x = x + row_parallel(o.reshape(tokens, cfg.num_q_heads * cfg.head_dim), layer["wo"], cfg, reduce)
        x = x + mlp(x, layer, cfg, reduce)
        new_caches.append(cache)
    return logits_from_hidden(x[batch.logit_rows], params, cfg), new_caches
