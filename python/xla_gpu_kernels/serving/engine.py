"""The engine step (one ``jax.jit`` with static shapes, cache donated) and a continuous-batching
scheduler around it.

Every step runs one ragged batch of at most ``token_budget`` tokens from at most ``max_num_seqs``
sequences: decode rows (1 token) of running requests first, then prefill chunks (as many prompt
tokens as the budget has left), admitting waiting requests while there is a sequence slot, budget
and pages for them. A request reserves the pages for its whole length (prompt + max_new_tokens) at
admission and gives them back when it retires, so a running request never waits for pages and
nothing is ever preempted. Sampling is greedy (argmax, in the step).

Host side, per step: the scheduler fills numpy arrays (``Batch``) padded to the static shapes;
the step writes the new K/V rows, attends, and returns the next token and the f32 logits of every
sequence's last row. Padding tokens write nowhere (page ``num_pages``, dropped) and padding
sequences (past ``num_seqs``) are ignored by the op.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from .cache import PageAllocator, cache_sharding, init_cache, pages_needed
from .model import Config, check_tensor_parallel, forward_paged, param_shardings

__all__ = ["Batch", "make_step", "Request", "Engine", "StepInfo"]


class Batch(NamedTuple):
    """One step's inputs; shapes static: B = token_budget, S = max_num_seqs, P = pages_per_seq."""
    token_ids: Any     # [B] i32
    positions: Any     # [B] i32, absolute position of each token in its sequence
    write_pages: Any   # [B] i32, cache page of each token's K/V (num_pages for padding: dropped)
    write_slots: Any   # [B] i32, slot in that page
    kv_lens: Any       # [S] i32, context length of each sequence after this step
    page_indices: Any  # [S, P] i32
    cu_q_lens: Any     # [S + 1] i32
    num_seqs: Any      # [1] i32
    logit_rows: Any    # [S] i32, each sequence's last row in this batch


def make_step(cfg: Config, attention: Callable | None = None, *, attend: Callable | None = None,
              mesh: Mesh | None = None, axis: str = "tp", **jit_kwargs) -> Callable:
    """``step(params, caches, batch) -> (next_tokens [S] i32, logits [S, vocab] f32, caches)``,
    jitted, ``caches`` donated (the K/V scatter is in place). ``attention`` / ``attend``: see
    ``model.forward_paged`` (the op, or a whole KV backend with its own cache layout).

    With ``mesh``: tensor parallel over mesh axis ``axis`` (params laid out by
    ``param_shardings``, caches by ``cache_sharding``); attention goes through
    ``xla_gpu_kernels.sharding.ragged_paged_attention``, one call per device on its own heads, and
    the caches keep their sharding. ``jit_kwargs`` go to ``jax.jit``."""
    if mesh is not None:
        from .. import sharding as _sh  # noqa: PLC0415

        check_tensor_parallel(cfg, mesh.shape[axis], axis)

        attention = attention or (None if attend else _sh.ragged_paged_attention)
        if attend is None:  # our cache layout; a custom backend brings its own out_shardings
            rep = NamedSharding(mesh, P())
            jit_kwargs.setdefault("out_shardings", (rep, rep, [cache_sharding(mesh, axis)] * cfg.num_layers))

    # Under tensor parallelism a narrower reduce dtype needs the all-reduce pinned to the product
    # (left alone, XLA reduces after the widening convert, in f32).
    reduce = None
    if mesh is not None and jnp.dtype(cfg.reduce_dtype) != jnp.float32:
        replicated = NamedSharding(mesh, P())
        reduce = lambda y: jax.lax.with_sharding_constraint(y, replicated)  # noqa: E731

    def step(params, caches, batch: Batch):
        logits, caches = forward_paged(params, caches, batch, cfg, attention, attend, reduce)
        return jnp.argmax(logits, axis=-1).astype(jnp.int32), logits, caches

    return jax.jit(step, donate_argnums=(1,), **jit_kwargs)


def _host(x: jax.Array) -> np.ndarray:
    """A replicated result on the host. Its first local shard is the whole array, also when the
    mesh spans several processes (multi-controller: the global array is not fully addressable)."""
    return np.asarray(x.addressable_data(0))


@dataclasses.dataclass
class Request:
    rid: int
    prompt: list[int]
    max_new_tokens: int
    output: list[int] = dataclasses.field(default_factory=list)
    logits: list[np.ndarray] = dataclasses.field(default_factory=list)  # filled when the engine records them
    pages: list[int] = dataclasses.field(default_factory=list)
    num_computed: int = 0  # tokens whose K/V is in the cache
    admitted_step: int | None = None
    first_token_step: int | None = None
    finished_step: int | None = None
    prefill_chunks: int = 0

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    @property
    def done(self) -> bool:
        return len(self.output) >= self.max_new_tokens


@dataclasses.dataclass
class StepInfo:
    step: int
    decode_rows: int
    prefill_tokens: int
    num_seqs: int
    sampled: int
    seconds: float


class Engine:
    """Continuous batching over a paged KV cache.

    ``add_request`` queues a prompt; ``step`` runs one scheduled batch; ``run`` steps until every
    request has its tokens. ``record_logits`` keeps each sampled token's f32 logits on its request
    (for tests; it costs a device-to-host copy of ``[S, vocab]`` per step).

    ``mesh``: tensor parallel over its axis ``tp_axis`` (params are put in ``param_shardings``
    unless already there, the caches split on their head axis, the step made by ``make_step(cfg,
    mesh=mesh)``)."""

    def __init__(self, cfg: Config, params: dict, *, max_num_seqs: int = 8, token_budget: int = 64,
                 page_size: int = 16, num_pages: int = 64, max_model_len: int = 128, record_logits: bool = False,
                 mesh: Mesh | None = None, tp_axis: str = "tp", step_fn: Callable | None = None):
        if token_budget < max_num_seqs:
            raise ValueError("token_budget must be at least max_num_seqs (every running request decodes each step)")
        self.cfg, self.params = cfg, params
        self.max_num_seqs, self.token_budget, self.page_size = max_num_seqs, token_budget, page_size
        self.num_pages, self.max_model_len = num_pages, max_model_len
        self.pages_per_seq = pages_needed(max_model_len, page_size)
        self.record_logits = record_logits
        if mesh is not None:
            params = self.params = jax.device_put(params, param_shardings(cfg, mesh, tp_axis))
        self.caches = init_cache(cfg, num_pages, page_size, None if mesh is None else cache_sharding(mesh, tp_axis))
        self.allocator = PageAllocator(num_pages)
        self.step_fn = step_fn or make_step(cfg, mesh=mesh, axis=tp_axis)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.finished: list[Request] = []
        self.history: list[StepInfo] = []
        self._next_id = 0

    # ---- requests ----
    def add_request(self, prompt, max_new_tokens: int) -> Request:
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise ValueError("empty prompt")
        if len(prompt) + max_new_tokens > self.max_model_len:
            raise ValueError(f"prompt {len(prompt)} + {max_new_tokens} new tokens > max_model_len {self.max_model_len}")
        if pages_needed(len(prompt) + max_new_tokens, self.page_size) > self.num_pages:
            raise ValueError("request needs more pages than the cache has")
        req = Request(self._next_id, prompt, max_new_tokens)
        self._next_id += 1
        self.waiting.append(req)
        return req

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # ---- scheduling ----
    def schedule(self) -> list[tuple[Request, int]]:
        """This step's (request, number of tokens) pairs, in batch order; admits waiting requests."""
        budget = self.token_budget
        plan = []
        # decode rows first (they have all their tokens computed but the last sampled one), then prefills
        for req in sorted(self.running, key=lambda r: r.num_computed < len(r.prompt)):
            n = min(len(req.tokens) - req.num_computed, budget)
            if n > 0:
                plan.append((req, n))
                budget -= n
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            need = pages_needed(len(req.prompt) + req.max_new_tokens, self.page_size)
            if need > self.allocator.num_free:
                break  # first come, first served: wait for pages to be freed
            self.waiting.popleft()
            req.pages = self.allocator.allocate(need)
            req.admitted_step = len(self.history)
            self.running.append(req)
            n = min(len(req.prompt), budget)
            plan.append((req, n))
            budget -= n
        return plan

    def build_batch(self, plan: list[tuple[Request, int]]) -> Batch:
        B, S, Pn = self.token_budget, self.max_num_seqs, self.pages_per_seq
        tok = np.zeros(B, np.int32)
        pos = np.zeros(B, np.int32)
        wpage = np.full(B, self.num_pages, np.int32)
        wslot = np.zeros(B, np.int32)
        kv_lens = np.zeros(S, np.int32)
        page_idx = np.zeros((S, Pn), np.int32)
        cu = np.zeros(S + 1, np.int32)
        rows = np.zeros(S, np.int32)
        off = 0
        for i, (req, n) in enumerate(plan):
            p = np.arange(req.num_computed, req.num_computed + n)
            tok[off:off + n] = req.tokens[req.num_computed:req.num_computed + n]
            pos[off:off + n] = p
            pages = np.asarray(req.pages, np.int32)
            wpage[off:off + n] = pages[p // self.page_size]
            wslot[off:off + n] = p % self.page_size
            kv_lens[i] = req.num_computed + n
            page_idx[i, :len(pages)] = pages
            off += n
            cu[i + 1] = off
            rows[i] = off - 1
        cu[len(plan) + 1:] = off
        return Batch(tok, pos, wpage, wslot, kv_lens, page_idx, cu, np.array([len(plan)], np.int32), rows)

    # ---- running ----
    def step(self) -> list[Request]:
        """Runs one batch; returns the requests that finished in it."""
        plan = self.schedule()
        if not plan:
            if self.waiting:
                raise RuntimeError("nothing schedulable: a waiting request cannot get pages")
            return []
        t0 = time.perf_counter()
        batch = self.build_batch(plan)
        next_tokens, logits, self.caches = self.step_fn(self.params, self.caches, batch)
        next_tokens = _host(next_tokens)  # the one sync per step
        logits = _host(logits) if self.record_logits else None
        seconds = time.perf_counter() - t0
        done = []
        decode_rows = prefill = sampled = 0
        for i, (req, n) in enumerate(plan):
            if req.num_computed >= len(req.prompt):
                decode_rows += n
            else:
                prefill += n
                req.prefill_chunks += 1
            req.num_computed += n
            if req.num_computed == len(req.tokens):  # the last known token: sample the next one
                req.output.append(int(next_tokens[i]))
                sampled += 1
                if logits is not None:
                    req.logits.append(logits[i].copy())
                if req.first_token_step is None:
                    req.first_token_step = len(self.history)
                if req.done:
                    req.finished_step = len(self.history)
                    self.allocator.free(req.pages)
                    req.pages = []
                    self.running.remove(req)
                    self.finished.append(req)
                    done.append(req)
        self.history.append(StepInfo(len(self.history), decode_rows, prefill, len(plan), sampled, seconds))
        return done

    def warmup(self) -> float:
        """Compiles the step with an empty batch (num_seqs 0: nothing written or read); returns seconds."""
        t0 = time.perf_counter()
        next_tokens, _, self.caches = self.step_fn(self.params, self.caches, self.build_batch([]))
        jax.block_until_ready(next_tokens)
        return time.perf_counter() - t0

    def run(self, max_steps: int = 1_000_000) -> dict:
        """Steps until every request is done; returns throughput statistics."""
        t0 = time.perf_counter()
        first = len(self.history)
        while self.has_work and len(self.history) - first < max_steps:
            self.step()
        wall = time.perf_counter() - t0
        steps = self.history[first:]
        generated = sum(s.sampled for s in steps)
        processed = sum(s.decode_rows + s.prefill_tokens for s in steps)
        return {"steps": len(steps), "seconds": wall, "tokens_processed": processed,
                "tokens_generated": generated, "processed_per_s": processed / wall if wall else 0.0,
                "generated_per_s": generated / wall if wall else 0.0,
                "mixed_steps": sum(1 for s in steps if s.decode_rows and s.prefill_tokens)}
