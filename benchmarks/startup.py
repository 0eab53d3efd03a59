"""The first call in a fresh process: how long a new container, CI runner or autoscaled server
waits before the library's first result.

Each measurement is a new Python process with its own CUDA JIT cache folder (`CUDA_CACHE_PATH`):
"cold" gives it an empty folder (a fresh machine), "warm" runs the same process again on the
folder the cold run filled. Imports, the framework's own start (CUDA context, allocator) and input
creation happen before the clock starts; the clock covers the library's first call to its
result (synchronized): loading the kernels into the context (a cubin, or the driver's JIT of the
PTX of each kernel the call launches) and the call itself. Then a second call of the same shape,
for scale. Code paths: "native" (the default: the sm_90a cubin on Hopper) and "ptx" (the
`XGK_PTX_ARCH` image JIT-compiled kernel by kernel).

Calls (Llama-3-8B attention geometry, bf16, page 16): `simple_add` of 1M elements; a decode
step of 4 sequences × 2k keys; a prefill of 1 × 2k rows. Through torch (`torch.ops.xla_gpu`, CUDA
tensors) and through JAX (`jax.jit` of the custom call: its XLA compile is inside the clock, and
reported alone for the second, cached shape).

    python3 benchmarks/startup.py [--out FILE.json] [--ptx-arch sm_90a] [--frontends torch,jax]

Prints a table last; writes FILE.json (default `benchmarks/runs/startup-<gpu>-<date>.json`) and,
where matplotlib is installed, FILE.png (`--replot FILE.json` draws it again).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, os, sys, time
frontend = sys.argv[1]
t_import = time.perf_counter()
import numpy as np
rng = np.random.default_rng(0)
H, KVH, D, PAGE = 32, 8, 128, 16

def decode_inputs(seqs, ctx):
    pages_per_seq = ctx // PAGE
    total_pages = seqs * pages_per_seq + 1
    q = rng.standard_normal((seqs, H, D), dtype=np.float32)
    kv = rng.standard_normal((total_pages, PAGE, 2 * KVH, D), dtype=np.float32)
    table = rng.permutation(total_pages)[: seqs * pages_per_seq].reshape(seqs, pages_per_seq).astype(np.int32)
    return q, kv, np.full(seqs, ctx, np.int32), table, np.arange(seqs + 1, dtype=np.int32), np.array([seqs], np.int32)

def prefill_inputs(rows):
    q, kv, lens, table, _, n = decode_inputs(1, rows)
    q = rng.standard_normal((rows, H, D), dtype=np.float32)
    return q, kv, lens, table, np.array([0, rows], np.int32), n

result = {"frontend": frontend}
if frontend == "torch":
    import torch
    import xla_gpu_kernels.torch  # noqa: F401
    result["import_s"] = time.perf_counter() - t_import
    dev = torch.device("cuda")
    def put(arrays, dtype):
        return [torch.from_numpy(a).to(dev, dtype=dtype if a.dtype == np.float32 else torch.int32) for a in arrays]
    a, b = (torch.randn(1 << 20, device=dev) for _ in range(2))
    dec = put(decode_inputs(4, 2048), torch.bfloat16)
    pre = put(prefill_inputs(2048), torch.bfloat16)
    torch.cuda.synchronize()
    calls = {
        "simple_add": lambda: torch.ops.xla_gpu.simple_add(a, b),
        "decode_4x2k": lambda: torch.ops.xla_gpu.paged_attention(*dec, sm_scale=D ** -0.5),
        "prefill_1x2k": lambda: torch.ops.xla_gpu.paged_attention(*pre, sm_scale=D ** -0.5),
    }
    sync = torch.cuda.synchronize
else:
    import jax, jax.numpy as jnp
    import xla_gpu_kernels.jax as xk
    result["import_s"] = time.perf_counter() - t_import
    def put(arrays):
        return [jnp.asarray(x, jnp.bfloat16 if x.dtype == np.float32 else jnp.int32) for x in arrays]
    a = jnp.asarray(rng.standard_normal(1 << 20, dtype=np.float32))
    b = jnp.asarray(rng.standard_normal(1 << 20, dtype=np.float32))
    dec, pre = put(decode_inputs(4, 2048)), put(prefill_inputs(2048))
    jax.block_until_ready((a, b, dec, pre))
    add = jax.jit(xk.simple_add)
    attn = jax.jit(xk.ragged_paged_attention, static_argnames=("sm_scale",))
    calls = {
        "simple_add": lambda: add(a, b),
        "decode_4x2k": lambda: attn(*dec, sm_scale=D ** -0.5),
        "prefill_1x2k": lambda: attn(*pre, sm_scale=D ** -0.5),
    }
    sync = lambda: None
for name, call in calls.items():
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        out = call()
        if frontend == "jax":
            out.block_until_ready()
        sync()
        times.append(time.perf_counter() - t0)
    result[name] = {"first_s": times[0], "second_s": times[1]}
import xla_gpu_kernels
result["library"] = xla_gpu_kernels.version()
print("RESULT " + json.dumps(result))
"""


def run_child(frontend: str, mode: str, cache_dir: str, ptx_arch: str) -> dict:
    env = dict(os.environ, CUDA_CACHE_PATH=cache_dir, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    env.pop("XGK_PTX_ARCH", None)
    if mode == "ptx":
        env["XGK_PTX_ARCH"] = ptx_arch
    proc = subprocess.run([sys.executable, "-c", CHILD, frontend], env=env, capture_output=True, text=True, timeout=600)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{frontend} {mode}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def plot(result: dict, path: str) -> None:
    """First-call times per frontend, code and driver cache (log scale), where matplotlib exists."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    calls = ["simple_add", "decode_4x2k", "prefill_1x2k"]
    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(rows)
    for i, r in enumerate(rows):
        xs = [c + (i - len(rows) / 2 + 0.5) * width for c in range(len(calls))]
        ax.bar(xs, [max(r[c]["first_s"], 1e-4) for c in calls], width, label=f"{r['frontend']}, {r['mode']}, {r['cache']} cache")
    ax.set_yscale("log")
    ax.set_xticks(range(len(calls)), [f"first {c}" for c in calls])
    ax.set_ylabel("seconds (imports excluded)")
    ax.axhline(40, color="r", lw=0.8, ls="--")
    ax.text(2.4, 30, "0.1.0: 40 s (JIT of the whole image)", ha="right", fontsize=8, color="r")
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(f"{result['gpu']}, driver {result['driver']}, {result['date']}: the first call in a fresh process")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--ptx-arch", default="sm_90a", help="the PTX image of the 'ptx' path (XGK_PTX_ARCH)")
    ap.add_argument("--frontends", default="torch,jax")
    ap.add_argument("--replot", metavar="FILE.json", default=None, help="draw FILE.png from FILE.json, run nothing")
    args = ap.parse_args()
    if args.replot:
        plot(json.load(open(args.replot)), args.replot.rsplit(".", 1)[0] + ".png")
        return 0
    import torch

    gpu = torch.cuda.get_device_name(0)
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip()
    rows = []
    for frontend in args.frontends.split(","):
        for mode in ["native", "ptx"]:
            with tempfile.TemporaryDirectory(prefix="xgk-cuda-cache-") as cache:
                for cache_state in ["cold", "warm"]:
                    r = run_child(frontend, mode, cache, args.ptx_arch)
                    r.update(mode=mode, cache=cache_state)
                    rows.append(r)
                    print(json.dumps(r), flush=True)
    calls = ["simple_add", "decode_4x2k", "prefill_1x2k"]
    result = {
        "suite": "startup",
        "gpu": gpu,
        "driver": driver,
        "torch": torch.__version__,
        "date": datetime.date.today().isoformat(),
        "argv": sys.argv,
        "ptx_arch": args.ptx_arch,
        "library": rows[0]["library"] if rows else None,
        "rows": rows,
    }
    out = args.out or os.path.join(HERE, "runs", f"startup-{gpu.replace(' ', '_')}-{result['date']}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    plot(result, out.rsplit(".", 1)[0] + ".png")
    print(f"\n{gpu}, driver {driver}; {result['library']}")
    print("| frontend | code | driver cache | " + " | ".join(f"{c} first (s)" for c in calls) + " | decode second (ms) |")
    print("|---|---|---|" + "---:|" * (len(calls) + 1))
    for r in rows:
        firsts = " | ".join(f"{r[c]['first_s']:.3f}" for c in calls)
        print(f"| {r['frontend']} | {r['mode']} | {r['cache']} | {firsts} | {1e3 * r['decode_4x2k']['second_s']:.2f} |")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
