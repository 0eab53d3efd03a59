"""The implementations `peers.py` compares: ours through the torch op (one kernel variant each) and
through `jax.jit`, FlashInfer's wrappers, and JAX's Pallas GPU decode. Importing this module sets
the environment those libraries read when they load (the in-tree package first on the path unless
XGK_TEST_INSTALLED=1, FlashInfer's arch list, JAX's preallocation, the library's plan log)."""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time

import numpy as np
import torch

import peers_timing as timing
from peers_timing import graph_timer, jax_timer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# The in-tree package, unless XGK_TEST_INSTALLED=1 asks for the installed wheel.
if os.environ.get("XGK_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "9.0a")
# JAX must not take most of the GPU's memory for itself: torch allocates the inputs.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# The library writes each plan it makes to stderr: the log then says what `auto` chose per cell
# and variant (each variant's settings reload clears the plan cache).
os.environ.setdefault("XGK_LOG_PLANS", "1")

MIX_WAYS = ("flashinfer-all", "flashinfer-split")  # mixed batches: one prefill wrapper; prefill + decode wrappers

# Each implementation's entries(inp, case) returns [(name, setup)], or raises Skip; setup() runs
# the implementation once and returns (out_rows_fn, timer, how, extra); run_case checks and times.

class Skip(Exception):
    """The implementation cannot express this case (the reason goes into the case's notes)."""


def to_jax(t):
    """A JAX array of t: bf16 on the GPU through dlpack (aliases t, which must outlive it), the
    rest through host memory."""
    import jax
    import jax.numpy as jnp
    if t.dtype == torch.bfloat16 and t.is_cuda:
        assert t.is_contiguous()
        return jax.dlpack.from_dlpack(t)
    if t.dtype.is_floating_point and t.element_size() == 1:  # fp8: through bytes
        return jnp.asarray(t.view(torch.uint8).cpu().numpy()).view(getattr(jnp, str(t.dtype).split(".")[1]))
    return jnp.asarray(t.float().cpu().numpy()).astype(jnp.bfloat16) if t.dtype == torch.bfloat16 \
        else jnp.asarray(t.cpu().numpy())


def from_jax(x):
    import jax.numpy as jnp
    return torch.from_numpy(np.asarray(x.astype(jnp.float32))).to("cuda")


# Variant options after the kernel's name: prefix -> the library's environment variable. Every
# variable is set on each selection (unset options empty: the library's default).
VARIANT_OPTIONS = {
    "h": "XGK_RPA_COPY_HINT",          # L2 copy hint: 1 a 256-byte prefetch, 0 none
    "ms": "XGK_RPA_MIN_SPLIT_TILES",   # fewest pipeline tiles per key split
    "mc": "XGK_RPA_MERGE_COST_KEYS",   # the split model's merge cost in keys
    "pp": "XGK_WS_SCHEDULE",           # warp-specialized consumers: 0 free, 1 ping-pong
    "ps": "XGK_WS_PERSISTENT",         # its persistent blocks: 0 one per pair, 1 snake, 2 dynamic
    "st": "XGK_RPA_STAGES",            # the pipelined kernel's K/V stages (2-8)
    "cl": "XGK_RPA_CLUSTER_MERGE",     # cluster merge of the splits: 0 off, 1 on
    "pb": "XGK_RPA_PLAN_BLOCKS",       # resident blocks per SM the split model plans with
    "fg": "XGK_RPA_FULL_GRID_SPLITS",  # 1: split grids whose unsplit rows fill the SMs (default 0: whole rows)
    "pm": "XGK_RPA_PIPE_MODE",         # pipelined copies: 0 block barrier per tile, 1 per key group
    "mm": "XGK_RPA_MERGE_MODE",        # split merge: 0 by split count, 1 loop, 2 groups, 3 merge blocks, 4 by capture
    "tp": "XGK_RPA_TABLE_PRELOAD",     # first tiles' page-table entries loaded with the row: 0 off, 1 on
    "kr": "XGK_RPA_KEY_ROWS",          # keys as mma rows (groups <= 8): 0 never, 1 16-bit KV, 2 fp8 too
    "da": "XGK_RPA_DECODE_APART",      # a mixed batch's decode rows in the decode kernel: 0 off, 1 on, 2 overlapped, 3 one launch
}


def select_kernel(kernel, options=None, programmatic=True):
    """Sets the variant for the calls that follow (the library reads these once, and again on
    `reload_settings`): `options` maps `VARIANT_OPTIONS` prefixes to values."""
    from xla_gpu_kernels import _capi
    options = options or {}
    os.environ["XGK_RPA_KERNEL"] = kernel
    os.environ["XGK_PDL"] = "1" if programmatic else "0"
    for prefix, var in VARIANT_OPTIONS.items():
        os.environ[var] = options.get(prefix, "")
    _capi.reload_settings()


class Ours:
    """Our torch op with one kernel variant: `auto`, `tiled`, `tiled-wgmma` (sm_90a), `pipelined`,
    `mma` or `general`, then options after colons: `nopdl` for launches without programmatic
    dependent launch (`XGK_PDL=0`), or a `VARIANT_OPTIONS` prefix with a number (`h<N>`, `ms<N>`,
    `mc<N>`, `pp<N>`, `ps<N>`, `st<N>`, `cl<N>`, `pb<N>`, `fg<N>`, `pm<N>`, `mm<N>`, `tp<N>`, `kr<N>`, `da<N>`: see the table for their
    variables). Example: `auto:ms1:nopdl`."""

    def __init__(self, variant):
        import xla_gpu_kernels.torch  # noqa: F401  (defines torch.ops.xla_gpu)
        self.name = f"ours-{variant}"
        self.kernel, *options = variant.split(":")
        self.programmatic, self.options = True, {}
        for opt in options:
            prefix = opt.rstrip("0123456789")
            if opt == "nopdl":
                self.programmatic = False
            elif prefix in VARIANT_OPTIONS and opt[len(prefix):]:
                self.options[prefix] = opt[len(prefix):]
            else:
                raise SystemExit(f"variant {variant!r}: unknown option {opt!r} (nopdl, or "
                                 + ", ".join(f"{p}<N>" for p in VARIANT_OPTIONS) + ")")

    def select(self):
        select_kernel(self.kernel, self.options, self.programmatic)

    def entries(self, inp, case):
        args = (inp.q, inp.kv, inp.kv_lens, inp.page_indices, inp.cu_q_lens, inp.num_seqs)
        kw = dict(sm_scale=inp.sm_scale, sliding_window=inp.window, soft_cap=inp.soft_cap, k_scale=inp.k_scale,
                  v_scale=inp.v_scale)
        run = lambda: torch.ops.xla_gpu.paged_attention(*args, **kw)  # noqa: E731

        def setup():
            self.select()
            out = run()
            torch.cuda.synchronize()
            timer, how, extra = graph_timer(run)  # a graph fixes the variant at capture; eager: select()
            call = lambda: (self.select(), run())  # noqa: E731
            return (lambda s: out[inp.cu_list[s]:inp.cu_list[s + 1]]), lambda: (self.select(), timer())[1], how, \
                {**extra, "_call": call}
        return [(self.name, setup)]

    def release(self):
        pass


class OursJax:
    name = "ours-jax"
    keep = None

    def entries(self, inp, case):
        import jax
        import xla_gpu_kernels.jax as xk

        def setup():
            select_kernel("auto")
            self.keep = (inp.q, inp.kv)  # the torch tensors JAX's arrays alias (dlpack) must outlive them
            args = [to_jax(t) for t in (inp.q, inp.kv, inp.kv_lens, inp.page_indices, inp.cu_q_lens, inp.num_seqs)]
            fn = jax.jit(functools.partial(xk.ragged_paged_attention, sm_scale=inp.sm_scale, sliding_window=inp.window,
                                           soft_cap=inp.soft_cap, k_scale=inp.k_scale, v_scale=inp.v_scale))
            out_t = from_jax(fn(*args))
            timer, how, extra = jax_timer(lambda: fn(*args))
            return (lambda s: out_t[inp.cu_list[s]:inp.cu_list[s + 1]]), \
                lambda: (select_kernel("auto"), timer())[1], how, extra
        return [(self.name, setup)]

    def release(self):
        self.keep = None


class FlashInfer:
    """Decode: `BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True)`; prefill:
    `BatchPrefillWithPagedKVCacheWrapper` (causal, bottom-right aligned as our contract); mixed
    batches both ways. NHD pages [P, page, Hkv, D]: contiguous copies of our pool's K and V. With
    CUDA graphs the wrappers plan into fixed buffers, so a captured run stays valid.

    How FlashInfer is timed (PEERS_FI_MODE):
    - "eager" (default): CUDA events around back-to-back eager calls (the host's cost counts where
      it exceeds the kernels'); every implementation's `kernel_us` (profiler) is the fair measure
      on cells that short.
    - "captured": wrappers built without `use_cuda_graph`, planned once, their run() captured in
      a CUDA graph like ours. Replays fault (`cudaErrorIllegalAddress`) on the H100 we measure on.
    - "graph-wrapper": `use_cuda_graph=True` wrappers captured (FlashInfer's serving mode). Replays
      fault with `cudaErrorInvalidAddressSpace`, FlashInfer alone in the process (FlashInfer
      0.6.18.post1, torch 2.11, driver 580; NOTES, 2026-11-23)."""
    name = "flashinfer"

    def __init__(self):
        import flashinfer
        self.fi = flashinfer
        self.workspace = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        self.kv_cache = None

    def release(self):
        self.kv_cache = None

    def _pages(self, inp):
        if self.kv_cache is None or self.kv_cache[0] is not inp:
            self.kv_cache = None  # free the previous copies first
            self.kv_cache = (inp, inp.kv[:, :, 0::2, :].contiguous(), inp.kv[:, :, 1::2, :].contiguous())
        return self.kv_cache[1], self.kv_cache[2]

    @staticmethod
    def _meta(inp, case, seqs):
        """indptr (pages), indices, last_page_len, qo_indptr of the sequences `seqs` (a range)."""
        dev = lambda x: torch.tensor(x, dtype=torch.int32, device="cuda")  # noqa: E731
        indptr, qo = [0], [0]
        for s in seqs:
            indptr.append(indptr[-1] + len(inp.seq_pages[s]))
            qo.append(qo[-1] + case.seqs[s][0])
        indices = torch.cat([inp.seq_pages[s] for s in seqs]).int().to("cuda")
        last = [(case.seqs[s][1] - 1) % inp.page + 1 for s in seqs]
        return dev(indptr), indices, dev(last), dev(qo)

    @staticmethod
    def _plan(plan):
        """Plans once (JIT-compiles on first use), then times 3 more plans (host work, synced)."""
        t0 = time.perf_counter()
        plan()
        first = time.perf_counter() - t0
        times = []
        for _ in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            plan()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e6)
        return {"plan_us": statistics.median(times), "first_plan_s": first}

    def _common(self, inp):
        kw = dict(q_data_type=inp.q.dtype, kv_data_type=inp.kv.dtype, sm_scale=inp.sm_scale)
        if inp.soft_cap:
            kw["logits_soft_cap"] = inp.soft_cap
        if inp.window:
            kw["window_left"] = inp.window - 1  # FlashInfer counts the keys left of the row's own
        scales = dict(k_scale=inp.k_scale, v_scale=inp.v_scale) if inp.k_scale is not None else {}
        return kw, scales

    def _decode(self, inp, case, seqs, q, out, graphs):
        indptr, indices, last, _ = self._meta(inp, case, seqs)
        bufs = (indptr.clone(), indices.clone(), last.clone()) if graphs else (None, None, None)
        w = self.fi.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, "NHD", use_cuda_graph=graphs, use_tensor_cores=True, paged_kv_indptr_buffer=bufs[0],
            paged_kv_indices_buffer=bufs[1], paged_kv_last_page_len_buffer=bufs[2])
        kw, scales = self._common(inp)
        info = self._plan(lambda: w.plan(indptr, indices, last, inp.hq, inp.hkv, inp.d, inp.page, **kw))
        k, v = self._pages(inp)
        return (lambda: w.run(q, (k, v), out=out, **scales)), info

    def _prefill(self, inp, case, seqs, q, out, graphs):
        indptr, indices, last, qo = self._meta(inp, case, seqs)
        bufs = (qo.clone(), indptr.clone(), indices.clone(), last.clone()) if graphs else (None,) * 4
        w = self.fi.BatchPrefillWithPagedKVCacheWrapper(
            self.workspace, "NHD", use_cuda_graph=graphs, qo_indptr_buf=bufs[0], paged_kv_indptr_buf=bufs[1],
            paged_kv_indices_buf=bufs[2], paged_kv_last_page_len_buf=bufs[3])
        kw, scales = self._common(inp)
        info = self._plan(lambda: w.plan(qo, indptr, indices, last, inp.hq, inp.hkv, inp.d, inp.page, causal=True,
                                         **kw))
        k, v = self._pages(inp)
        return (lambda: w.run(q, (k, v), out=out, **scales)), info

    def _setup(self, inp, case, split):
        out = torch.empty_like(inp.q)
        n = len(case.seqs)
        mode = os.environ.get("PEERS_FI_MODE", "eager")
        if mode not in ("captured", "graph-wrapper", "eager"):
            raise SystemExit(f"PEERS_FI_MODE={mode!r}: expected captured, graph-wrapper or eager")
        capture = timing.USE_GRAPHS and mode != "eager"
        graphs = capture and mode == "graph-wrapper"  # the wrappers' own CUDA-graph mode
        if not split:
            run, info = (self._decode if case.decode else self._prefill)(inp, case, range(n), inp.q, out, graphs)
        else:  # prefill wrapper over the prefill rows, decode wrapper over the decode rows after them
            p = sum(1 for q, _ in case.seqs if q > 1)
            if any(q == 1 for q, _ in case.seqs[:p]):
                raise Skip("decode rows between prefill rows")
            rows = inp.cu_list[p]
            run_p, info_p = self._prefill(inp, case, range(p), inp.q[:rows], out[:rows], graphs)
            run_d, info_d = self._decode(inp, case, range(p, n), inp.q[rows:], out[rows:], graphs)
            run = lambda: (run_p(), run_d())  # noqa: E731
            info = {"plan_us": info_p["plan_us"] + info_d["plan_us"],
                    "first_plan_s": info_p["first_plan_s"] + info_d["first_plan_s"]}
        out.fill_(float("nan"))  # poisoned: a row the run does not write fails the check
        run()
        torch.cuda.synchronize()
        timer, how, extra = graph_timer(run, capture)
        how += f"; plan not timed; PEERS_FI_MODE={mode}"
        return (lambda s: out[inp.cu_list[s]:inp.cu_list[s + 1]]), timer, how, {**extra, **info, "_call": run}

    def entries(self, inp, case):
        if case.kind != "mixed":
            return [(self.name, lambda: self._setup(inp, case, False))]
        return [(MIX_WAYS[0], lambda: self._setup(inp, case, False)),
                (MIX_WAYS[1], lambda: self._setup(inp, case, True))]


class PallasDecode:
    name = "jax-pallas"
    keep = None

    def release(self):
        self.keep = None

    def entries(self, inp, case):
        if not case.decode:
            raise Skip("decode only")
        if inp.window or inp.soft_cap or inp.kv.dtype != torch.bfloat16:
            raise Skip("run without sliding window, soft cap (not passed here) or scaled fp8 KV")
        import jax
        from jax.experimental.pallas.ops.gpu.paged_attention import paged_attention

        def setup():
            # Layout [kv_heads, pages, page_size, dim]; q pre-scaled (no sm_scale argument). The torch
            # tensors JAX's arrays alias (dlpack) must live as long as the timer.
            self.keep = (inp.kv[:, :, 0::2, :].permute(2, 0, 1, 3).contiguous(),
                         inp.kv[:, :, 1::2, :].permute(2, 0, 1, 3).contiguous(), (inp.q * inp.sm_scale).contiguous())
            k, v, q = (to_jax(t) for t in self.keep)
            lengths, table = to_jax(inp.kv_lens), to_jax(inp.page_indices)
            # pages_per_seq must divide into k_splits partitions of whole compute blocks.
            ppcb = 8 if inp.pages_per_seq % 8 == 0 else 1
            k_splits = next((s for s in (16, 8, 4, 2) if inp.pages_per_seq % (s * ppcb) == 0), 1)
            kw = dict(k_splits=k_splits, pages_per_compute_block=ppcb)
            fn = jax.jit(functools.partial(paged_attention, **kw))
            out_t = from_jax(fn(q, k, v, table, lengths))
            timer, how, extra = jax_timer(lambda: fn(q, k, v, table, lengths))
            return (lambda s: out_t[s:s + 1]), timer, how, {**extra, **kw}
        return [(self.name, setup)]

