"""Per-call overhead and CUDA graphs (issue 9), on one GPU, in one run.

Parts (all by default; each prints a table and adds to one JSON file):
- ``torch``: host cost per call of ``torch.ops.xla_gpu.simple_add`` (1024 floats) against
  ``torch.add``, and of ``torch.ops.xla_gpu.paged_attention`` on a tiny decode: back-to-back calls
  timed on the host (the GPU work of each is a few µs, so the host's cost decides).
- ``sync``: a call followed by a sync, batch 1 x 32k and 64 x 2k decode (32 q / 8 kv heads, d 128,
  bf16, page 16), in torch (``torch.cuda.synchronize()``) and JAX (``block_until_ready``),
  against the kernels' time (CUDA-graph replay) plus the framework's own sync round trip (a
  trivial op with the same sync, measured in the same run).
- ``cmdbuf``: a jitted 32-layer decode step (32 x (attention + simple_add) over one KV pool), run
  in two child processes with XLA command buffers on and off: step time, the library's launch
  count over repeated steps (a step replayed from a command buffer launches nothing through the
  library), identical results, and new results after new ``kv_lens`` / ``page_indices``.

    python3 benchmarks/overhead.py [--parts torch,sync,cmdbuf] [--out benchmarks/runs/overhead-<gpu>-<date>.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
HERE = os.path.dirname(os.path.abspath(__file__))
# The in-tree package, unless XGK_TEST_INSTALLED=1 asks for the installed wheel.
if os.environ.get("XGK_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(HERE, "..", "python"))

HQ, HKV, D, PAGE = 32, 8, 128, 16
CMDBUF_ON = "--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1"
CMDBUF_OFF = "--xla_gpu_enable_command_buffer="


def decode_inputs(np, batch, context, seed=0, pool_pages=None):
    """Decode inputs as numpy arrays: pages in random order in a pool of `pool_pages`."""
    rng = np.random.default_rng(seed)
    pps = -(-context // PAGE)
    pool = pool_pages or batch * pps
    q = rng.standard_normal((batch, HQ, D), np.float32)
    kv = rng.standard_normal((pool, PAGE, 2 * HKV, D), np.float32)
    table = rng.permutation(pool)[: batch * pps].reshape(batch, pps).astype(np.int32)
    kv_lens = np.full(batch, context, np.int32)
    cu = np.arange(batch + 1, dtype=np.int32)
    return q, kv, kv_lens, table, cu, np.array([batch], np.int32)


def host_us_per_call(fn, calls=2000, rounds=7, sync=None):
    """Median over rounds of wall µs per call for `calls` back-to-back calls (one sync per round)."""
    for _ in range(50):
        fn()
    sync()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples), samples


def with_sync_us(fn, sync, iters=200, rounds=5):
    """Median over rounds of wall µs per (call; sync)."""
    for _ in range(20):
        fn()
        sync()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
            sync()
        samples.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(samples), samples


def torch_graph_us(torch, fn, calls=20, replays=20):
    """Kernels' µs per call: replays of a CUDA graph of `calls` calls."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(samples)


def isolated_device_us(torch, fn, iters=50, spin_cycles=200_000):
    """Device µs of one call on an otherwise idle GPU, as a call followed by a sync runs it:
    CUDA events around the call, recorded behind a spin kernel (`peers_timing.time_behind_spin`), so the
    host's cost is not timed but nothing before the call overlaps it either (no previous call's
    tail, no programmatic launch ahead of it: what a graph replay of back-to-back calls hides).
    Median over `iters` calls."""
    from peers_timing import time_behind_spin
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    return statistics.median(time_behind_spin(fn, iters, spin_cycles))


def part_torch(res):
    import torch
    import xla_gpu_kernels.torch as xt  # registers the ops
    res["torch_kernels"] = xt.KERNELS  # native (stable C ABI) or python (XGK_TORCH_KERNELS=python)
    sync = torch.cuda.synchronize
    a = torch.rand(1024, device="cuda")
    b = torch.rand(1024, device="cuda")
    ours, _ = host_us_per_call(lambda: torch.ops.xla_gpu.simple_add(a, b), sync=sync)
    ref, _ = host_us_per_call(lambda: torch.add(a, b), sync=sync)
    np = __import__("numpy")
    q, kv, kv_lens, table, cu, ns = decode_inputs(np, 1, 128)
    t = [torch.from_numpy(x).cuda() for x in (q, kv, kv_lens, table, cu, ns)]
    t[0], t[1] = t[0].bfloat16(), t[1].bfloat16()
    attn, _ = host_us_per_call(lambda: torch.ops.xla_gpu.paged_attention(*t, sm_scale=0.088), sync=sync)
    res["torch_per_call"] = {"simple_add_1024_us": ours, "torch_add_1024_us": ref, "simple_add_minus_add_us": ours - ref,
                             "paged_attention_tiny_decode_us": attn, "tiny_decode": "1 seq x 128 keys, 32/8 heads, d128"}
    print(f"torch per call ({xt.KERNELS['CUDA']} kernels): simple_add {ours:.1f} us (torch.add {ref:.1f} us, +{ours - ref:.1f}), "
          f"paged_attention tiny decode {attn:.1f} us")


def jax_sync_child(out_path):
    """JAX part of `sync`, in a child process (XLA_FLAGS as the parent set them)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import xla_gpu_kernels.jax as xk
    trivial_jit = jax.jit(lambda x: x + 1)
    j1 = jnp.zeros((1,), jnp.float32)
    trivial, _ = with_sync_us(lambda: trivial_jit(j1).block_until_ready(), lambda: None)
    rows = {"trivial_sync_us": trivial}
    for batch, context in SYNC_CASES:
        q, kv, kv_lens, table, cu, ns = decode_inputs(np, batch, context, pool_pages=max(batch * context // PAGE, 40000))
        j = [jnp.asarray(x) for x in (q, kv, kv_lens, table, cu, ns)]
        j[0], j[1] = j[0].astype(jnp.bfloat16), j[1].astype(jnp.bfloat16)
        f = jax.jit(lambda *a: xk.ragged_paged_attention(*a, sm_scale=0.088))
        call_sync, _ = with_sync_us(lambda: f(*j).block_until_ready(), lambda: None)
        back, _ = host_us_per_call(lambda: f(*j), calls=200, rounds=5, sync=lambda: jax.block_until_ready(f(*j)))
        # A native XLA op of about the same duration (an elementwise add over an f32 array sized
        # from our time at ~2.8 TB/s): JAX's own call + sync cost for an op that long.
        n = max(1 << 16, int(back * 1e-6 * 2.8e12 / 8))
        x = jnp.zeros((n,), jnp.float32)
        native = jax.jit(lambda v: v + 1)
        native_sync, _ = with_sync_us(lambda: native(x).block_until_ready(), lambda: None)
        native_back, _ = host_us_per_call(lambda: native(x), calls=200, rounds=5,
                                          sync=lambda: jax.block_until_ready(native(x)))
        rows[f"{batch}x{context}"] = {"call_sync_us": call_sync, "back_to_back_us": back,
                                      "native_same_duration": {"elements": n, "call_sync_us": native_sync,
                                                               "back_to_back_us": native_back}}
        del j, x
    json.dump(rows, open(out_path, "w"))


SYNC_CASES = [(1, 32768), (64, 2048)]
# The JAX half of the `sync` part (two child processes); `--no-jax-sync` leaves it out.
SYNC_JAX = True


def part_sync(res, tmp):
    import numpy as np
    import torch
    import xla_gpu_kernels.torch  # noqa: F401
    x1 = torch.zeros(1, device="cuda")
    trivial_torch, _ = with_sync_us(lambda: x1.add_(1), torch.cuda.synchronize)
    trivial_isolated = isolated_device_us(torch, lambda: x1.add_(1))
    jax_runs = {}
    for mode, flags in (("default", os.environ.get("XLA_FLAGS", "")), ("cmdbuf_off", CMDBUF_OFF)):
        if not SYNC_JAX:
            break
        path = os.path.join(tmp, f"sync-{mode}.json")
        p = subprocess.run([sys.executable, __file__, "--child-sync", "-", path], env=dict(os.environ, XLA_FLAGS=flags),
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            print(p.stderr[-4000:])
            raise RuntimeError(f"JAX sync child ({mode}) failed")
        jax_runs[mode] = json.load(open(path))
    rows = []
    for batch, context in SYNC_CASES:
        case = f"{batch}x{context}"
        q, kv, kv_lens, table, cu, ns = decode_inputs(np, batch, context, pool_pages=max(batch * context // PAGE, 40000))
        t = [torch.from_numpy(x).cuda() for x in (q, kv, kv_lens, table, cu, ns)]
        t[0], t[1] = t[0].bfloat16(), t[1].bfloat16()
        call = lambda: torch.ops.xla_gpu.paged_attention(*t, sm_scale=0.088)  # noqa: E731
        kernel = torch_graph_us(torch, call)
        isolated = isolated_device_us(torch, call)
        torch_sync, _ = with_sync_us(call, torch.cuda.synchronize)
        del t
        # Two budgets: the kernels' time back to back (graph replays, where each call's start
        # overlaps the previous call's tail) and as an isolated call runs them (the device time
        # a call + sync waits for), each plus the framework's sync round trip.
        row = {"case": case, "kernel_us": kernel, "kernel_isolated_us": isolated,
               "torch_call_sync_us": torch_sync, "torch_trivial_sync_us": trivial_torch,
               "trivial_isolated_us": trivial_isolated, "torch_budget_us": kernel + trivial_torch,
               "torch_budget_isolated_us": isolated + trivial_torch}
        for mode, r in jax_runs.items():
            row[f"jax_{mode}_call_sync_us"] = r[case]["call_sync_us"]
            row[f"jax_{mode}_back_to_back_us"] = r[case]["back_to_back_us"]
            row[f"jax_{mode}_trivial_sync_us"] = r["trivial_sync_us"]
            row[f"jax_{mode}_budget_us"] = kernel + r["trivial_sync_us"]
            nat = r[case]["native_same_duration"]
            row[f"jax_{mode}_native_op_call_sync_us"] = nat["call_sync_us"]
            row[f"jax_{mode}_native_op_back_to_back_us"] = nat["back_to_back_us"]
        rows.append(row)
        print(f"{case:>9}: kernel {kernel:.1f} us (isolated {isolated:.1f}; trivial op isolated "
              f"{trivial_isolated:.1f}) | torch call+sync {torch_sync:.1f} (budget {kernel + trivial_torch:.1f}, "
              f"isolated {isolated + trivial_torch:.1f}) | " + " | ".join(
                  f"jax[{m}] call+sync {row[f'jax_{m}_call_sync_us']:.1f} (budget {row[f'jax_{m}_budget_us']:.1f}), "
                  f"back-to-back {row[f'jax_{m}_back_to_back_us']:.1f}; native op of that length: call+sync "
                  f"{row[f'jax_{m}_native_op_call_sync_us']:.1f}, back-to-back "
                  f"{row[f'jax_{m}_native_op_back_to_back_us']:.1f}" for m in jax_runs))
    res["call_and_sync"] = rows


def cmdbuf_child(mode, out_path, batch=16, context=2048):
    """One process, command buffers `mode`: step time, launch counts, outputs for two metadata sets.
    `XGK_CMDBUF_LAYERS` (default 32) sets the layers."""
    layers = int(os.environ.get("XGK_CMDBUF_LAYERS", "32"))
    import jax
    import jax.numpy as jnp
    import numpy as np
    import xla_gpu_kernels.jax as xk
    from xla_gpu_kernels import _capi
    q, kv, kv_lens, table, cu, ns = decode_inputs(np, batch, context, pool_pages=batch * context // PAGE * 2)
    kvj = jnp.asarray(kv, jnp.bfloat16)
    qj = jnp.asarray(q, jnp.bfloat16)

    @jax.jit
    def step(x, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs):
        for _ in range(layers):
            a = xk.ragged_paged_attention(x, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=0.088)
            x = xk.simple_add(x, a)
        return x

    meta1 = [jnp.asarray(x) for x in (kv_lens, table, cu, ns)]
    rng = np.random.default_rng(1)
    pool = kv.shape[0]
    table2 = rng.permutation(pool)[: table.size].reshape(table.shape).astype(np.int32)
    kv_lens2 = rng.integers(1, context + 1, batch).astype(np.int32)
    meta2 = [jnp.asarray(x) for x in (kv_lens2, table2, cu, ns)]
    out1 = np.asarray(step(qj, kvj, *meta1).astype(jnp.float32))
    step(qj, kvj, *meta1).block_until_ready()
    before = _capi.launch_count()
    n = 20
    for _ in range(n):
        r = step(qj, kvj, *meta1)
    r.block_until_ready()
    launches = (_capi.launch_count() - before) / n
    # step time: per step with a sync (as a serving loop does), and back to back
    per_sync, _ = with_sync_us(lambda: step(qj, kvj, *meta1).block_until_ready(), lambda: None, iters=30, rounds=5)
    back, _ = host_us_per_call(lambda: step(qj, kvj, *meta1), calls=30, rounds=5,
                               sync=lambda: jax.block_until_ready(step(qj, kvj, *meta1)))
    out2 = np.asarray(step(qj, kvj, *meta2).astype(jnp.float32))
    out1_again = np.asarray(step(qj, kvj, *meta1).astype(jnp.float32))
    np.savez(out_path + ".npz", out1=out1, out2=out2, out1_again=out1_again)
    json.dump({"mode": mode, "launches_per_step": launches, "step_sync_us": per_sync, "step_back_to_back_us": back,
               "layers": layers, "case": f"{batch}x{context}", "xla_flags": os.environ.get("XLA_FLAGS", "")},
              open(out_path, "w"))


def part_cmdbuf(res, tmp):
    import numpy as np
    runs = {}
    for mode, flags in (("on", CMDBUF_ON), ("off", CMDBUF_OFF)):
        path = os.path.join(tmp, f"cmdbuf-{mode}.json")
        env = dict(os.environ, XLA_FLAGS=flags)
        p = subprocess.run([sys.executable, __file__, "--child-cmdbuf", mode, path], env=env, capture_output=True,
                           text=True, timeout=400)
        if p.returncode != 0:
            print(p.stdout[-3000:], p.stderr[-5000:])
            raise RuntimeError(f"command-buffer child ({mode}) failed")
        runs[mode] = json.load(open(path))
        runs[mode]["outputs"] = np.load(path + ".npz")
    on, off = runs["on"]["outputs"], runs["off"]["outputs"]
    identical = all(np.array_equal(on[k], off[k]) for k in ("out1", "out2", "out1_again"))
    new_results = not np.array_equal(on["out1"], on["out2"]) and np.array_equal(on["out1"], on["out1_again"])
    res["command_buffers"] = {
        mode: {k: v for k, v in runs[mode].items() if k != "outputs"} for mode in runs}
    res["command_buffers"]["identical_on_off"] = bool(identical)
    res["command_buffers"]["new_metadata_new_results"] = bool(new_results)
    for mode in ("on", "off"):
        r = runs[mode]
        print(f"command buffers {mode:>3}: {r['launches_per_step']:.1f} library launches per step, step "
              f"{r['step_sync_us']:.0f} us with sync, {r['step_back_to_back_us']:.0f} us back to back")
    print(f"results identical on/off: {identical}; new metadata gives new results: {new_results}")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--child-cmdbuf":
        cmdbuf_child(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) == 4 and sys.argv[1] == "--child-sync":
        jax_sync_child(sys.argv[3])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="torch,sync,cmdbuf")
    ap.add_argument("--out", default=None)
    ap.add_argument("--tmp", default="/tmp")
    ap.add_argument("--no-jax-sync", action="store_true", help="the sync part in torch only")
    args = ap.parse_args()
    global SYNC_JAX
    SYNC_JAX = not args.no_jax_sync
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    import jax
    import torch
    from xla_gpu_kernels import version
    res = {"gpu": gpu, "date": datetime.date.today().isoformat(), "torch": torch.__version__, "jax": jax.__version__,
           "library": version()}
    for part in args.parts.split(","):
        {"torch": part_torch, "sync": lambda r: part_sync(r, args.tmp), "cmdbuf": lambda r: part_cmdbuf(r, args.tmp)}[part](res)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
