"""Ragged paged attention, ours against every peer available on the GPU machine, side by side.

One process, one GPU, the same inputs for every implementation:
- ours through the torch op (`torch.ops.xla_gpu.paged_attention`, CUDA events), once per kernel
  variant (`--variants`, set through `XGK_RPA_KERNEL`), and through `jax.jit` ("ours-jax");
- FlashInfer's tensor-core batch decode (`BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True)`,
  NHD pages, `plan` outside the timing), when its wheels are importable;
- JAX's Pallas GPU `paged_attention` (decode only; pages `[kv_heads, pages, page_size, dim]`, q
  pre-scaled).

Every implementation is checked against a float32 reference (up to 4 sampled sequences per case)
before it is timed; a failing one is reported and not timed. Timing: CUDA events around replays of
a CUDA graph of 10 calls (torch implementations: the kernels' time, no host cost per call), or
wall clock over back-to-back jitted calls (JAX: includes JAX's dispatch, ~35 µs a call); warm-up
first, 3 rounds in alternating order, medians with p10/p90. The KV pool holds at least 512 MiB
(far above L2) with pages handed out in random order; inputs are uniform random, never zeros. The
copy bandwidth is measured in the same run; each case reports its fewest bytes
(`2·Σkv_len·kv_heads·dim·sizeof(kv) + tokens·q_heads·dim·(sizeof(q)+sizeof(out))`) over the time.

    python3 benchmarks/peers.py --suite decode [--variants auto,mma] [--quick] [--out FILE.json]

Writes FILE.json and FILE.png (default `benchmarks/results/peers-<suite>-<gpu>-<date>.*`) and
prints a table last. `benchmarks/peers_table.py FILE.json` renders the Markdown table.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field

import numpy as np
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "9.0a")
# JAX must not take most of the GPU's memory for itself: torch allocates the inputs.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

GEOMETRIES = {  # q heads, kv heads, head dim, soft cap, sliding window
    "G1": (32, 8, 128, None, None),
    "G2": (64, 8, 128, None, None),
    "G3": (32, 32, 128, None, None),
    "G4": (16, 8, 256, 50.0, 4096),
}
MIN_POOL_BYTES = 512 << 20
MAX_KV_BYTES = 20 << 30


@dataclass
class Case:
    name: str
    geometry: str
    seqs: list  # (q_len, kv_len)
    page: int = 16
    kv_dtype: str = "bfloat16"
    results: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    @property
    def decode(self):
        return all(q == 1 for q, _ in self.seqs)


def kv_elem_bytes(case):
    return 1 if case.kv_dtype.startswith("float8") else 2


def bytes_min(case):
    """Fewest bytes a call must move: each visible key's K and V once (a sliding window bounds a
    decode row's keys), q read and the output written once."""
    hq, hkv, d, _, window = GEOMETRIES[case.geometry]
    visible = [min(kv_len, window) if (window and q == 1) else kv_len for q, kv_len in case.seqs]
    kv = sum(2 * n * hkv * d * kv_elem_bytes(case) for n in visible)
    tokens = sum(q for q, _ in case.seqs)
    return kv + tokens * hq * d * 4


def causal_flops(case):
    hq, _, d, _, _ = GEOMETRIES[case.geometry]
    return 4 * hq * d * sum(q * kv - q * (q - 1) / 2 for q, kv in case.seqs)


def suite_cases(suite, quick, geometry):
    cases = []
    if suite in ("decode", "all"):
        batches = (1, 16, 64) if quick else (1, 4, 16, 64, 256)
        contexts = (2048, 32768) if quick else (512, 2048, 8192, 32768)
        for b in batches:
            for ctx in contexts:
                c = Case(f"{geometry} decode {b}x{ctx}", geometry, [(1, ctx)] * b)
                if bytes_min(c) <= MAX_KV_BYTES:
                    cases.append(c)
        for b, ctx in ((32, 4096), (128, 2048)):  # the cells
            if not quick:
                cases.append(Case(f"{geometry} decode {b}x{ctx}", geometry, [(1, ctx)] * b))
    if suite in ("uneven", "all"):
        rng = np.random.default_rng(0)
        lens = rng.integers(256, 16384 + 1, 64)
        cases.append(Case(f"{geometry} uneven uniform[256,16k] B64", geometry, [(1, int(x)) for x in lens]))
        rng = np.random.default_rng(1)
        # Zipf (a = 1.2) over [64, 32k]: 64 * zipf draws, clipped.
        z = np.clip(64 * rng.zipf(1.2, 64), 64, 32768)
        cases.append(Case(f"{geometry} uneven zipf[64,32k] B64", geometry, [(1, int(x)) for x in z]))
    if suite in ("pages", "all"):
        for page in (1, 8, 16, 32, 64, 128, 256):
            for b, ctx in ((32, 4096), (1, 32768)):
                cases.append(Case(f"{geometry} decode {b}x{ctx} page{page}", geometry, [(1, ctx)] * b, page=page))
    if suite in ("features", "all"):
        for g in ("G2", "G3", "G4"):
            for b, ctx in ((32, 4096), (64, 8192)):
                cases.append(Case(f"{g} decode {b}x{ctx}", g, [(1, ctx)] * b))
        for b, ctx in ((32, 4096), (64, 8192), (1, 32768)):
            for kvd in ("float8_e4m3fn",):
                cases.append(Case(f"{geometry} decode {b}x{ctx} {kvd}", geometry, [(1, ctx)] * b, kv_dtype=kvd))
                cases.append(Case(f"{geometry} decode {b}x{ctx} bf16 (fp8 control)", geometry, [(1, ctx)] * b))
    if suite in ("prefill", "all"):
        for name, seqs in (("prefill 1x2048", [(2048, 2048)]), ("prefill 4x1024", [(1024, 1024)] * 4),
                           ("chunked 8x512 over 4k", [(512, 4096)] * 8),
                           ("mix 4q256s2k + 124 decode", [(256, 2048)] * 4 + [(1, 1024 + 24 * i) for i in range(124)])):
            cases.append(Case(f"{geometry} {name}", geometry, seqs))
    return cases


# ---------------------------------------------------------------- inputs and reference

class Inputs:
    """One case's tensors (torch, on the GPU) in our layout, plus the peers' layouts on demand."""

    def __init__(self, case, seed):
        hq, hkv, d, soft_cap, window = GEOMETRIES[case.geometry]
        self.hq, self.hkv, self.d, self.soft_cap, self.window = hq, hkv, d, soft_cap, window
        g = torch.Generator(device="cuda").manual_seed(seed)
        page = case.page
        self.page = page
        self.pages_per_seq = max(-(-kv // page) for _, kv in case.seqs)
        used = sum(-(-kv // page) for _, kv in case.seqs)
        token_bytes = 2 * hkv * d * kv_elem_bytes(case)
        total_pages = max(used, -(-MIN_POOL_BYTES // (token_bytes * page)))
        self.total_pages = total_pages
        kv = torch.empty((total_pages, page, 2 * hkv, d), dtype=torch.bfloat16, device="cuda")
        kv.uniform_(-1, 1, generator=g)
        self.kv_dtype = getattr(torch, case.kv_dtype)
        self.kv = kv if self.kv_dtype == torch.bfloat16 else (kv * 4).to(self.kv_dtype)
        del kv
        self.k_scale = self.v_scale = None
        if self.kv_dtype != torch.bfloat16:
            self.k_scale, self.v_scale = 0.5, 0.75
        perm = torch.randperm(total_pages, generator=torch.Generator().manual_seed(seed))
        num = len(case.seqs)
        table = torch.zeros((num, self.pages_per_seq), dtype=torch.int32)
        nxt = 0
        self.seq_pages = []
        for i, (_, kv_len) in enumerate(case.seqs):
            n = -(-kv_len // page)
            table[i, :n] = perm[nxt:nxt + n]
            self.seq_pages.append(perm[nxt:nxt + n].clone())
            nxt += n
        self.page_indices = table.cuda()
        self.kv_lens = torch.tensor([kv for _, kv in case.seqs], dtype=torch.int32, device="cuda")
        cu = [0]
        for q, _ in case.seqs:
            cu.append(cu[-1] + q)
        self.cu_list = cu
        self.cu_q_lens = torch.tensor(cu, dtype=torch.int32, device="cuda")
        self.num_seqs = torch.tensor([num], dtype=torch.int32, device="cuda")
        self.tokens = cu[-1]
        self.q = torch.empty((self.tokens, hq, d), dtype=torch.bfloat16, device="cuda").uniform_(-1, 1, generator=g)
        self.sm_scale = d ** -0.5

    def kv_float(self, half):
        """K (half 0) or V (half 1) as float32 pages [P, page, hkv, d], scaled."""
        x = self.kv[:, :, half::2, :].float()
        scale = self.k_scale if half == 0 else self.v_scale
        return x * scale if scale is not None else x


def reference(inp, case, seq):
    """float32 attention of one sequence: [q_len, hq, d]."""
    q_len, kv_len = case.seqs[seq]
    pages = inp.seq_pages[seq].cuda().long()
    k = inp.kv[pages, :, 0::2, :].float().reshape(-1, inp.hkv, inp.d)[:kv_len]
    v = inp.kv[pages, :, 1::2, :].float().reshape(-1, inp.hkv, inp.d)[:kv_len]
    if inp.k_scale is not None:
        k, v = k * inp.k_scale, v * inp.v_scale
    q = inp.q[inp.cu_list[seq]:inp.cu_list[seq + 1]].float()
    group = inp.hq // inp.hkv
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    logits = torch.einsum("qhd,khd->hqk", q, k) * inp.sm_scale
    if inp.soft_cap:
        logits = inp.soft_cap * torch.tanh(logits / inp.soft_cap)
    pos = kv_len - q_len + torch.arange(q_len, device="cuda")[:, None]
    j = torch.arange(kv_len, device="cuda")[None, :]
    mask = j <= pos
    if inp.window:
        mask &= j > pos - inp.window
    logits = logits.masked_fill(~mask[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(logits, dim=-1), v)


def check(inp, case, out_rows_fn):
    """Max rel L2 error over up to 4 sampled sequences; out_rows_fn(seq) -> [q_len, hq, d] tensor."""
    n = len(case.seqs)
    picks = sorted(set([0, n - 1, n // 2, n // 3]))[:4]
    worst = 0.0
    for s in picks:
        ref = reference(inp, case, s)
        got = out_rows_fn(s).float()
        if not torch.isfinite(got).all():
            return float("inf")
        worst = max(worst, ((got - ref).norm() / ref.norm().clamp_min(1e-12)).item())
    return worst


# ---------------------------------------------------------------- implementations

def time_cuda(fn, warmup=5, iters=30):
    """Per-call CUDA-event times of eager calls (includes the host's per-call cost when it exceeds
    the kernel's: the GPU then waits for the launch)."""
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]


GRAPH_CALLS = 10
USE_GRAPHS = True


def graph_timer(fn):
    """Captures GRAPH_CALLS calls of `fn` in a CUDA graph; the returned timer gives per-call times of
    graph replays (the kernels' time, without the host's per-call cost). With --eager: per-call
    CUDA-event times of eager calls."""
    if not USE_GRAPHS:
        return lambda: time_cuda(fn)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_CALLS):
            fn()
    return lambda: [t / GRAPH_CALLS for t in time_cuda(graph.replay, warmup=2, iters=10)]


def time_jax(fn, warmup=3, iters=30):
    out = None
    for _ in range(warmup):
        out = fn()
    out.block_until_ready()
    samples = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(iters // 3):
            out = fn()
        out.block_until_ready()
        samples += [(time.perf_counter() - t0) / (iters // 3) * 1e6] * (iters // 3)
    return samples


class Ours:
    """Our torch op with one kernel variant: `auto`, `pipelined`, `mma` or `general`, optionally
    `:h<N>` for the pipelined kernel's L2 copy hints (`XGK_RPA_COPY_HINT`)."""

    def __init__(self, variant):
        import xla_gpu_kernels.torch  # noqa: F401  (defines torch.ops.xla_gpu)
        self.name = f"ours-{variant}"
        self.kernel, _, hint = variant.partition(":h")
        self.hint = hint or "1"  # the library's default

    def prepare(self, inp, case):
        os.environ["XGK_RPA_KERNEL"] = self.kernel
        os.environ["XGK_RPA_COPY_HINT"] = self.hint
        args = (inp.q, inp.kv, inp.kv_lens, inp.page_indices, inp.cu_q_lens, inp.num_seqs)
        kw = dict(sm_scale=inp.sm_scale, sliding_window=inp.window, soft_cap=inp.soft_cap, k_scale=inp.k_scale,
                  v_scale=inp.v_scale)
        run = lambda: torch.ops.xla_gpu.paged_attention(*args, **kw)  # noqa: E731
        out = run()
        torch.cuda.synchronize()
        err = check(inp, case, lambda s: out[inp.cu_list[s]:inp.cu_list[s + 1]])
        replay = graph_timer(run)  # the kernel variant is fixed at capture
        return err, replay, "CUDA graph replay (CUDA events)"


class OursJax:
    name = "ours-jax"

    def prepare(self, inp, case):
        import jax
        import jax.numpy as jnp
        import xla_gpu_kernels.jax as xk
        os.environ["XGK_RPA_KERNEL"], os.environ["XGK_RPA_COPY_HINT"] = "auto", "1"
        conv = lambda t: jnp.asarray(t.cpu().numpy()) if t.dtype != torch.bfloat16 else jax.dlpack.from_dlpack(t)  # noqa: E731
        kv = jax.dlpack.from_dlpack(inp.kv) if inp.kv.dtype == torch.bfloat16 else \
            jnp.asarray(inp.kv.view(torch.uint8).cpu().numpy()).view(jnp.float8_e4m3fn)
        args = [conv(inp.q), kv] + [jnp.asarray(t.cpu().numpy()) for t in
                                    (inp.kv_lens, inp.page_indices, inp.cu_q_lens, inp.num_seqs)]
        fn = jax.jit(functools.partial(xk.ragged_paged_attention, sm_scale=inp.sm_scale, sliding_window=inp.window,
                                       soft_cap=inp.soft_cap, k_scale=inp.k_scale, v_scale=inp.v_scale))
        self.keep = (inp.q, inp.kv)  # the torch tensors JAX's arrays alias (dlpack) must outlive them
        out = fn(*args)
        out_t = torch.from_numpy(np.asarray(out.astype(jnp.float32))).cuda()
        err = check(inp, case, lambda s: out_t[inp.cu_list[s]:inp.cu_list[s + 1]])
        return err, lambda: time_jax(lambda: fn(*args)), "wall clock, includes JAX dispatch"


class FlashInferDecode:
    name = "flashinfer"

    def __init__(self):
        import flashinfer
        self.fi = flashinfer
        self.workspace = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def prepare(self, inp, case):
        if not case.decode:
            return None
        k = inp.kv[:, :, 0::2, :].contiguous()
        v = inp.kv[:, :, 1::2, :].contiguous()
        indptr = [0]
        for p in inp.seq_pages:
            indptr.append(indptr[-1] + len(p))
        indices = torch.cat(inp.seq_pages).int().cuda()
        last = torch.tensor([(kv - 1) % inp.page + 1 for _, kv in case.seqs], dtype=torch.int32, device="cuda")
        indptr_t = torch.tensor(indptr, dtype=torch.int32, device="cuda")
        # use_cuda_graph: plan writes into these fixed buffers, so a captured run stays valid.
        w = self.fi.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, "NHD", use_cuda_graph=USE_GRAPHS, use_tensor_cores=True,
            paged_kv_indptr_buffer=indptr_t if USE_GRAPHS else None,
            paged_kv_indices_buffer=indices if USE_GRAPHS else None,
            paged_kv_last_page_len_buffer=last if USE_GRAPHS else None)
        extra = {}
        if inp.soft_cap:
            extra["logits_soft_cap"] = inp.soft_cap
        if inp.window:
            extra["window_left"] = inp.window - 1
        w.plan(indptr_t, indices, last, inp.hq, inp.hkv, inp.d, inp.page,
               q_data_type=torch.bfloat16, kv_data_type=inp.kv.dtype, sm_scale=inp.sm_scale, **extra)
        kw = {}
        if inp.k_scale is not None:
            kw = dict(k_scale=inp.k_scale, v_scale=inp.v_scale)
        run = lambda: w.run(inp.q, (k, v), **kw)  # noqa: E731
        out = run()
        torch.cuda.synchronize()
        err = check(inp, case, lambda s: out[s:s + 1])
        return err, graph_timer(run), "CUDA graph replay (CUDA events; plan not timed)"


class PallasDecode:
    name = "jax-pallas"

    def prepare(self, inp, case):
        if not case.decode or inp.soft_cap or inp.window or inp.kv.dtype != torch.bfloat16:
            return None
        import jax
        import jax.numpy as jnp
        from jax.experimental.pallas.ops.gpu.paged_attention import paged_attention
        # Keep the torch tensors JAX's arrays alias (dlpack) alive as long as the timer is.
        self.keep = (inp.kv[:, :, 0::2, :].permute(2, 0, 1, 3).contiguous(),
                     inp.kv[:, :, 1::2, :].permute(2, 0, 1, 3).contiguous(), (inp.q * inp.sm_scale).contiguous())
        k, v, q = (jax.dlpack.from_dlpack(t) for t in self.keep)
        lengths = jnp.asarray(inp.kv_lens.cpu().numpy())
        ppcb = 8 if inp.pages_per_seq % 8 == 0 else 1
        k_splits = 1
        for s in (16, 8, 4, 2):
            if inp.pages_per_seq % (s * ppcb) == 0:
                k_splits = s
                break
        table = jnp.asarray(inp.page_indices.cpu().numpy())
        fn = jax.jit(functools.partial(paged_attention, k_splits=k_splits, pages_per_compute_block=ppcb))
        out = fn(q, k, v, table, lengths)
        out_t = torch.from_numpy(np.asarray(out.astype(jnp.float32))).cuda()
        err = check(inp, case, lambda s: out_t[s:s + 1])
        return err, lambda: time_jax(lambda: fn(q, k, v, table, lengths)), "wall clock, includes JAX dispatch"


# ---------------------------------------------------------------- driver

def copy_bandwidth():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
    b = torch.empty_like(a)
    t = statistics.median(time_cuda(lambda: b.copy_(a), iters=20))
    del a, b
    return 2 * n / (t * 1e-6) / 1e9


def versions():
    out = {"torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        import jax
        out["jax"] = jax.__version__
    except Exception:  # noqa: BLE001
        pass
    try:
        import flashinfer
        out["flashinfer"] = flashinfer.__version__
    except Exception as e:  # noqa: BLE001
        out["flashinfer"] = f"unavailable: {type(e).__name__}: {e}"
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="decode", choices=["decode", "uneven", "pages", "features", "prefill", "all"])
    ap.add_argument("--geometry", default="G1", choices=list(GEOMETRIES))
    ap.add_argument("--variants", default="auto")
    ap.add_argument("--no-jax", action="store_true", help="skip ours-jax and Pallas")
    ap.add_argument("--no-flashinfer", action="store_true")
    ap.add_argument("--only-jax", action="store_true",
                    help="only ours-jax and Pallas (JAX timing; run apart from the CUDA-graph timing of the torch "
                         "implementations: both in one process faulted on an H100, cause not established)")
    ap.add_argument("--eager", action="store_true", help="time eager calls (CUDA events per call), no graphs")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().splitlines()[0]
    impls = [] if args.only_jax else [Ours(v) for v in args.variants.split(",")]
    notes = []
    global USE_GRAPHS
    USE_GRAPHS = not args.eager
    try:
        if not args.no_flashinfer and not args.only_jax:
            impls.append(FlashInferDecode())
    except Exception as e:  # noqa: BLE001
        notes.append(f"flashinfer skipped: {type(e).__name__}: {e}")
    if not args.no_jax:
        impls += [OursJax(), PallasDecode()]
    copy_gbs = copy_bandwidth()
    print(f"{gpu}; copy bandwidth {copy_gbs:.0f} GB/s; {notes}", flush=True)

    cases = suite_cases(args.suite, args.quick, args.geometry)
    date = datetime.date.today().isoformat()
    tag = gpu.split(",")[0].replace("NVIDIA ", "").replace(" ", "-")
    out = args.out or os.path.join(ROOT, "benchmarks", "results", f"peers-{args.suite}-{args.geometry}-{tag}-{date}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)

    def write():
        result = {"gpu": gpu, "date": date, "versions": versions(), "copy_GBps": copy_gbs, "notes": notes,
                  "protocol": __doc__.split("\n\n")[1], "cases": [
                      {"name": c.name, "geometry": c.geometry, "page_size": c.page, "kv_dtype": c.kv_dtype,
                       "seqs": len(c.seqs), "sum_kv": sum(k for _, k in c.seqs), "tokens": sum(q for q, _ in c.seqs),
                       "bytes_min": bytes_min(c), "causal_flops": causal_flops(c), "notes": c.notes,
                       "results": c.results}
                      for c in cases if c.results or c.notes]}
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
        return result

    for ci, case in enumerate(cases):
        run_case(case, ci, impls, copy_gbs)
        write()  # after every case: a run cut short still leaves its results
    result = write()
    plot(result, out[:-5] + ".png")
    from peers_table import markdown  # noqa: E402  (same folder)
    print(markdown(result))
    print(f"wrote {out}")


def run_case(case, ci, impls, copy_gbs):
    """Checks every implementation on one case, then times those that passed."""
    free, _ = torch.cuda.mem_get_info()
    if 3.5 * bytes_min(case) > free:
        case.notes.append(f"skipped: needs ~{3.5 * bytes_min(case) / 2**30:.1f} GiB with the peers' copies")
        print(f"[{case.name}] {case.notes[-1]}", flush=True)
        return
    inp = Inputs(case, seed=ci)
    timers = {}
    for impl in impls:
        try:
            prepared = impl.prepare(inp, case)
        except Exception as e:  # noqa: BLE001
            case.results[impl.name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"[{case.name}] {impl.name} failed: {e}", flush=True)
            traceback.print_exc(limit=2)
            continue
        if prepared is None:
            continue
        err, timer, how = prepared
        tol = 3e-2 if inp.kv.dtype != torch.bfloat16 else 2e-2
        case.results[impl.name] = {"rel_l2_error": err, "timing": how, "samples": []}
        if not err <= tol:
            case.results[impl.name]["error"] = f"rel L2 error {err:.3g} > {tol}"
            print(f"[{case.name}] {impl.name} WRONG: rel L2 {err:.3g}", flush=True)
            continue
        timers[impl.name] = timer
    names = list(timers)
    for r in range(3):  # rounds in alternating order
        for name in (names if r % 2 == 0 else names[::-1]):
            try:
                case.results[name]["samples"] += timers[name]()
            except Exception as e:  # noqa: BLE001
                case.results[name]["error"] = f"{type(e).__name__}: {e}"
    bmin, flops = bytes_min(case), causal_flops(case)
    for name, res in case.results.items():
        s = res.pop("samples", [])
        if not s or "error" in res:
            continue
        med = statistics.median(s)
        res.update(median_us=med, p10_us=float(np.percentile(s, 10)), p90_us=float(np.percentile(s, 90)),
                   GBps=bmin / med / 1e3, copy_fraction=bmin / med / 1e3 / copy_gbs, TFLOPs=flops / med / 1e6)
    peers = [r["median_us"] for n, r in case.results.items() if not n.startswith("ours") and "median_us" in r]
    for name, res in case.results.items():
        if "median_us" in res and peers:
            res["speed_vs_fastest_peer"] = min(peers) / res["median_us"]
    line = "  ".join(f"{n} {r['median_us']:.1f}" if "median_us" in r else f"{n} ERR" for n, r in case.results.items())
    print(f"[{case.name}] {line}", flush=True)
    del inp, timers
    torch.cuda.empty_cache()


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cases = [c for c in result["cases"] if c["results"]]
    names = sorted({n for c in cases for n, r in c["results"].items() if "median_us" in r})
    if not cases or not names:
        return
    fig, ax = plt.subplots(figsize=(max(8, len(cases) * 0.7), 5))
    width = 0.8 / len(names)
    for i, n in enumerate(names):
        ys = [c["results"].get(n, {}).get("copy_fraction", 0) * 100 for c in cases]
        ax.bar([x + i * width for x in range(len(cases))], ys, width, label=n)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(cases))])
    ax.set_xticklabels([c["name"] for c in cases], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("% of copy bandwidth (higher is faster)")
    ax.set_title(f"{result['gpu']} — copy {result['copy_GBps']:.0f} GB/s — {result['date']}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
