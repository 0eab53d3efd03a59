"""Deliberate faults in ragged paged attention, for scripts/mutation_check.sh: with XGK_MUTANT=<name>
set, `install_from_env()` (called by conftest.py) wraps the op as the tests reach it - the JAX front
end `xla_gpu_kernels.jax.ragged_paged_attention` and the torch Python kernels'
`xla_gpu_kernels.torch._run_paged_attention` (XGK_TORCH_KERNELS=python) - so that it computes a
wrong answer of a kind a broken kernel would give, built from calls of the real op with changed
metadata or attributes. The tests must then fail. Never active without XGK_MUTANT.

Faults:
  drop_newest_key     every row leaves out its newest key (kv_len - 1, positions shifted with it;
                      sequences whose first row would see nothing keep theirs)
  ignore_cap          the soft cap is not applied
  equal_weight_merge  decode rows of sequences of 2+ pages: the keys in two halves (page aligned),
                      each half's softmax alone, averaged with equal weights (the partials' softmax
                      sums ignored); cases without a sliding window
  sm_scale_x1.05      sm_scale 5 % too large
  zero_second_half    sequences of 512+ keys lose the second half of their keys (decode rows attend
                      to the first half only: a lost split)
"""

from __future__ import annotations

import inspect
import os

MUTANTS = ("drop_newest_key", "ignore_cap", "equal_weight_merge", "sm_scale_x1.05", "zero_second_half")
LONG = 512


class _Jnp:
    def __init__(self):
        import jax.numpy as jnp
        self.np = jnp

    def maximum(self, a, b):
        return self.np.maximum(a, b)

    def where(self, c, a, b):
        return self.np.where(c, a, b)

    def token_seq(self, cu, tokens):
        return self.np.searchsorted(cu[1:], self.np.arange(tokens, dtype=cu.dtype), side="right")

    def arange(self, n, like):
        return self.np.arange(n, dtype=like.dtype)

    def gather_cols(self, table, idx):
        return self.np.take_along_axis(table, idx.astype(table.dtype), axis=1)

    def take(self, a, i):
        return a[i]

    def average(self, a, b):
        return ((a.astype(self.np.float32) + b.astype(self.np.float32)) * 0.5).astype(a.dtype)


class _Torch:
    def __init__(self):
        import torch
        self.t = torch

    def maximum(self, a, b):
        return self.t.maximum(a, b)

    def where(self, c, a, b):
        return self.t.where(c, a, b)

    def token_seq(self, cu, tokens):
        return self.t.searchsorted(cu[1:].contiguous(), self.t.arange(tokens, dtype=cu.dtype, device=cu.device),
                                   right=True)

    def arange(self, n, like):
        return self.t.arange(n, dtype=like.dtype, device=like.device)

    def gather_cols(self, table, idx):
        return self.t.gather(table, 1, idx.long()).to(table.dtype)

    def take(self, a, i):
        return a[i.long()]

    def average(self, a, b):
        return ((a.float() + b.float()) * 0.5).to(a.dtype)


def faulty(call, xp, name):
    """`call(q, kv, kv_lens, page_indices, cu_q_lens, num_seqs, **attrs)` with fault `name`."""

    def run(q, kv, kv_lens, pages, cu, num_seqs, **attrs):
        q_lens = cu[1:] - cu[:-1]
        if name == "drop_newest_key":
            return call(q, kv, xp.maximum(kv_lens - 1, q_lens), pages, cu, num_seqs, **attrs)
        if name == "ignore_cap":
            return call(q, kv, kv_lens, pages, cu, num_seqs, **dict(attrs, soft_cap=None))
        if name == "sm_scale_x1.05":
            return call(q, kv, kv_lens, pages, cu, num_seqs, **dict(attrs, sm_scale=attrs.get("sm_scale", 1.0) * 1.05))
        if name == "zero_second_half":
            short = xp.where(kv_lens >= LONG, xp.maximum(kv_lens // 2, q_lens), kv_lens)
            return call(q, kv, short, pages, cu, num_seqs, **attrs)
        if name == "equal_weight_merge":
            out = call(q, kv, kv_lens, pages, cu, num_seqs, **attrs)
            if attrs.get("sliding_window") is not None:
                return out
            page = kv.shape[1]
            seqs = xp.arange(kv_lens.shape[0], kv_lens)
            sel = (q_lens == 1) & (kv_lens >= 2 * page) & (seqs < num_seqs[0])
            half_pages = (kv_lens // 2) // page
            m = half_pages * page
            first = call(q, kv, xp.where(sel, m, kv_lens), pages, cu, num_seqs, **attrs)
            cols = xp.arange(pages.shape[1], pages)
            idx = cols[None, :] + xp.where(sel, half_pages, 0 * half_pages)[:, None]
            idx = xp.where(idx < pages.shape[1], idx, pages.shape[1] - 1 + 0 * idx)
            second = call(q, kv, xp.where(sel, kv_lens - m, kv_lens), xp.gather_cols(pages, idx), cu, num_seqs,
                          **attrs)
            seq_of = xp.token_seq(cu, q.shape[0])
            row_sel = xp.take(sel, xp.where(seq_of < sel.shape[0], seq_of, 0 * seq_of)) & (seq_of < sel.shape[0])
            return xp.where(row_sel[:, None, None], xp.average(first, second), out)
        raise ValueError(f"XGK_MUTANT={name!r}: expected one of {MUTANTS}")

    return run


def install_from_env() -> str | None:
    """Installs the fault named by XGK_MUTANT (if any) in both front ends; returns its name."""
    name = os.environ.get("XGK_MUTANT")
    if not name:
        return None
    if name not in MUTANTS:
        raise ValueError(f"XGK_MUTANT={name!r}: expected one of {MUTANTS}")
    import xla_gpu_kernels.jax as xk
    real = xk.ragged_paged_attention

    def jax_call(q, kv, kv_lens, pages, cu, num_seqs, **attrs):
        return real(q, kv, kv_lens, pages, cu, num_seqs, **attrs)

    jax_faulty = faulty(jax_call, _Jnp(), name)
    xk.ragged_paged_attention = lambda *a, **kw: jax_faulty(*a, **kw)
    try:
        import xla_gpu_kernels.torch as xt
    except ImportError:
        return name
    real_run = xt._run_paged_attention
    params = list(inspect.signature(real_run).parameters)[1:]  # after `platform`

    def torch_run(platform, *args, **kwargs):
        bound = dict(zip(params, args), **kwargs)
        tensors = [bound.pop(p) for p in params[:6]]

        def call(q, kv, kv_lens, pages, cu, num_seqs, **attrs):
            return real_run(platform, q, kv, kv_lens, pages, cu, num_seqs, **attrs)

        return faulty(call, _Torch(), name)(*tensors, **bound)

    xt._run_paged_attention = torch_run
    return name
