"""simple_add against XLA's own fused add, both under ``jax.jit``, on one GPU, in one process.

For each size 2^10 .. 2^28 (f32, and bf16): check ours against ``a + b`` exactly, then time K calls
of each back to back (asynchronous dispatch, one block at the end; K such that a round lasts
>= 50 ms), 7 rounds alternating the order, median per call. Both sides pay the same JAX dispatch,
so small sizes compare dispatch (~equal) and large sizes compare the kernels. Writes a JSON
result and prints a table.

    python3 benchmarks/simple_add_vs_xla.py [--out benchmarks/results/simple-add-<gpu>-<date>.json]
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

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import xla_gpu_kernels.jax as xk  # noqa: E402


def per_call_seconds(fn, a, b, target_s=0.05, rounds=7):
    fn(a, b).block_until_ready()
    t0 = time.perf_counter()
    fn(a, b).block_until_ready()
    one = max(time.perf_counter() - t0, 1e-6)
    k = max(10, min(20000, int(target_s / one)))
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = None
        for _ in range(k):
            out = fn(a, b)
        out.block_until_ready()
        samples.append((time.perf_counter() - t0) / k)
    return samples


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--max-log2", type=int, default=28)
    args = ap.parse_args()
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    except FileNotFoundError:
        gpu = "no GPU (" + jax.devices()[0].platform + ")"
    ours = jax.jit(xk.simple_add)
    xla = jax.jit(jnp.add)
    rows = []
    key = jax.random.PRNGKey(0)
    for dtype in (jnp.float32, jnp.bfloat16):
        for log2 in range(10, args.max_log2 + 1, 2):
            n = 1 << log2
            ka, kb, key = jax.random.split(key, 3)
            a = jax.random.uniform(ka, (n,), jnp.float32, -1, 1).astype(dtype)
            b = jax.random.uniform(kb, (n,), jnp.float32, -1, 1).astype(dtype)
            if not bool(jnp.array_equal(ours(a, b), xla(a, b))):
                raise SystemExit(f"simple_add differs from a + b at n={n} {dtype}")
            s_ours, s_xla = [], []
            for r in range(2):  # alternate the order
                first, second = ((ours, s_ours), (xla, s_xla)) if r == 0 else ((xla, s_xla), (ours, s_ours))
                first[1].extend(per_call_seconds(first[0], a, b))
                second[1].extend(per_call_seconds(second[0], a, b))
            m_ours, m_xla = statistics.median(s_ours) * 1e6, statistics.median(s_xla) * 1e6
            bytes_moved = 3 * n * jnp.dtype(dtype).itemsize
            rows.append({"dtype": jnp.dtype(dtype).name, "n": n, "ours_us": m_ours, "xla_us": m_xla,
                         "ratio": m_ours / m_xla, "ours_GBps": bytes_moved / m_ours / 1e3,
                         "xla_GBps": bytes_moved / m_xla / 1e3})
            print(f"{jnp.dtype(dtype).name:9s} 2^{log2:<3d} ours {m_ours:9.1f} us  jnp.add {m_xla:9.1f} us  "
                  f"ratio {m_ours / m_xla:5.3f}", flush=True)
    result = {"gpu": gpu, "date": datetime.date.today().isoformat(), "jax": jax.__version__,
              "timing": "wall clock per call over K back-to-back jitted calls (includes JAX dispatch), median of 14 rounds",
              "rows": rows}
    out = args.out or os.path.join(os.path.dirname(__file__), "results",
                                   f"simple-add-{gpu.split(',')[0].replace(' ', '-')}-{result['date']}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    worst = max(rows, key=lambda r: r["ratio"])
    print(f"worst ratio ours/jnp.add: {worst['ratio']:.3f} ({worst['dtype']} n={worst['n']}); wrote {out}")


if __name__ == "__main__":
    main()
