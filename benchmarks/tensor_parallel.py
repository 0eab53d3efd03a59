"""A 2-way tensor-parallel decode step against one GPU: ragged paged attention through `jax.jit`.

Llama-3-8B attention geometry (32 q heads / 8 KV heads, head_dim 128, bf16, page 16), decode (one
query row per sequence), pages in random order. Cases: batch 64 x 8k context and batch 16 x 32k
(2 GiB of KV each). For each case:

- one GPU: `xla_gpu_kernels.jax.ragged_paged_attention` on GPU 0, all inputs there;
- TP=2: `xla_gpu_kernels.sharding.ragged_paged_attention` with q and kv_pages split over heads
  on a 2-GPU mesh (each GPU: 16 q heads, 8 KV-head slots, 1 GiB), metadata replicated; the
  compiled step is checked to have no all-gather / all-to-all, and its result against one GPU's.

Times: `blocked` = median over calls each followed by `block_until_ready` (includes JAX dispatch);
`pipelined` = median over rounds of back-to-back calls with one block at the end, per call.
Writes JSON (device names, driver, jax version, times, speedups) and prints a table.

    python3 benchmarks/tensor_parallel.py [--out benchmarks/runs/tensor-parallel-<gpu>-<date>.json]
    python3 benchmarks/tensor_parallel.py --tiny     # a small configuration, runs on 2 CPU devices
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

if __name__ == "__main__":
    # Two host devices when JAX runs on CPU (--tiny); GPUs are counted as they are.
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

# The in-tree package, unless XGK_TEST_INSTALLED=1 asks for the installed wheel.
if os.environ.get("XGK_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import xla_gpu_kernels.jax as xk  # noqa: E402
import xla_gpu_kernels.sharding as xs  # noqa: E402

Q_HEADS, KV_HEADS, HEAD_DIM, PAGE = 32, 8, 128, 16
CASES = [(64, 8192), (16, 32768)]
TINY_CASES = [(4, 256), (2, 1024)]


def make_inputs(batch, context, key, device):
    """Decode inputs on `device`: q [B, Hq, D], a pool of exactly the pages needed, random order."""
    pages_per_seq = context // PAGE
    num_pages = batch * pages_per_seq
    kq, kkv, kp = jax.random.split(key, 3)
    with jax.default_device(device):
        q = jax.random.normal(kq, (batch, Q_HEADS, HEAD_DIM), jnp.bfloat16)
        kv_pages = jax.random.normal(kkv, (num_pages, PAGE, 2 * KV_HEADS, HEAD_DIM), jnp.bfloat16)
        page_indices = jax.random.permutation(kp, num_pages).astype(jnp.int32).reshape(batch, pages_per_seq)
        kv_lens = jnp.full((batch,), context, jnp.int32)
        cu_q_lens = jnp.arange(batch + 1, dtype=jnp.int32)
        num_seqs = jnp.array([batch], jnp.int32)
    return q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs


def timings(fn, args, calls, rounds):
    for _ in range(3):
        jax.block_until_ready(fn(*args))
    blocked = []
    for _ in range(calls):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        blocked.append(time.perf_counter() - t0)
    per_round = max(1, calls // rounds)
    pipelined = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = [fn(*args) for _ in range(per_round)]
        jax.block_until_ready(out)
        pipelined.append((time.perf_counter() - t0) / per_round)
    return {"blocked_us": statistics.median(blocked) * 1e6, "pipelined_us": statistics.median(pipelined) * 1e6,
            "blocked_samples": len(blocked), "pipelined_rounds": rounds, "calls_per_round": per_round}


def gpu_info():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return ""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="small cases (CPU check of the script)")
    ap.add_argument("--calls", type=int, default=None, help="timed calls per variant (default 200, tiny 6)")
    ap.add_argument("--rounds", type=int, default=None, help="pipelined rounds (default 20, tiny 2)")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/runs/tensor-parallel-<gpu>-<date>"
                                                ".json; --tiny: printed only)")
    a = ap.parse_args(argv)
    calls = a.calls or (6 if a.tiny else 200)
    rounds = a.rounds or (2 if a.tiny else 20)
    devices = jax.devices()
    if len(devices) < 2:
        raise SystemExit(f"needs 2 devices, JAX sees {devices}")
    one = devices[0]
    mesh = jax.make_mesh((2,), ("model",), axis_types=(jax.sharding.AxisType.Auto,), devices=devices[:2])
    q_sharding, kv_sharding, replicated = xs.head_shardings(mesh, "model")
    attrs = {"sm_scale": HEAD_DIM ** -0.5}
    single = jax.jit(lambda *x: xk.ragged_paged_attention(*x, **attrs))
    tp = jax.jit(lambda *x: xs.ragged_paged_attention(*x, **attrs))

    rows = []
    key = jax.random.PRNGKey(0)
    for batch, context in (TINY_CASES if a.tiny else CASES):
        key, sub = jax.random.split(key)
        args = make_inputs(batch, context, sub, one)
        placed = (jax.device_put(args[0], q_sharding), jax.device_put(args[1], kv_sharding)) + tuple(
            jax.device_put(x, replicated) for x in args[2:])
        text = tp.lower(*placed).compile().as_text()
        if "all-gather" in text or "all-to-all" in text:
            raise SystemExit(f"B{batch} x {context}: the tensor-parallel step gathers")
        ref = np.asarray(jax.device_get(single(*args)), np.float32)
        got = np.asarray(jax.device_get(tp(*placed)), np.float32)
        err = float(np.max(np.abs(ref - got)))
        if not err <= 2.5e-2:  # bf16 tolerance of the test suite (outputs are O(1))
            raise SystemExit(f"B{batch} x {context}: TP=2 differs from one device by {err}")
        t_one = timings(single, args, calls, rounds)
        t_tp = timings(tp, placed, calls, rounds)
        kv_bytes = int(args[1].size) * args[1].dtype.itemsize
        row = {"case": f"decode B{batch} x {context}", "batch": batch, "context": context, "kv_bytes": kv_bytes,
               "kv_bytes_per_device_tp2": kv_bytes // 2, "max_abs_diff_tp2_vs_one": err, "one_device": t_one,
               "tp2": t_tp, "speedup_blocked": t_one["blocked_us"] / t_tp["blocked_us"],
               "speedup_pipelined": t_one["pipelined_us"] / t_tp["pipelined_us"]}
        rows.append(row)
        print(f"B{batch:<3d} x {context:<6d} KV {kv_bytes / 2**30:6.3f} GiB  one device {t_one['blocked_us']:9.1f} us "
              f"(pipelined {t_one['pipelined_us']:9.1f})  TP=2 {t_tp['blocked_us']:9.1f} us "
              f"(pipelined {t_tp['pipelined_us']:9.1f})  speedup {row['speedup_blocked']:.2f}x "
              f"({row['speedup_pipelined']:.2f}x)  |diff| {err:.1e}", flush=True)
        del args, placed

    result = {
        "benchmark": "tensor_parallel", "tiny": a.tiny,
        "date": datetime.date.today().isoformat(),
        "jax": jax.__version__, "backend": jax.default_backend(),
        "devices": [str(d) for d in devices[:2]], "device_kind": one.device_kind, "nvidia_smi": gpu_info(),
        "geometry": {"q_heads": Q_HEADS, "kv_heads": KV_HEADS, "head_dim": HEAD_DIM, "page_size": PAGE,
                     "dtype": "bfloat16", "q_rows_per_seq": 1},
        "timing": "blocked: median of calls each followed by block_until_ready; pipelined: median over rounds of "
                  "back-to-back calls, per call",
        "rows": rows,
    }
    out = a.out
    if out is None and not a.tiny:
        name = one.device_kind.replace("NVIDIA ", "").replace(" ", "-")
        out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runs",
                           f"tensor-parallel-{name}-{result['date']}.json")
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {out}")
    else:
        print(json.dumps(result)[:2000])
    return result


if __name__ == "__main__":
    main()
