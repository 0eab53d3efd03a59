"""simple_add against XLA's own fused add, both under ``jax.jit``, on one GPU, in one process.

For each size 2^10 .. 2^28 (f32, and bf16): check ours against ``a + b`` exactly, then time K calls
of each back to back (asynchronous dispatch, one block at the end; K such that a round lasts
>= 50 ms), rounds in alternating order (ours first, then XLA first), median per call. Both sides
pay the same JAX dispatch, so small sizes compare dispatch (~equal) and large sizes compare the
kernels. A second timing
(``chain``) runs CHAIN adds in one jitted function, each depending on the one before and kept
apart by ``lax.optimization_barrier`` (XLA would otherwise fuse its adds into one kernel), so
JAX's dispatch is paid once per CHAIN kernels and the small sizes compare the kernels and their
launches within one executable (recorded into a command buffer where XLA does so). Writes a
JSON result and prints a table.

    python3 benchmarks/simple_add_vs_xla.py [--out benchmarks/runs/simple-add-<gpu>-<date>.json]
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

# The in-tree package, unless XGK_TEST_INSTALLED=1 asks for the installed wheel.
if os.environ.get("XGK_TEST_INSTALLED") != "1":
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


CHAIN = 16


def chained(add):
    """CHAIN dependent calls of ``add`` in one function, none fusable with the next."""

    def run(a, b):
        x = a
        for _ in range(CHAIN):
            x = jax.lax.optimization_barrier(add(x, b))
        return x

    return run


def quantile(samples, q):
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--max-log2", type=int, default=28)
    ap.add_argument("--min-log2", type=int, default=10)
    ap.add_argument("--alternations", type=int, default=4, help="rounds of both orders (ours first, then XLA first, ...)")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds per function and alternation")
    args = ap.parse_args()
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    except FileNotFoundError:
        gpu = "no GPU (" + jax.devices()[0].platform + ")"
    ours = jax.jit(xk.simple_add)
    xla = jax.jit(jnp.add)
    ours_chain = jax.jit(chained(xk.simple_add))
    xla_chain = jax.jit(chained(jnp.add))
    rows = []
    key = jax.random.PRNGKey(0)
    for dtype in (jnp.float32, jnp.bfloat16):
        for log2 in range(args.min_log2, args.max_log2 + 1, 2):
            n = 1 << log2
            ka, kb, key = jax.random.split(key, 3)
            a = jax.random.uniform(ka, (n,), jnp.float32, -1, 1).astype(dtype)
            b = jax.random.uniform(kb, (n,), jnp.float32, -1, 1).astype(dtype)
            if not bool(jnp.array_equal(ours(a, b), xla(a, b))):
                raise SystemExit(f"simple_add differs from a + b at n={n} {dtype}")
            if not bool(jnp.array_equal(ours_chain(a, b), xla_chain(a, b))):
                raise SystemExit(f"chained simple_add differs from chained a + b at n={n} {dtype}")
            s_ours, s_xla, c_ours, c_xla = [], [], [], []
            for r in range(args.alternations):  # alternate the order
                pairs = [((ours, s_ours), (xla, s_xla)), ((ours_chain, c_ours), (xla_chain, c_xla))]
                for (fa, sa), (fb, sb) in pairs:
                    first, second = ((fa, sa), (fb, sb)) if r % 2 == 0 else ((fb, sb), (fa, sa))
                    first[1].extend(per_call_seconds(first[0], a, b, rounds=args.rounds))
                    second[1].extend(per_call_seconds(second[0], a, b, rounds=args.rounds))
            m_ours, m_xla = statistics.median(s_ours) * 1e6, statistics.median(s_xla) * 1e6
            k_ours, k_xla = statistics.median(c_ours) * 1e6 / CHAIN, statistics.median(c_xla) * 1e6 / CHAIN
            bytes_moved = 3 * n * jnp.dtype(dtype).itemsize
            rows.append({"dtype": jnp.dtype(dtype).name, "n": n, "ours_us": m_ours, "xla_us": m_xla,
                         "ratio": m_ours / m_xla, "ours_GBps": bytes_moved / m_ours / 1e3,
                         "xla_GBps": bytes_moved / m_xla / 1e3,
                         "ours_p10_us": quantile(s_ours, 0.1) * 1e6, "ours_p90_us": quantile(s_ours, 0.9) * 1e6,
                         "xla_p10_us": quantile(s_xla, 0.1) * 1e6, "xla_p90_us": quantile(s_xla, 0.9) * 1e6,
                         "chain_ours_us": k_ours, "chain_xla_us": k_xla, "chain_ratio": k_ours / k_xla})
            print(f"{jnp.dtype(dtype).name:9s} 2^{log2:<3d} ours {m_ours:9.1f} us  jnp.add {m_xla:9.1f} us  "
                  f"ratio {m_ours / m_xla:5.3f}   chained: ours {k_ours:8.2f} us  jnp.add {k_xla:8.2f} us  "
                  f"ratio {k_ours / k_xla:5.3f}", flush=True)
    result = {"gpu": gpu, "date": datetime.date.today().isoformat(), "jax": jax.__version__,
              "timing": ("wall clock per call over K back-to-back jitted calls (includes JAX dispatch), median of "
                         f"{args.alternations * args.rounds} rounds per side in alternating order; chain_*: "
                         f"per add in one jitted function of {CHAIN} dependent adds (optimization barriers between them)"),
              "chain": CHAIN, "command_buffers": os.environ.get("XLA_FLAGS", ""),
              "rows": rows}
    out = args.out or os.path.join(os.path.dirname(__file__), "runs",
                                   f"simple-add-{gpu.split(',')[0].replace(' ', '-')}-{result['date']}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    worst = max(rows, key=lambda r: r["ratio"])
    worst_chain = max(rows, key=lambda r: r["chain_ratio"])
    print(f"worst ratio ours/jnp.add: {worst['ratio']:.3f} ({worst['dtype']} n={worst['n']}); chained: "
          f"{worst_chain['chain_ratio']:.3f} ({worst_chain['dtype']} n={worst_chain['n']}); wrote {out}")


if __name__ == "__main__":
    main()
