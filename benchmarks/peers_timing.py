"""How `peers.py` times a call: CUDA events around eager calls or CUDA-graph replays, a cold-L2
mode, the profiler's device busy time, and wall clock for JAX. `configure` sets the mode for a run."""

from __future__ import annotations

import statistics
import time

import torch

ROUND_BUDGET_US = 2e6  # a round of one implementation aims at no more than this
GRAPH_CALLS = 10
USE_GRAPHS = True
# Cold L2 (`--cold-l2`): every timed call finds the L2 cold (time_cold), as in a model whose layers
# each read their own KV; warm (the default) replays the same call, whose small cells then read an
# L2-resident KV after the first.
COLD_L2 = False
# Cycles of the spin kernel before each cold call (~200 µs at H100/H200 clocks): longer than any
# implementation's host cost per call, so the call is enqueued before the GPU reaches it.
COLD_SPIN_CYCLES = 400_000


def configure(graphs: bool, cold_l2: bool):
    """The run's timing mode: CUDA-graph replays (`graphs`) or eager calls; `cold_l2` overrides both."""
    global USE_GRAPHS, COLD_L2
    USE_GRAPHS, COLD_L2 = graphs, cold_l2


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
        _L2_FLUSH.append(torch.ones(2 * l2 // 4, dtype=torch.float32, device="cuda"))
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

