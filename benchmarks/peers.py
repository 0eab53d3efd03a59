"""Ragged paged attention, ours against every peer available on the GPU machine, side by side.

One process, one GPU, the same inputs for every implementation: ours through the torch op
(`torch.ops.xla_gpu.paged_attention`) once per kernel variant (`--variants`, set through
`XGK_RPA_KERNEL`) and through `jax.jit` ("ours-jax", variant auto); FlashInfer (tensor-core batch
decode for decode cases, `BatchPrefillWithPagedKVCacheWrapper` for prefill cases, and both ways
for mixed batches: one prefill wrapper over all rows, or prefill + decode wrappers, the faster
reported as "flashinfer"; `plan` timed apart); JAX's Pallas GPU `paged_attention` (decode only).
Every implementation is checked against a float32 reference (up to 4 sampled sequences a case, up
to 256 sampled rows a sequence) before it is timed; a failing one is reported and not timed
(`PEERS_TIME_WRONG=1` times it anyway, for experiment builds that skip part of the work).
Timing: CUDA events around replays of a CUDA graph of 10 calls (1 call when a call takes over a
millisecond; torch implementations: the kernels' time, no host cost per call; `--eager`: events
around each eager call), or wall clock over back-to-back jitted calls (JAX: includes JAX's
dispatch); warm-up first, 3 rounds in alternating order, >= 30 samples (fewer, counted, when a
call is so long that 10 would take over 2 s), medians with p10/p90. The KV pool holds at least
512 MiB (far above L2) with pages handed out in random order; inputs are uniform random, never
zeros. The copy bandwidth is measured in the same run; each case reports its fewest bytes
(`2·Σvisible_kv·kv_heads·dim·sizeof(kv) + tokens·q_heads·dim·(sizeof(q)+sizeof(out))`) over the
time, and causal TFLOP/s (`4·q_heads·dim·Σ visible keys per row`). With `--cold-l2` every timed
call is eager and finds the L2 cold (a read of twice its size before each, then a spin kernel that
hides the host's cost per call), for every implementation alike; the default replays the same
call, whose small cells then find their KV in L2 after the first.

    python3 benchmarks/peers.py --suite decode|uneven|pages|features|prefill|short|mixes|mixparts|all
        [--geometry G1..G6] [--kv-dtype bfloat16|float8_e4m3fn|float8_e5m2]
        [--variants auto,general,mma,pipelined] [--quick] [--no-jax | --only-jax] [--out FILE.json]
        [--cells 1x16384,1x32768:float8_e4m3fn]  (decode cells in place of the suite's)

Writes FILE.json and FILE.png (default `benchmarks/runs/peers-<suite>-<geometry>-<gpu>-<date>.*`)
and prints a table last. `benchmarks/peers_table.py FILE.json` renders the Markdown table.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
# The in-tree package, unless XGK_TEST_INSTALLED=1 asks for the installed wheel.
if os.environ.get("XGK_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)
import peers_table  # noqa: E402  (benchmarks/, on the path above)

os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "9.0a")
# JAX must not take most of the GPU's memory for itself: torch allocates the inputs.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# The library writes each plan it makes to stderr: the log then says what `auto` chose per cell
# and variant (each variant's settings reload clears the plan cache).
os.environ.setdefault("XGK_LOG_PLANS", "1")

GEOMETRIES = {  # q heads, kv heads, head dim, soft cap, sliding window
    "G1": (32, 8, 128, None, None),
    "G2": (64, 8, 128, None, None),
    "G3": (32, 32, 128, None, None),
    "G4": (16, 8, 256, 50.0, 4096),
    "G5": (32, 8, 64, None, None),     # head_dim 64
    "G6": (16, 8, 256, None, None),    # head_dim 256, no window or cap
}
DEVICE = "cuda"  # the self-tests on a CPU machine set "cpu" (inputs and reference only)
MIN_POOL_BYTES = 512 << 20
MAX_KV_BYTES = 20 << 30
CHECK_SEQS, CHECK_ROWS = 4, 256  # reference: sampled sequences a case, rows a sequence
ROUND_BUDGET_US = 2e6  # a round of one implementation aims at no more than this
GRAPH_CALLS = 10
USE_GRAPHS = True
# --cold-l2: every timed call finds the L2 cold (time_cold), as in a model whose layers each read
# their own KV; warm (the default) replays the same call, whose small cells then read an L2-resident
# KV after the first.
COLD_L2 = False
# Cycles of the spin kernel before each cold call (~200 µs at H100/H200 clocks): longer than any
# implementation's host cost per call, so the call is enqueued before the GPU reaches it.
COLD_SPIN_CYCLES = 400_000
# Also record each torch implementation's device busy time per call (profiler; --no-kernel-time).
KERNEL_TIME = True
MIX_WAYS = ("flashinfer-all", "flashinfer-split")  # mixed batches: one prefill wrapper; prefill + decode wrappers


@dataclass
class Case:
    name: str
    geometry: str
    seqs: list  # (q_len, kv_len), prefill rows first in mixed batches
    page: int = 16
    kv_dtype: str = "bfloat16"
    results: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    @property
    def kind(self):
        decode = [q == 1 for q, _ in self.seqs]
        return "decode" if all(decode) else "prefill" if not any(decode) else "mixed"

    @property
    def decode(self):
        return self.kind == "decode"


def kv_elem_bytes(case):
    return 1 if case.kv_dtype.startswith("float8") else 2


def visible_keys(q_len, kv_len, window):
    """Keys the rows of one sequence see in total: row r at position p = kv_len - q_len + r sees
    keys max(0, p - window + 1) ..= p."""
    pos = np.arange(kv_len - q_len, kv_len, dtype=np.int64)
    return int(np.minimum(pos + 1, window).sum()) if window else int((pos + 1).sum())


def bytes_min(case):
    """Fewest bytes a call must move: each key some row sees, K and V once (a sliding window bounds
    a decode row's keys), q read and the output written once."""
    hq, hkv, d, _, window = GEOMETRIES[case.geometry]
    keys = [min(kv_len, window) if (window and q == 1) else kv_len for q, kv_len in case.seqs]
    kv = sum(2 * n * hkv * d * kv_elem_bytes(case) for n in keys)
    tokens = sum(q for q, _ in case.seqs)
    return kv + tokens * hq * d * 4  # bf16 q and output


def causal_flops(case):
    """4·q_heads·dim per visible (row, key) pair; without a window Σ_i q_i·kv_i − q_i(q_i−1)/2."""
    hq, _, d, _, window = GEOMETRIES[case.geometry]
    return 4 * hq * d * sum(visible_keys(q, kv, window) for q, kv in case.seqs)


def decode_cell(spec, geometry):
    """A decode cell from `BxCTX[:KV_DTYPE]` (`--cells`): B rows of CTX keys each."""
    shape, _, kv_dtype = spec.partition(":")
    b, ctx = (int(x) for x in shape.split("x"))
    kv_dtype = kv_dtype or "bfloat16"
    suffix = "" if kv_dtype == "bfloat16" else f" {kv_dtype}"
    return Case(f"{geometry} decode {b}x{ctx}{suffix}", geometry, [(1, ctx)] * b, kv_dtype=kv_dtype)


def _mixes():
    """The prefill suite's engine-step mixes (name, seqs): prefill rows first, then decode rows."""
    rng = np.random.default_rng(2)
    mix16 = [(128, int(x)) for x in rng.integers(2048, 8192 + 1, 16)] + \
            [(1, int(x)) for x in rng.integers(2048, 8192 + 1, 240)]
    return (("mix 4q256s2k + 124 decode s1k-4k", [(256, 2048)] * 4 + [(1, 1024 + 24 * i) for i in range(124)]),
            ("mix 16q128 + 240 decode s2k-8k", mix16))


MIXES = _mixes()


def suite_cases(suite, quick, geometry, kv_dtype="bfloat16"):
    """The benchmark matrix (shared/reference/benchmarks.md); cells over MAX_KV_BYTES are dropped.
    `kv_dtype` applies to the prefill, short and mixes suites (named in each cell)."""
    cases, dropped = [], []
    kvd = "" if kv_dtype == "bfloat16" else f" {kv_dtype}"
    if suite in ("decode", "all"):
        batches = (1, 16, 64) if quick else (1, 4, 16, 64, 256)
        contexts = (2048, 32768) if quick else (512, 2048, 8192, 32768)
        for b in batches:
            for ctx in contexts:
                cases.append(Case(f"{geometry} decode {b}x{ctx}", geometry, [(1, ctx)] * b))
        if not quick:
            for b, ctx in ((32, 4096), (128, 2048)):  # the cells
                cases.append(Case(f"{geometry} decode {b}x{ctx}", geometry, [(1, ctx)] * b))
    if suite in ("uneven", "all"):
        rng = np.random.default_rng(0)
        lens = rng.integers(256, 16384 + 1, 64)
        cases.append(Case(f"{geometry} uneven uniform[256,16k] B64", geometry, [(1, int(x)) for x in lens]))
        rng = np.random.default_rng(1)
        # Zipf (a = 1.2) over [64, 32k]: 64 * numpy zipf draws, clipped to [64, 32768].
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
        (mix4_name, mix4), (mix16_name, mix16) = MIXES
        prefill = [("prefill 1x2048", [(2048, 2048)]), ("prefill 4x1024", [(1024, 1024)] * 4),
                   ("prefill 1x8192", [(8192, 8192)]), ("prefill 1x32768", [(32768, 32768)]),
                   ("chunked 8x512 over 4k", [(512, 4096)] * 8),
                   (mix4_name, mix4), (mix16_name, mix16)]
        if quick:
            prefill = [prefill[0], prefill[4], prefill[5]]
        cases += [Case(f"{geometry} {name}{kvd}", geometry, seqs, kv_dtype=kv_dtype) for name, seqs in prefill]
    if suite in ("short", "all"):
        # Short prefills: the chunk tails of a serving step, over 2k contexts.
        short = [("short 1x512 over 2k", [(512, 2048)]), ("short 4x256 over 2k", [(256, 2048)] * 4),
                 ("short 16x128 over 2k", [(128, 2048)] * 16), ("short 64x32 over 2k", [(32, 2048)] * 64)]
        cases += [Case(f"{geometry} {name}{kvd}", geometry, seqs, kv_dtype=kv_dtype) for name, seqs in short]
    if suite == "mixes":
        # Engine steps: the prefill suite's two mixes and two short ones, where a call's host
        # cost and launches weigh most (a mix in one launch against two, `XGK_RPA_DECODE_APART`).
        cases += [Case(f"{geometry} {name}{kvd}", geometry, seqs, kv_dtype=kv_dtype) for name, seqs in MIXES]
        cases.append(Case(f"{geometry} mix 1q64 + 63 decode s512{kvd}", geometry, [(64, 512)] + [(1, 512)] * 63,
                          kv_dtype=kv_dtype))
        cases.append(Case(f"{geometry} mix 2q128 + 126 decode s256-2k{kvd}", geometry,
                          [(128, 1024)] * 2 + [(1, 256 + 14 * i) for i in range(126)], kv_dtype=kv_dtype))
    if suite == "mixparts":
        # The mixes' prefill and decode rows apart: where a mix's time goes, kernel by kernel.
        for name, seqs in MIXES:
            name = name.split(" + ")[0]
            cases.append(Case(f"{geometry} {name} prefill rows", geometry, [s for s in seqs if s[0] > 1]))
            cases.append(Case(f"{geometry} {name} decode rows", geometry, [s for s in seqs if s[0] == 1]))
    for c in cases:
        if bytes_min(c) > MAX_KV_BYTES:
            dropped.append(c.name)
    return [c for c in cases if c.name not in dropped], dropped


# ---------------------------------------------------------------- inputs and reference

class Inputs:
    """One case's tensors in our layout (on DEVICE); the peers derive their layouts from these."""

    def __init__(self, case, seed):
        hq, hkv, d, soft_cap, window = GEOMETRIES[case.geometry]
        self.hq, self.hkv, self.d, self.soft_cap, self.window = hq, hkv, d, soft_cap, window
        g = torch.Generator(device=DEVICE).manual_seed(seed)
        page = self.page = case.page
        self.pages_per_seq = max(-(-kv // page) for _, kv in case.seqs)
        used = sum(-(-kv // page) for _, kv in case.seqs)
        token_bytes = 2 * hkv * d * kv_elem_bytes(case)
        self.total_pages = max(used, -(-MIN_POOL_BYTES // (token_bytes * page)))  # extra random pages
        kv = torch.empty((self.total_pages, page, 2 * hkv, d), dtype=torch.bfloat16, device=DEVICE)
        kv.uniform_(-1, 1, generator=g)
        self.kv_dtype = getattr(torch, case.kv_dtype)
        self.kv = kv if self.kv_dtype == torch.bfloat16 else (kv * 4).to(self.kv_dtype)
        del kv
        self.k_scale = self.v_scale = None
        if self.kv_dtype != torch.bfloat16:
            self.k_scale, self.v_scale = 0.5, 0.75
        perm = torch.randperm(self.total_pages, generator=torch.Generator().manual_seed(seed))
        num = len(case.seqs)
        table = torch.zeros((num, self.pages_per_seq), dtype=torch.int32)
        nxt, self.seq_pages = 0, []
        for i, (_, kv_len) in enumerate(case.seqs):
            n = -(-kv_len // page)
            table[i, :n] = perm[nxt:nxt + n]
            self.seq_pages.append(perm[nxt:nxt + n].clone())
            nxt += n
        self.page_indices = table.to(DEVICE)
        self.kv_lens = torch.tensor([kv for _, kv in case.seqs], dtype=torch.int32, device=DEVICE)
        cu = [0]
        for q, _ in case.seqs:
            cu.append(cu[-1] + q)
        self.cu_list = cu
        self.cu_q_lens = torch.tensor(cu, dtype=torch.int32, device=DEVICE)
        self.num_seqs = torch.tensor([num], dtype=torch.int32, device=DEVICE)
        self.tokens = cu[-1]
        self.q = torch.empty((self.tokens, hq, d), dtype=torch.bfloat16, device=DEVICE).uniform_(-1, 1, generator=g)
        self.sm_scale = d ** -0.5


def check_rows(q_len, seed):
    """Rows of a sequence the check compares: all, or the first, the last and random others."""
    if q_len <= CHECK_ROWS:
        return torch.arange(q_len)
    pick = torch.randperm(q_len - 2, generator=torch.Generator().manual_seed(seed))[:CHECK_ROWS - 2] + 1
    return torch.cat([torch.tensor([0, q_len - 1]), pick]).sort().values


def reference(inp, case, seq, rows):
    """float32 attention of the given rows of one sequence: [len(rows), hq, d]."""
    q_len, kv_len = case.seqs[seq]
    dev = inp.q.device
    kv = inp.kv[inp.seq_pages[seq].to(dev).long()]  # [pages, page, 2*hkv, d]
    k = kv[:, :, 0::2, :].float().reshape(-1, inp.hkv, inp.d)[:kv_len]
    v = kv[:, :, 1::2, :].float().reshape(-1, inp.hkv, inp.d)[:kv_len]
    if inp.k_scale is not None:  # the contract: scaled K/V rounded to q's dtype
        k = (k * inp.k_scale).to(inp.q.dtype).float()
        v = (v * inp.v_scale).to(inp.q.dtype).float()
    rows = rows.to(dev)
    group = inp.hq // inp.hkv
    q = inp.q[inp.cu_list[seq] + rows].float().view(-1, inp.hkv, group, inp.d)
    out = torch.empty_like(q)
    j = torch.arange(kv_len, device=dev)
    step = max(1, (256 << 20) // (4 * inp.hq * kv_len))  # rows per chunk: logits <= 256 MiB
    for a in range(0, len(rows), step):
        logits = torch.einsum("rkgd,jkd->kgrj", q[a:a + step], k) * inp.sm_scale
        if inp.soft_cap:
            logits = inp.soft_cap * torch.tanh(logits / inp.soft_cap)
        pos = (kv_len - q_len + rows[a:a + step])[:, None]
        mask = j[None, :] <= pos
        if inp.window:
            mask &= j[None, :] > pos - inp.window
        logits = logits.masked_fill(~mask, float("-inf"))
        out[a:a + step] = torch.einsum("kgrj,jkd->rkgd", torch.softmax(logits, dim=-1), v)
    return out.view(-1, inp.hq, inp.d)


def check(inp, case, out_rows_fn):
    """(worst rel L2 error, worst max abs error) over up to CHECK_SEQS sampled sequences (in mixed
    batches the first and last prefill and decode sequences); out_rows_fn(seq) -> [q_len, hq, d]."""
    n = len(case.seqs)
    pre = [i for i, (q, _) in enumerate(case.seqs) if q > 1]
    dec = [i for i, (q, _) in enumerate(case.seqs) if q == 1]
    picks = {pre[0], pre[-1], dec[0], dec[-1]} if pre and dec else {0, n - 1, n // 2, n // 3}
    rel = mabs = 0.0
    for s in sorted(picks)[:CHECK_SEQS]:
        rows = check_rows(case.seqs[s][0], seed=s)
        ref = reference(inp, case, s, rows)
        got = out_rows_fn(s)[rows.to(ref.device)].float().to(ref.device)
        if not torch.isfinite(got).all():
            return float("inf"), float("inf")
        rel = max(rel, ((got - ref).norm() / ref.norm().clamp_min(1e-12)).item())
        mabs = max(mabs, (got - ref).abs().max().item())
    return rel, mabs


# ---------------------------------------------------------------- timing

def time_cuda(fn, warmup=5, iters=30):
    """Per-call CUDA-event times in µs of eager calls (includes the host's per-call cost when it
    exceeds the kernel's: the GPU then waits for the launch)."""
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


_L2_FLUSH = []


def time_behind_spin(fn, iters, spin_cycles, before=None):
    """Per-call CUDA-event times in µs of eager calls of `fn`, each enqueued behind a spin kernel
    of `spin_cycles` (after `before()`, when given): long enough that the host has enqueued the
    call before the GPU reaches it, so the host's cost per call does not show, while nothing of
    the previous call overlaps it (the device time of an isolated call)."""
    fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        if before is not None:
            before()
        torch.cuda._sleep(spin_cycles)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]


def time_cold(fn, iters=30):
    """Per-call CUDA-event times in µs of eager calls that each find the L2 cold: before each, a
    read of a buffer twice the L2's size (its lines are left clean: no write-backs during the call)
    and a spin kernel (`time_behind_spin`), so no implementation's host cost shows (eager or not,
    alike)."""
    if not _L2_FLUSH:
        l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
        _L2_FLUSH.append(torch.ones(2 * l2 // 4, dtype=torch.float32, device=DEVICE))
    return time_behind_spin(fn, iters, COLD_SPIN_CYCLES, before=_L2_FLUSH[0].amax)


def kernel_time_us(fn, calls=20):
    """GPU busy time per call of eager calls of `fn`, µs: the durations of the kernels (and
    memcpy/memset) the CUDA profiler (CUPTI, through torch.profiler) records over `calls` calls,
    summed, over `calls`. No launch gaps and no host cost: each implementation's device work
    alone, the same measure for every implementation whatever its timing mode."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    busy = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA)
    if busy <= 0:
        raise RuntimeError("the profiler recorded no device activity")
    return busy / calls


def per_round(call_us, default):
    """Samples a round takes: `default`, fewer (at least 3) when a call is long."""
    return int(max(3, min(default, ROUND_BUDGET_US // max(call_us, 1.0))))


def graph_timer(fn, graphs=True):
    """Returns (timer, how, extra): the timer gives per-call µs of replays of a CUDA graph of
    GRAPH_CALLS calls of `fn` (1 when a call takes over 1 ms), so the kernels' time without the
    host's per-call cost. With --eager (or graphs=False): CUDA events around eager calls."""
    est = statistics.median(time_cuda(fn, warmup=3, iters=3))
    if COLD_L2:
        n = per_round(est, 30)
        return (lambda: time_cold(fn, iters=n)), "one eager call after an L2 flush (CUDA events; host cost " \
            "hidden behind a spin kernel)", {"l2": "cold"}
    if not (USE_GRAPHS and graphs):
        n = per_round(est, 30)
        return lambda: time_cuda(fn, warmup=min(5, n), iters=n), "eager calls (CUDA events)", {}
    calls = GRAPH_CALLS if est < 1000 else 1
    stream = torch.cuda.Stream()  # a warm-up call on a side stream before capture (PyTorch's advice)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    n = per_round(est * calls, 10)
    timer = lambda: [t / calls for t in time_cuda(graph.replay, warmup=min(2, n), iters=n)]  # noqa: E731
    return timer, "CUDA graph replay (CUDA events)", {"graph_calls": calls}


def jax_timer(fn):
    """Per-call µs of back-to-back jitted calls, blocking once at the end (wall clock / N, so
    JAX's dispatch is included); 5 warm-up calls first."""
    out = None
    for _ in range(5):
        out = fn()
    out.block_until_ready()
    t0 = time.perf_counter()
    fn().block_until_ready()
    n = per_round(3 * (time.perf_counter() - t0) * 1e6, 10)  # calls per sample, 3 samples a round

    def timer():
        samples = []
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(n):
                out = fn()
            out.block_until_ready()
            samples.append((time.perf_counter() - t0) / n * 1e6)
        return samples
    return timer, "wall clock, includes JAX dispatch", {"calls_per_sample": n}


# ---------------------------------------------------------------- implementations
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
    return torch.from_numpy(np.asarray(x.astype(jnp.float32))).to(DEVICE)


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
        self.workspace = torch.empty(256 << 20, dtype=torch.uint8, device=DEVICE)
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
        dev = lambda x: torch.tensor(x, dtype=torch.int32, device=DEVICE)  # noqa: E731
        indptr, qo = [0], [0]
        for s in seqs:
            indptr.append(indptr[-1] + len(inp.seq_pages[s]))
            qo.append(qo[-1] + case.seqs[s][0])
        indices = torch.cat([inp.seq_pages[s] for s in seqs]).int().to(DEVICE)
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
        capture = USE_GRAPHS and mode != "eager"
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


# ---------------------------------------------------------------- driver

def copy_bandwidth():
    """Device-to-device copy of 1 GiB: bytes read + written over the median time, GB/s."""
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device=DEVICE).random_(0, 255)
    b = torch.empty_like(a)
    t = statistics.median(time_cuda(lambda: b.copy_(a), iters=20))
    return 2 * n / (t * 1e-6) / 1e9


def versions():
    out = {"torch": torch.__version__, "cuda": torch.version.cuda}
    for mod in ("jax", "jaxlib", "triton", "flashinfer"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            out[mod] = f"unavailable: {type(e).__name__}: {e}"
    try:
        from xla_gpu_kernels._library import version
        out["xla_gpu_kernels"] = version()
    except Exception as e:  # noqa: BLE001
        out["xla_gpu_kernels"] = f"unavailable: {type(e).__name__}: {e}"
    return out


def memory_needed(case):
    """Bytes a case holds at most: our pool, FlashInfer's and Pallas's K/V copies, q and outputs."""
    hq, hkv, d, _, _ = GEOMETRIES[case.geometry]
    pool = max(sum(-(-kv // case.page) * case.page for _, kv in case.seqs) * 2 * hkv * d * kv_elem_bytes(case),
               MIN_POOL_BYTES)
    q = sum(q for q, _ in case.seqs) * hq * d * 2
    return 3 * pool + 10 * q + (1 << 30)


def run_case(case, ci, impls, copy_gbs):
    """Checks every implementation on one case, then times those that passed."""
    free, _ = torch.cuda.mem_get_info()
    if memory_needed(case) > free:
        case.notes.append(f"skipped: needs ~{memory_needed(case) / 2**30:.1f} GiB with the peers' copies, "
                          f"{free / 2**30:.1f} GiB free")
        print(f"[{case.name}] {case.notes[-1]}", flush=True)
        return
    inp = Inputs(case, seed=ci)
    timers, calls = {}, {}
    tol = 3e-2 if inp.kv.dtype != torch.bfloat16 else 2e-2

    def failed(name, e):
        case.results[name] = {"error": f"{type(e).__name__}: {e}"}
        print(f"[{case.name}] {name} failed: {type(e).__name__}: {e}", flush=True)
        traceback.print_exc(limit=3)

    for impl in impls:
        try:
            entries = impl.entries(inp, case)
        except Skip as e:
            case.notes.append(f"{impl.name} skipped: {e}")
            continue
        except Exception as e:  # noqa: BLE001
            failed(impl.name, e)
            continue
        for name, setup in entries:
            try:
                rows_fn, timer, how, extra = setup()
                call = extra.pop("_call", None)
                rel, mabs = check(inp, case, rows_fn)
            except Skip as e:
                case.notes.append(f"{name} skipped: {e}")
                continue
            except Exception as e:  # noqa: BLE001
                failed(name, e)
                continue
            case.results[name] = {"rel_l2_error": rel, "max_abs_error": mabs, "timing": how, **extra, "samples": []}
            if not rel <= tol:
                wrong = f"rel L2 error {rel:.3g} > {tol} (max abs {mabs:.3g})"
                print(f"[{case.name}] {name} WRONG: rel L2 {rel:.3g}, max abs {mabs:.3g}", flush=True)
                # An experiment build that skips part of the work on purpose (its timing says what
                # that part costs) is timed anyway when asked, its result marked `check_error`.
                if os.environ.get("PEERS_TIME_WRONG") != "1":
                    case.results[name]["error"] = wrong
                    continue
                case.results[name]["check_error"] = wrong
            timers[name] = timer
            if call is not None:
                calls[name] = call
    names = list(timers)
    for r in range(3):  # rounds in alternating order
        for name in (names if r % 2 == 0 else names[::-1]):
            if "error" in case.results[name]:
                continue
            try:
                case.results[name]["samples"] += timers[name]()
            except Exception as e:  # noqa: BLE001
                case.results[name]["error"] = f"{type(e).__name__}: {e}"
                print(f"[{case.name}] {name} failed while timed: {type(e).__name__}: {e}", flush=True)
    if KERNEL_TIME:
        for name, call in calls.items():
            if "error" in case.results[name]:
                continue
            try:
                case.results[name]["kernel_us"] = kernel_time_us(call)
            except Exception as e:  # noqa: BLE001
                case.results[name]["kernel_us_error"] = f"{type(e).__name__}: {e}"
    summarize(case, copy_gbs)
    line = "  ".join((f"{n} {r['median_us']:.1f}" + (f" (kernels {r['kernel_us']:.1f})" if "kernel_us" in r else ""))
                     if "median_us" in r else f"{n} ERR" for n, r in case.results.items())
    print(f"[{case.name}] {line}", flush=True)
    for impl in impls:
        impl.release()
    del inp, timers
    torch.cuda.empty_cache()


def summarize(case, copy_gbs):
    """Medians and percentiles from the samples; the faster of FlashInfer's two ways on a mixed
    batch as "flashinfer"; each implementation's speed against the fastest peer (> 1: faster)."""
    bmin, flops = bytes_min(case), causal_flops(case)
    for res in case.results.values():
        s = res.pop("samples", [])
        if not s or "error" in res:
            continue
        med = statistics.median(s)
        res.update(median_us=med, p10_us=float(np.percentile(s, 10)), p90_us=float(np.percentile(s, 90)),
                   samples_n=len(s), GBps=bmin / med / 1e3, copy_fraction=bmin / med / 1e3 / copy_gbs,
                   TFLOPs=flops / med / 1e6)
    ways = [n for n in MIX_WAYS if "median_us" in case.results.get(n, {})]
    if ways:
        best = min(ways, key=lambda n: case.results[n]["median_us"])
        ordered = {}
        for n, r in case.results.items():
            if n == next(w for w in MIX_WAYS if w in case.results):
                ordered["flashinfer"] = {**case.results[best], "best_of": best}
            ordered[n] = r
        case.results = ordered
    for res in case.results.values():
        if "kernel_us" in res:
            res["kernel_copy_fraction"] = bmin / res["kernel_us"] / 1e3 / copy_gbs
    peers = [peer_time(r) for n, r in case.results.items() if not n.startswith("ours") and "median_us" in r]
    for res in case.results.values():
        if "median_us" in res and peers:
            res["speed_vs_fastest_peer"] = min(peers) / res["median_us"]


def peer_time(res):
    """A peer's time for the ratios: its timed median, or its device busy time per call (the
    profiler's `kernel_us`, no launch gaps, no host cost) where that is shorter: a peer timed
    eagerly is not charged for its host cost. Ours is always charged its timed median (CUDA-graph
    replays: launch gaps included)."""
    return min(res["median_us"], res.get("kernel_us", float("inf")))


def rederive(result):
    """Recomputes the derived figures of a result file from its recorded medians and kernel times
    (`kernel_copy_fraction`, `speed_vs_fastest_peer` by [`peer_time`]): for files written before
    a rule changed."""
    for case in result["cases"]:
        results = case["results"]
        for res in results.values():
            if "kernel_us" in res and "median_us" in res:
                res["kernel_copy_fraction"] = res["copy_fraction"] * res["median_us"] / res["kernel_us"]
        peers = [peer_time(r) for n, r in results.items() if not n.startswith("ours") and "median_us" in r]
        for res in results.values():
            if "median_us" in res and peers:
                res["speed_vs_fastest_peer"] = min(peers) / res["median_us"]
    return result


def plot(result, path):
    """The suite's plot (`peers_table.plot`): grouped bars per case, % of copy bandwidth for
    decode cases and TFLOP/s for prefill and mixed ones, a peer's kernel time as a second bar."""
    peers_table.plot(result, path)


def main():
    global USE_GRAPHS, KERNEL_TIME, COLD_L2
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="decode", choices=["decode", "uneven", "pages", "features", "prefill", "short", "mixes", "mixparts",
                             "all"])
    ap.add_argument("--kv-dtype", default="bfloat16", choices=["bfloat16", "float8_e4m3fn", "float8_e5m2"],
                    help="the KV cache's dtype in the prefill, short and mixes suites")
    ap.add_argument("--geometry", default="G1", choices=list(GEOMETRIES))
    ap.add_argument("--variants", default="auto",
                    help="ours' kernels, comma separated: auto,tiled,tiled-wgmma,pipelined,mma,general, each with "
                         "options after colons (see Ours)")
    ap.add_argument("--no-jax", action="store_true", help="skip ours-jax and Pallas")
    ap.add_argument("--no-flashinfer", action="store_true")
    ap.add_argument("--no-ours", action="store_true", help="skip our torch op (peers only)")
    ap.add_argument("--only-jax", action="store_true",
                    help="only ours-jax and Pallas (JAX timing; run apart from the CUDA-graph timing of the torch "
                         "implementations: both in one process faulted on an H100, cause not established)")
    ap.add_argument("--eager", action="store_true", help="time eager calls (CUDA events per call), no graphs")
    ap.add_argument("--cold-l2", action="store_true",
                    help="every timed call after an L2 flush, eager (time_cold); implies --no-kernel-time")
    ap.add_argument("--no-kernel-time", action="store_true",
                    help="skip the profiler's per-call device busy time (kernel_us)")
    ap.add_argument("--quick", action="store_true", help="a small subset of the suite")
    ap.add_argument("--filter", default=None, help="only cases whose name contains one of these (comma separated)")
    ap.add_argument("--cells", default=None,
                    help="decode cells in place of the suite's: BxCTX[:KV_DTYPE], comma separated (e.g. "
                         "1x16384,1x32768:float8_e4m3fn)")
    ap.add_argument("--out", default=None, help="result file (.json; the plot goes next to it as .png)")
    ap.add_argument("--rederive", metavar="FILE.json", default=None,
                    help="no run: recompute a result file's derived figures (ratios) and redraw its plot")
    args = ap.parse_args()
    if args.rederive:
        with open(args.rederive) as f:
            result = rederive(json.load(f))
        with open(args.rederive, "w") as f:
            json.dump(result, f, indent=1)
        plot(result, os.path.splitext(args.rederive)[0] + ".png")
        return
    USE_GRAPHS = not args.eager
    COLD_L2 = args.cold_l2
    # The profiler's kernel times are of warm back-to-back calls: not comparable with cold ones.
    KERNEL_TIME = not (args.no_kernel_time or args.cold_l2)
    torch.backends.cuda.matmul.allow_tf32 = False  # the float32 reference stays float32

    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip().splitlines()
    except OSError:
        smi = []
    gpu = smi[0] if smi else torch.cuda.get_device_name()
    gpu_name, _, driver = (s.strip() for s in gpu.partition(","))
    notes, impls = [], []

    def add(make, label):
        try:
            impls.append(make())
        except Exception as e:  # noqa: BLE001
            notes.append(f"{label} skipped: {type(e).__name__}: {e}")
            print(notes[-1], flush=True)

    if not args.only_jax:
        for v in ([] if args.no_ours else args.variants.split(",")):
            add(functools.partial(Ours, v), f"ours-{v}")
        if not args.no_flashinfer:
            add(FlashInfer, "flashinfer")
    if not args.no_jax:
        add(OursJax, "ours-jax")
        add(PallasDecode, "jax-pallas")
    copy_gbs = copy_bandwidth()
    print(f"{gpu}; copy bandwidth {copy_gbs:.0f} GB/s; implementations {[i.name for i in impls]}", flush=True)

    cases, dropped = suite_cases(args.suite, args.quick, args.geometry, args.kv_dtype)
    if args.cells:
        cases = [decode_cell(c, args.geometry) for c in args.cells.split(",")]
    if dropped:
        notes.append(f"not run (over {MAX_KV_BYTES >> 30} GiB of KV): {', '.join(dropped)}")
    if args.filter:
        cases = [c for c in cases if any(f in c.name for f in args.filter.split(","))]
    date = datetime.date.today().isoformat()
    tag = gpu_name.replace("NVIDIA ", "").replace(" ", "-")
    out = args.out or os.path.join(ROOT, "benchmarks", "runs",
                                   f"peers-{args.suite}-{args.geometry}-{tag}-{date}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)

    def write():
        result = {"gpu": gpu, "gpu_name": gpu_name, "driver": driver, "date": date, "argv": sys.argv[1:],
                  "versions": versions_cache, "copy_GBps": copy_gbs, "notes": notes,
                  "protocol": __doc__.split("\n\n")[1], "l2": "cold" if COLD_L2 else "warm", "cases": [
                      {"name": c.name, "kind": c.kind, "geometry": c.geometry, "page_size": c.page,
                       "kv_dtype": c.kv_dtype, "seqs": len(c.seqs), "sum_kv": sum(k for _, k in c.seqs),
                       "tokens": sum(q for q, _ in c.seqs), "bytes_min": bytes_min(c), "causal_flops": causal_flops(c),
                       "notes": c.notes, "results": c.results}
                      for c in cases if c.results or c.notes]}
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
        return result

    versions_cache = versions()
    for ci, case in enumerate(cases):
        try:
            run_case(case, ci, impls, copy_gbs)
        except Exception as e:  # noqa: BLE001  (inputs or the reference: the case is lost, not the run)
            case.notes.append(f"case failed: {type(e).__name__}: {e}")
            print(f"[{case.name}] {case.notes[-1]}", flush=True)
            traceback.print_exc(limit=3)
        write()  # after every case: a run cut short still leaves its results
    result = write()
    try:
        plot(result, out[:-5] + ".png" if out.endswith(".json") else out + ".png")
    except Exception as e:  # noqa: BLE001
        print(f"plot failed: {type(e).__name__}: {e}", flush=True)
    from peers_table import fixed_width, markdown
    print(markdown(result))
    print()
    print(fixed_width(result))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
