"""The serving step (one jitted engine step of a Llama-3-style model) with each attention backend.

Every backend runs the same model, weights and ragged batch; only the KV cache layout and the
attention differ, all inside one ``jax.jit`` with the cache donated (K/V written by XLA scatter):

- ``ours``: ``xla_gpu_kernels.jax.ragged_paged_attention`` on the interleaved pool
  ``[pages, page, 2*Hkv, D]``: one call for the whole mixed batch.
- ``pallas+cudnn``: what JAX offers: ``jax.experimental.pallas.ops.gpu.paged_attention`` (decode
  rows; its layout ``[Hkv, pages, page, D]`` for K and V, q pre-scaled) + ``jax.nn.dot_product_attention(
  implementation="cudnn", is_causal=True)`` on the prefill rows' gathered (contiguous) K/V. On CPU:
  Pallas in interpret mode and the XLA implementation (plumbing check only, not a timing).
- ``xla``: pure XLA: gather every sequence's pages into contiguous K/V and
  ``jax.nn.dot_product_attention(implementation="xla")`` (decode with key lengths, prefill causal).
- ``no-attn``: K/V written, attention output zeros: the rest of the model's cost.

Batches are static layouts: ``decode:DxL`` (D decode rows over L tokens of context),
``prefill:PxC`` (P whole prompts of C tokens, one chunk each), ``prefill:PxC@L`` (P chunks of C
tokens, each the last C of a context of L: chunked prefill), ``mixed:DxL+PxC`` (both in one
step, as continuous batching makes them). The baselines are told the layout statically (which
rows decode, which prefill); ours reads it from the ragged metadata. Pages are handed out in random
order. Before timing, every backend's logits are checked against ours (max |diff|, argmax agreement).

Times: ``ms``, the median over ``--iters`` steps, each blocked on its result (JAX dispatch
included); ``dispatch_ms``, the median time the step call takes to return (the host's part);
``pipelined_ms``, wall time per step of ``--iters`` steps issued back to back (what a serving loop
that does not wait gets). Run once with ``XLA_FLAGS=--xla_gpu_enable_command_buffer=`` to see the
host time without command buffers (``command_buffers`` in the JSON says which).

KV memory: a layout whose pages do not fit ``--cache-gb`` (per backend) draws its sequences'
context pages from a shared pool of that size (with replacement across sequences); the pages a
step writes stay each sequence's own. Every read still goes to a page of a pool hundreds of times
the L2, so the step reads from DRAM as it would with private pages; ``pool_pages`` and
``shared_pages`` in each row say when this happened.

``--profile``: one traced step per case and backend (``jax.profiler``), its GPU kernel time split
into our attention kernels (``rpa_*``), other attention kernels (Pallas, cuDNN), GEMMs and the rest.

Every (case, backend) step is compiled up front, ``--compile-workers`` at a time (XLA compiles
outside the GIL), then run one after another.

    python benchmarks/serving_step.py --config tiny                        # CPU, a few seconds
    python benchmarks/serving_step.py --config llama3-8b [--layers 32] \\
        [--cases decode:64x2048,prefill:4x2048@4096,mixed:56x2048+1x512] [--profile] [--out FILE.json]
    python benchmarks/serving_step.py --config llama3-70b --layers 8      # one device: a few of 70B's layers
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("XGK_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(HERE, "..", "python"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jax.sharding import Mesh  # noqa: E402

from xla_gpu_kernels.serving import (CONFIGS, Batch, cache_sharding, init_cache, init_params, make_step,  # noqa: E402
                                     param_shardings)
from xla_gpu_kernels.serving.cache import write_kv  # noqa: E402

DEFAULT_CASES = {
    "tiny": "decode:8x64,prefill:2x32,mixed:6x64+1x32",
    "llama3-8b": "decode:64x2048,prefill:1x2048,mixed:56x2048+1x512",
    "llama3-70b": "decode:64x2048,prefill:1x2048,mixed:56x2048+1x512",
}


@dataclasses.dataclass(frozen=True)
class Layout:
    name: str
    decode: int = 0       # decode rows
    ctx: int = 0          # their context (kv_len, the new token included)
    prefill: int = 0      # prefill chunks in this step
    chunk: int = 0        # their length
    chunk_ctx: int = 0    # each chunk's context (kv_len): the chunk is its last ``chunk`` tokens

    @property
    def tokens(self) -> int:
        return self.decode + self.prefill * self.chunk

    @property
    def seqs(self) -> int:
        return self.decode + self.prefill

    @property
    def q_lens(self) -> list[int]:
        return [1] * self.decode + [self.chunk] * self.prefill

    @property
    def kv_lens(self) -> list[int]:
        return [self.ctx] * self.decode + [self.chunk_ctx] * self.prefill

    @staticmethod
    def parse(spec: str) -> "Layout":
        kind, _, body = spec.partition(":")
        d = l = p = c = ctx = 0
        parts = body.split("+")
        if kind not in ("decode", "prefill", "mixed") or len(parts) != (2 if kind == "mixed" else 1):
            raise ValueError(f"bad case {spec!r}: decode:DxL, prefill:PxC[@L] or mixed:DxL+PxC[@L]")
        for i, part in enumerate(parts):
            part, _, at = part.partition("@")
            a, b = (int(x) for x in part.split("x"))
            if kind == "prefill" or i == 1:
                p, c = a, b
                ctx = int(at) if at else c
                if ctx < c:
                    raise ValueError(f"bad case {spec!r}: a chunk's context is at least its length")
            else:
                d, l = a, b
        return Layout(spec, d, l, p, c, ctx)


def pages_for(layout: Layout, page: int) -> tuple[int, int]:
    dec = math.ceil(layout.ctx / page) if layout.decode else 0
    pre = math.ceil(layout.chunk_ctx / page) if layout.prefill else 0
    return dec, pre


def page_bytes(cfg, page: int) -> int:
    """One page of every layer's cache (K and V)."""
    return cfg.num_layers * page * 2 * cfg.num_kv_heads * cfg.head_dim * jnp.dtype(cfg.dtype).itemsize


def make_batch(layout: Layout, page: int, rng, max_pages: int | None = None) -> tuple[Batch, int, int]:
    """The layout's batch (decode rows first) with pages in random order; returns (batch,
    num_pages, shared_pages). With ``max_pages`` smaller than the layout needs, the pages a step
    writes stay private and the rest of every context comes from a shared pool (``shared_pages``
    > 0): random, distinct within a sequence, repeated across sequences."""
    dec_p, pre_p = pages_for(layout, page)
    per_seq = [dec_p] * layout.decode + [pre_p] * layout.prefill
    written = [n - (kv - q) // page for n, q, kv in zip(per_seq, layout.q_lens, layout.kv_lens)]
    need = sum(per_seq)
    P = max(per_seq)
    page_idx = np.zeros((layout.seqs, P), np.int32)
    if max_pages is None or need + 1 <= max_pages:
        num_pages, shared = need + 1, 0
        perm = rng.permutation(num_pages).astype(np.int32)
        off = 0
        for s, n in enumerate(per_seq):
            page_idx[s, :n] = perm[off:off + n]
            off += n
    else:
        private = sum(written)
        shared = max_pages - 1 - private
        if shared < max(n - w for n, w in zip(per_seq, written)):
            raise SystemExit(f"{layout.name}: --cache-gb holds {max_pages} pages, too few for one sequence")
        num_pages = max_pages
        own = rng.permutation(private).astype(np.int32)
        off = 0
        for s, (n, w) in enumerate(zip(per_seq, written)):
            page_idx[s, :n - w] = private + rng.choice(shared, n - w, replace=False)
            page_idx[s, n - w:n] = own[off:off + w]
            off += w
    q_lens, kv_lens = layout.q_lens, np.array(layout.kv_lens, np.int32)
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    pos = np.concatenate([np.arange(kv - q, kv) for q, kv in zip(q_lens, kv_lens)]).astype(np.int32)
    seq_of = np.repeat(np.arange(layout.seqs), q_lens)
    wpage = page_idx[seq_of, pos // page]
    tok = rng.integers(0, 1000, layout.tokens).astype(np.int32)
    batch = Batch(tok, pos, wpage, (pos % page).astype(np.int32), kv_lens, page_idx, cu,
                  np.array([layout.seqs], np.int32), (cu[1:] - 1).astype(np.int32))
    return batch, num_pages, shared


def _dpa(q, k, v, *, causal, kv_lens=None, impl):
    return jax.nn.dot_product_attention(q, k, v, is_causal=causal, key_value_seq_lengths=kv_lens,
                                        scale=q.shape[-1] ** -0.5, implementation=impl)


def _prefill(q, k, v, layout: Layout, impl):
    """Causal attention of chunks ``q [P, C, Hq, D]`` over their contexts ``k, v [P, L, Hkv, D]``
    (the chunk is the context's last C tokens): the library's causal mask when C == L, else an
    explicit bottom-right one (``is_causal`` aligns the mask top-left)."""
    C, L = layout.chunk, layout.chunk_ctx
    if C == L:
        return _dpa(q, k, v, causal=True, impl=impl)
    mask = (jnp.arange(L)[None, :] <= jnp.arange(C)[:, None] + (L - C))[None, None]
    return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=q.shape[-1] ** -0.5, implementation=impl)


def xla_attend(layout: Layout, page: int):
    """Pure XLA on the interleaved pool: gather pages, dense attention."""
    dec_p, pre_p = pages_for(layout, page)
    D, C = layout.decode, layout.chunk

    def gather(cache, pages, n):  # -> K, V [seqs, n, Hkv, hd]
        g = cache[pages]  # [seqs, P, page, 2Hkv, hd]
        g = g.reshape(g.shape[0], -1, *g.shape[3:])[:, :n]
        return g[:, :, 0::2], g[:, :, 1::2]

    def attend(q, k, v, cache, batch, cfg):
        cache = write_kv(cache, k, v, batch.write_pages, batch.write_slots)
        q = q.astype(cache.dtype)
        outs = []
        if D:
            kd, vd = gather(cache, batch.page_indices[:D, :dec_p], dec_p * page)
            outs.append(_dpa(q[:D, None], kd, vd, causal=False, kv_lens=batch.kv_lens[:D], impl="xla")[:, 0])
        if layout.prefill:
            kp, vp = gather(cache, batch.page_indices[D:, :pre_p], layout.chunk_ctx)
            qp = q[D:].reshape(layout.prefill, C, *q.shape[1:])
            outs.append(_prefill(qp, kp, vp, layout, "xla").reshape(-1, *q.shape[1:]))
        return jnp.concatenate(outs), cache

    return attend


def pallas_cudnn_attend(layout: Layout, page: int, on_gpu: bool):
    """Pallas GPU paged decode + cuDNN prefill, on a [Hkv, pages, page, hd] K and V pool (a tuple)."""
    from jax.experimental.pallas.ops.gpu.paged_attention import paged_attention  # noqa: PLC0415

    dec_p, pre_p = pages_for(layout, page)
    D, C = layout.decode, layout.chunk
    k_splits = math.gcd(16, dec_p) if D else 1
    per_block = math.gcd(8, dec_p // k_splits) if D else 1

    def attend(q, k, v, cache, batch, cfg):
        kp, vp = cache
        kp = kp.at[:, batch.write_pages, batch.write_slots].set(k.transpose(1, 0, 2).astype(kp.dtype), mode="drop")
        vp = vp.at[:, batch.write_pages, batch.write_slots].set(v.transpose(1, 0, 2).astype(vp.dtype), mode="drop")
        q = q.astype(kp.dtype)
        outs = []
        if D:
            outs.append(paged_attention((q[:D] * cfg.sm_scale).astype(kp.dtype), kp, vp,
                                        batch.page_indices[:D, :dec_p], batch.kv_lens[:D], k_splits=k_splits,
                                        pages_per_compute_block=per_block, interpret=not on_gpu))
        if layout.prefill:
            pages = batch.page_indices[D:, :pre_p]

            def gather(pool):  # [Hkv, seqs, P, page, hd] -> [seqs, L, Hkv, hd]
                g = pool[:, pages]
                return g.reshape(g.shape[0], g.shape[1], -1, g.shape[-1])[:, :, :layout.chunk_ctx].transpose(1, 2, 0, 3)

            qp = q[D:].reshape(layout.prefill, C, *q.shape[1:])
            outs.append(_prefill(qp, gather(kp), gather(vp), layout, "cudnn" if on_gpu else "xla")
                        .reshape(-1, *q.shape[1:]))
        return jnp.concatenate(outs), (kp, vp)

    return attend


def no_attend(q, k, v, cache, batch, cfg):
    cache = write_kv(cache, k, v, batch.write_pages, batch.write_slots)
    return jnp.zeros(q.shape, cache.dtype), cache


def time_step(step, params, caches, batch, iters, warmup=3):
    """(median blocked step, median dispatch, wall per step back to back) in seconds, and the caches."""
    out = None
    for _ in range(warmup):
        out = step(params, caches, batch)
        caches = out[2]
    jax.block_until_ready(out)
    blocked, dispatch = [], []
    for _ in range(iters):
        t0 = time.perf_counter()
        out = step(params, caches, batch)
        t1 = time.perf_counter()
        jax.block_until_ready(out[0])
        blocked.append(time.perf_counter() - t0)
        dispatch.append(t1 - t0)
        caches = out[2]
    t0 = time.perf_counter()
    for _ in range(iters):
        out = step(params, caches, batch)
        caches = out[2]
    jax.block_until_ready(out[0])
    pipelined = (time.perf_counter() - t0) / iters
    return statistics.median(blocked), statistics.median(dispatch), pipelined, caches


KERNEL_CLASSES = (  # (class, substrings of a GPU kernel's name), first match wins
    ("ours", ("rpa_",)),
    ("other attention", ("paged_attention", "cudnn", "fmha", "flash", "sdpa", "attention")),
    ("gemm", ("gemm", "cutlass", "nvjet", "xmma", "cublas", "matmul", "triton_dot")),
)


def kernel_class(name: str) -> str:
    low = name.lower()
    return next((c for c, keys in KERNEL_CLASSES if any(k in low for k in keys)), "rest")


def profile_step(step, params, caches, batch, steps: int = 2):
    """GPU kernel time of ``steps`` traced steps by ``kernel_class`` (seconds per step), the top
    kernels, and the caches. Reads the Perfetto trace ``jax.profiler`` writes: complete events on
    the GPU's stream threads (the "XLA Ops"/"XLA Modules" lines repeat them and are skipped)."""
    import glob  # noqa: PLC0415
    import gzip  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    out = step(params, caches, batch)
    caches = out[2]
    jax.block_until_ready(out)
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d, create_perfetto_trace=True):
            for _ in range(steps):
                out = step(params, caches, batch)
                caches = out[2]
            jax.block_until_ready(out)
        path = (glob.glob(f"{d}/**/*perfetto_trace.json.gz", recursive=True)
                or glob.glob(f"{d}/**/*.trace.json.gz", recursive=True))
        if not path:
            return {"error": "no trace written"}, caches
        with gzip.open(path[0]) as f:
            trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    by_class: dict[str, float] = {}
    by_name: dict[str, float] = {}
    for e in events:
        if e.get("ph") != "X" or "GPU" not in procs.get(e.get("pid"), ""):
            continue
        if not threads.get((e["pid"], e.get("tid")), "").startswith("Stream"):
            continue
        dur = float(e.get("dur", 0)) * 1e-6 / steps
        by_class[kernel_class(e["name"])] = by_class.get(kernel_class(e["name"]), 0.0) + dur
        by_name[e["name"]] = by_name.get(e["name"], 0.0) + dur
    total = sum(by_class.values())
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:12]
    gpu_threads = sorted({f"{procs.get(p, p)}/{t}" for (p, _), t in threads.items() if "GPU" in str(procs.get(p))})
    return {"gpu_ms": total * 1e3, "gpu_threads": gpu_threads[:16], "ms_by_class": {k: v * 1e3 for k, v in sorted(by_class.items())},
            "share_by_class": {k: v / total for k, v in sorted(by_class.items())} if total else {},
            "top_kernels_ms": [[n[:120], t * 1e3] for n, t in top]}, caches


def make_backend(name: str, cfg, layout: Layout, num_pages: int, page: int, on_gpu: bool):
    """(jitted step, a function making its zeroed caches). ``ours@tpN``: ours, tensor parallel over
    the first N devices (Megatron layout: ``param_shardings``, ``cache_sharding``)."""
    base, _, tp = name.partition("@tp")
    if tp:
        if base != "ours":
            raise SystemExit(f"{name}: only ours runs tensor parallel here")
        mesh = tp_mesh(int(tp))
        return make_step(cfg, mesh=mesh), lambda: init_cache(cfg, num_pages, page, cache_sharding(mesh))
    if name == "ours":
        return make_step(cfg), lambda: init_cache(cfg, num_pages, page)
    if name == "xla":
        return make_step(cfg, attend=xla_attend(layout, page)), lambda: init_cache(cfg, num_pages, page)
    if name == "no-attn":
        return make_step(cfg, attend=no_attend), lambda: init_cache(cfg, num_pages, page)
    if name == "pallas+cudnn":
        shape = (cfg.num_kv_heads, num_pages, page, cfg.head_dim)
        zeros = jax.jit(lambda: jnp.zeros(shape, cfg.dtype))
        return (make_step(cfg, attend=pallas_cudnn_attend(layout, page, on_gpu)),
                lambda: [(zeros(), zeros()) for _ in range(cfg.num_layers)])
    raise SystemExit(f"unknown backend {name}")


def tp_mesh(n: int) -> Mesh:
    if n > len(jax.devices()):
        raise SystemExit(f"tensor parallel over {n} devices: JAX sees {len(jax.devices())}")
    return Mesh(np.array(jax.devices()[:n]), ("tp",))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--cases", help="comma-separated layouts (default: the config's)")
    ap.add_argument("--backends", default="ours,pallas+cudnn,xla,no-attn",
                    help="ours, pallas+cudnn, xla, no-attn; ours@tpN: ours over N devices (tensor parallel)")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reduce-dtype", choices=["float32", "bfloat16"], default="float32",
                    help="Config.reduce_dtype: the o / down products' dtype (under TP, the all-reduces')")
    ap.add_argument("--cache-gb", type=float, help="KV cache of one backend at most this size (GB); see above")
    ap.add_argument("--profile", action="store_true", help="GPU kernel time by class, from a jax.profiler trace")
    ap.add_argument("--compile-workers", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--out", help="JSON results (and a PNG next to it when matplotlib is there)")
    args = ap.parse_args(argv)
    cfg = dataclasses.replace(CONFIGS[args.config](args.layers), reduce_dtype=jnp.dtype(args.reduce_dtype))
    on_gpu = jax.default_backend() == "gpu"
    device = jax.devices()[0].device_kind
    layouts = [Layout.parse(s) for s in (args.cases or DEFAULT_CASES[args.config]).split(",")]
    backends = args.backends.split(",")
    # XLA's GPU command buffers are on by default; an empty list of command types turns them off.
    command_buffers = ("--xla_gpu_enable_command_buffer=" not in os.environ.get("XLA_FLAGS", "").split()
                       if on_gpu else None)
    print(f"{args.config} layers={cfg.num_layers} on {device} ({jax.default_backend()}), JAX {jax.__version__}, "
          f"command buffers {command_buffers}")
    # One device's weights only when a one-device backend runs: 70B's do not fit one GPU. Each
    # tensor-parallel width gets the same weights (same seed), each device computing its shard.
    params = init_params(cfg, args.seed) if any("@tp" not in b for b in backends) else None
    tp_params = {}
    for name in backends:
        if "@tp" in name:
            n = int(name.partition("@tp")[2])
            if n not in tp_params:
                tp_params[n] = init_params(cfg, args.seed, param_shardings(cfg, tp_mesh(n)))
    rng = np.random.default_rng(args.seed)
    max_pages = int(args.cache_gb * 1e9 // page_bytes(cfg, args.page_size)) if args.cache_gb else None

    # Every (case, backend) compiled up front, in parallel; caches stay abstract until their turn.
    jobs = []
    for layout in layouts:
        batch, num_pages, shared = make_batch(layout, args.page_size, rng, max_pages)
        batch = Batch(*(jnp.asarray(a) for a in batch))
        for name in backends:
            step, new_caches = make_backend(name, cfg, layout, num_pages, args.page_size, on_gpu)
            p = tp_params[int(name.partition("@tp")[2])] if "@tp" in name else params
            jobs.append((layout, name, batch, num_pages, shared, step, new_caches, p))

    def compile_one(job):
        layout, name, batch, _, _, step, new_caches, p = job
        t0 = time.perf_counter()
        try:
            return step.lower(p, jax.eval_shape(new_caches), batch).compile(), time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001 (a baseline that cannot build this case is reported)
            return e, time.perf_counter() - t0

    t0 = time.perf_counter()
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    with ThreadPoolExecutor(max(1, args.compile_workers)) as pool:
        compiled = list(pool.map(compile_one, jobs))
    print(f"compiled {len(jobs)} steps in {time.perf_counter() - t0:.1f}s ({args.compile_workers} at a time)")

    rows = []
    ref_logits = {}
    # Every backend's logits are checked against, and the tensor-parallel widths compared with,
    # ours on one device, or the first backend named when that one is not run (70B: TP=2 against TP=4).
    anchor = "ours" if "ours" in backends else backends[0]
    for (layout, name, batch, num_pages, shared, _, new_caches, params), (step, compile_s) in zip(jobs, compiled):
        row = {"case": layout.name, "backend": name, "tokens": layout.tokens, "pool_pages": num_pages,
               "shared_pages": shared, "compile_s": round(compile_s, 2)}
        caches = None
        try:
            if isinstance(step, Exception):
                raise step
            caches = new_caches()
            _, logits, caches = step(params, caches, batch)
            logits = np.asarray(logits)
            check = ""
            if name == anchor:
                ref_logits[layout.name] = logits
            elif layout.name in ref_logits and name != "no-attn":
                ref = ref_logits[layout.name]
                err = float(np.abs(logits - ref).max())
                agree = float((logits.argmax(-1) == ref.argmax(-1)).mean())
                check = f"max |logits - {anchor}| {err:.3g}, argmax agree {agree:.0%}"
                assert err < 0.25, check
            ms, dispatch, pipelined, caches = time_step(step, params, caches, batch, args.iters)
            row.update(ms=ms * 1e3, dispatch_ms=dispatch * 1e3, pipelined_ms=pipelined * 1e3,
                       tokens_per_s=layout.tokens / ms, check=check)
            if args.profile:
                try:
                    row["profile"], caches = profile_step(step, params, caches, batch)
                except Exception as e:  # noqa: BLE001 (the timing stands without it)
                    row["profile"] = {"error": f"{type(e).__name__}: {e}"[:300]}
        except Exception as e:  # noqa: BLE001 (a baseline that cannot run this case is reported)
            row["error"] = f"{type(e).__name__}: {e}"[:300]
            print(f"  {layout.name:28s} {name:13s} FAILED {row['error']}")
            rows.append(row)
            continue
        finally:
            del caches
        rows.append(row)
        prof = row.get("profile", {}).get("share_by_class", {})
        shares = " ".join(f"{k} {v:.0%}" for k, v in prof.items())
        print(f"  {layout.name:28s} {name:13s} {row['ms']:9.3f} ms (host {row['dispatch_ms']:.3f}, back to back "
              f"{row['pipelined_ms']:.3f})  {row['tokens_per_s']:10.0f} tok/s  {check} {shares}")
    result = {"config": args.config, "layers": cfg.num_layers, "device": device, "backend": jax.default_backend(),
              "jax": jax.__version__, "page_size": args.page_size, "iters": args.iters,
              "command_buffers": command_buffers, "cache_gb": args.cache_gb, "reduce_dtype": args.reduce_dtype,
              "xla_flags": os.environ.get("XLA_FLAGS", ""),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "rows": rows}
    tps = [b for b in backends if "@tp" in b and b != anchor]
    print("\n| case | tokens | " + " | ".join(f"{b} ms" for b in backends) + " | ours vs best baseline |"
          + "".join(f" {b} vs {anchor} |" for b in tps) + (" ours attention share |" if args.profile else ""))
    print("|---|---|" + "---|" * (len(backends) + len(tps)) + "---|" + ("---|" if args.profile else ""))
    for layout in layouts:
        got = {r["backend"]: r for r in rows if r["case"] == layout.name}
        cells = [f"{got[b]['ms']:.3f}" if "ms" in got.get(b, {}) else "n/a" for b in backends]
        base = [got[b]["ms"] for b in ("pallas+cudnn", "xla") if "ms" in got.get(b, {})]
        speed = f"{min(base) / got['ours']['ms']:.2f}x" if base and "ms" in got.get("ours", {}) else "n/a"
        share = got.get("ours", {}).get("profile", {}).get("share_by_class", {}).get("ours")
        scaling = "".join(f" {got[anchor]['ms'] / got[b]['ms']:.2f}x |" if "ms" in got.get(b, {})
                          and "ms" in got.get(anchor, {}) else " n/a |" for b in tps)
        print(f"| {layout.name} | {layout.tokens} | " + " | ".join(cells) + f" | {speed} |" + scaling
              + (f" {share:.1%} |" if share is not None else " n/a |" if args.profile else ""))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        plot(result, layouts, backends, os.path.splitext(args.out)[0] + ".png")
    return result


def plot(result: dict, layouts: list[Layout], backends: list[str], path: str) -> None:
    """Bars of step time per case and backend."""
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.8 / len(backends)
    for i, b in enumerate(backends):
        ys = [next((r.get("ms", 0) for r in rows if r["case"] == lay.name and r["backend"] == b), 0) for lay in layouts]
        ax.bar(np.arange(len(layouts)) + i * width, ys, width, label=b)
    ax.set_xticks(np.arange(len(layouts)) + 0.4 - width / 2, [lay.name for lay in layouts], fontsize=7, rotation=15)
    ax.set_ylabel("step time (ms)")
    ax.set_title(f"serving step, {result['config']} x{result['layers']} layers, {result['device']}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
