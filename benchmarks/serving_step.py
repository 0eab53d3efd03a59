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
``prefill:PxC`` (P whole prompts of C tokens, one chunk each), ``mixed:DxL+PxC`` (both in one
step, as continuous batching makes them). The baselines are told the layout statically (which
rows decode, which prefill); ours reads it from the ragged metadata. Pages are handed out in random
order. Before timing, every backend's logits are checked against ours (max |diff|, argmax agreement).
Times: median over ``--iters`` steps, each blocked on its result (includes JAX dispatch).

    python benchmarks/serving_step.py --config tiny                        # CPU, a few seconds
    python benchmarks/serving_step.py --config llama3-8b [--layers 32] \\
        [--cases decode:64x2048,prefill:1x2048,mixed:56x2048+1x512] [--out FILE.json]
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

from xla_gpu_kernels.serving import CONFIGS, Batch, init_cache, init_params, make_step  # noqa: E402
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
    prefill: int = 0      # prompts prefilled whole in this step
    chunk: int = 0        # their length

    @property
    def tokens(self) -> int:
        return self.decode + self.prefill * self.chunk

    @property
    def seqs(self) -> int:
        return self.decode + self.prefill

    @staticmethod
    def parse(spec: str) -> "Layout":
        kind, _, body = spec.partition(":")
        d = l = p = c = 0
        parts = body.split("+")
        if kind not in ("decode", "prefill", "mixed") or len(parts) != (2 if kind == "mixed" else 1):
            raise ValueError(f"bad case {spec!r}: decode:DxL, prefill:PxC or mixed:DxL+PxC")
        for i, part in enumerate(parts):
            a, b = (int(x) for x in part.split("x"))
            if kind == "prefill" or i == 1:
                p, c = a, b
            else:
                d, l = a, b
        return Layout(spec, d, l, p, c)


def pages_for(layout: Layout, page: int) -> tuple[int, int]:
    dec = math.ceil(layout.ctx / page) if layout.decode else 0
    pre = math.ceil(layout.chunk / page) if layout.prefill else 0
    return dec, pre


def make_batch(layout: Layout, page: int, rng) -> tuple[Batch, int]:
    """The layout's batch (decode rows first) with pages in random order; returns (batch, num_pages)."""
    dec_p, pre_p = pages_for(layout, page)
    per_seq = [dec_p] * layout.decode + [pre_p] * layout.prefill
    num_pages = sum(per_seq) + 1
    perm = rng.permutation(num_pages).astype(np.int32)
    P = max(per_seq)
    page_idx = np.zeros((layout.seqs, P), np.int32)
    off = 0
    for s, n in enumerate(per_seq):
        page_idx[s, :n] = perm[off:off + n]
        off += n
    q_lens = [1] * layout.decode + [layout.chunk] * layout.prefill
    kv_lens = np.array([layout.ctx] * layout.decode + [layout.chunk] * layout.prefill, np.int32)
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    pos = np.concatenate([np.arange(kv - q, kv) for q, kv in zip(q_lens, kv_lens)]).astype(np.int32)
    seq_of = np.repeat(np.arange(layout.seqs), q_lens)
    wpage = page_idx[seq_of, pos // page]
    tok = rng.integers(0, 1000, layout.tokens).astype(np.int32)
    batch = Batch(tok, pos, wpage, (pos % page).astype(np.int32), kv_lens, page_idx, cu,
                  np.array([layout.seqs], np.int32), (cu[1:] - 1).astype(np.int32))
    return batch, num_pages


def _dpa(q, k, v, *, causal, kv_lens=None, impl):
    return jax.nn.dot_product_attention(q, k, v, is_causal=causal, key_value_seq_lengths=kv_lens,
                                        scale=q.shape[-1] ** -0.5, implementation=impl)


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
            kp, vp = gather(cache, batch.page_indices[D:, :pre_p], C)
            qp = q[D:].reshape(layout.prefill, C, *q.shape[1:])
            outs.append(_dpa(qp, kp, vp, causal=True, impl="xla").reshape(-1, *q.shape[1:]))
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

            def gather(pool):  # [Hkv, seqs, P, page, hd] -> [seqs, C, Hkv, hd]
                g = pool[:, pages]
                return g.reshape(g.shape[0], g.shape[1], -1, g.shape[-1])[:, :, :C].transpose(1, 2, 0, 3)

            qp = q[D:].reshape(layout.prefill, C, *q.shape[1:])
            outs.append(_dpa(qp, gather(kp), gather(vp), causal=True, impl="cudnn" if on_gpu else "xla")
                        .reshape(-1, *q.shape[1:]))
        return jnp.concatenate(outs), (kp, vp)

    return attend


def no_attend(q, k, v, cache, batch, cfg):
    cache = write_kv(cache, k, v, batch.write_pages, batch.write_slots)
    return jnp.zeros(q.shape, cache.dtype), cache


def time_step(step, params, caches, batch, iters, warmup=3):
    out = None
    for _ in range(warmup):
        out = step(params, caches, batch)
        caches = out[2]
    jax.block_until_ready(out)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        out = step(params, caches, batch)
        jax.block_until_ready(out[0])
        times.append(time.perf_counter() - t0)
        caches = out[2]
    return statistics.median(times), caches


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--cases", help="comma-separated layouts (default: the config's)")
    ap.add_argument("--backends", default="ours,pallas+cudnn,xla,no-attn")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="JSON results (and a PNG next to it when matplotlib is there)")
    args = ap.parse_args(argv)
    cfg = CONFIGS[args.config](args.layers)
    on_gpu = jax.default_backend() == "gpu"
    device = jax.devices()[0].device_kind
    layouts = [Layout.parse(s) for s in (args.cases or DEFAULT_CASES[args.config]).split(",")]
    backends = args.backends.split(",")
    print(f"{args.config} layers={cfg.num_layers} on {device} ({jax.default_backend()}), JAX {jax.__version__}")
    params = init_params(cfg, args.seed)
    rng = np.random.default_rng(args.seed)
    rows = []
    for layout in layouts:
        batch, num_pages = make_batch(layout, args.page_size, rng)
        batch = Batch(*(jnp.asarray(a) for a in batch))
        ref_logits = None
        for name in backends:
            if name == "ours":
                step, caches = make_step(cfg), init_cache(cfg, num_pages, args.page_size)
            elif name == "xla":
                step, caches = make_step(cfg, attend=xla_attend(layout, args.page_size)), init_cache(
                    cfg, num_pages, args.page_size)
            elif name == "no-attn":
                step, caches = make_step(cfg, attend=no_attend), init_cache(cfg, num_pages, args.page_size)
            elif name == "pallas+cudnn":
                shape = (cfg.num_kv_heads, num_pages, args.page_size, cfg.head_dim)
                step = make_step(cfg, attend=pallas_cudnn_attend(layout, args.page_size, on_gpu))
                caches = [(jnp.zeros(shape, cfg.dtype), jnp.zeros(shape, cfg.dtype)) for _ in range(cfg.num_layers)]
            else:
                raise SystemExit(f"unknown backend {name}")
            try:
                _, logits, caches = step(params, caches, batch)
                logits = np.asarray(logits)
                check = ""
                if name == "ours":
                    ref_logits = logits
                elif ref_logits is not None and name != "no-attn":
                    err = float(np.abs(logits - ref_logits).max())
                    agree = float((logits.argmax(-1) == ref_logits.argmax(-1)).mean())
                    check = f"max |logits - ours| {err:.3g}, argmax agree {agree:.0%}"
                    assert err < 0.25, check
                ms, caches = time_step(step, params, caches, batch, args.iters)
                ms *= 1e3
            except Exception as e:  # noqa: BLE001 (a baseline that cannot run this case is reported)
                rows.append({"case": layout.name, "backend": name, "error": f"{type(e).__name__}: {e}"[:300]})
                print(f"  {layout.name:28s} {name:13s} FAILED {rows[-1]['error']}")
                continue
            finally:
                del caches
            rows.append({"case": layout.name, "backend": name, "tokens": layout.tokens, "ms": ms,
                         "tokens_per_s": layout.tokens / ms * 1e3, "check": check})
            print(f"  {layout.name:28s} {name:13s} {ms:9.3f} ms  {layout.tokens / ms * 1e3:12.0f} tok/s  {check}")
    result = {"config": args.config, "layers": cfg.num_layers, "device": device, "backend": jax.default_backend(),
              "jax": jax.__version__, "page_size": args.page_size, "iters": args.iters,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "rows": rows}
    print("\n| case | tokens | " + " | ".join(f"{b} ms" for b in backends) + " | ours vs best baseline |")
    print("|---|---|" + "---|" * len(backends) + "---|")
    for layout in layouts:
        got = {r["backend"]: r for r in rows if r["case"] == layout.name}
        cells = [f"{got[b]['ms']:.3f}" if "ms" in got.get(b, {}) else "n/a" for b in backends]
        base = [got[b]["ms"] for b in ("pallas+cudnn", "xla") if "ms" in got.get(b, {})]
        speed = f"{min(base) / got['ours']['ms']:.2f}x" if base and "ms" in got.get("ours", {}) else "n/a"
        print(f"| {layout.name} | {layout.tokens} | " + " | ".join(cells) + f" | {speed} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        try:
            import matplotlib  # noqa: PLC0415

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt  # noqa: PLC0415

            fig, ax = plt.subplots(figsize=(7, 3.5))
            width = 0.8 / len(backends)
            for i, b in enumerate(backends):
                ys = [next((r.get("ms", 0) for r in rows if r["case"] == lay.name and r["backend"] == b), 0)
                      for lay in layouts]
                ax.bar(np.arange(len(layouts)) + i * width, ys, width, label=b)
            ax.set_xticks(np.arange(len(layouts)) + 0.4 - width / 2, [lay.name for lay in layouts], fontsize=8)
            ax.set_ylabel("step time (ms)")
            ax.set_title(f"serving step, {args.config} x{cfg.num_layers} layers, {device}")
            ax.legend(fontsize=8)
            fig.tight_layout()
            fig.savefig(os.path.splitext(args.out)[0] + ".png", dpi=120)
        except ImportError:
            print("matplotlib not installed: no plot")
    return result


if __name__ == "__main__":
    main()
