"""Ragged paged attention, ours against every peer available on the GPU machine, side by side.

One process, one GPU, the same inputs for every implementation: ours through the torch op
(`torch.ops.xla_gpu.paged_attention`) once per kernel variant (`--variants`, set through
`XGK_RPA_KERNEL`) and through `jax.jit` ("ours-jax", variant auto); FlashInfer (tensor-core batch
decode for decode cases, `BatchPrefillWithPagedKVCacheWrapper` for prefill cases, and both ways
for mixed batches: one prefill wrapper over all rows, or prefill + decode wrappers, the faster
reported as "flashinfer"; `plan` timed apart); JAX's Pallas GPU `paged_attention` (decode only).
Every implementation is checked against a float32 reference (up to 4 sampled sequences a case, up
to 256 sampled rows a sequence; each row's relative L2 error within 2e-2, 3e-2 with fp8 KV) before
it is timed; a failing one is reported and not timed (`PEERS_TIME_WRONG=1` times it anyway, for
experiment builds that skip part of the work).
Timing: CUDA events around replays of a CUDA graph of 10 calls (1 call when a call takes over a
millisecond; torch implementations: the kernels' time, no host cost per call; `--eager`: events
around each eager call), or wall clock over back-to-back jitted calls (JAX: includes JAX's
dispatch); warm-up first, 3 rounds in alternating order, >= 30 samples (fewer, counted, when a call
is so long that 10 would take over 2 s), medians with p10/p90. The KV pool holds at least 512 MiB
(far above L2) with pages handed out in random order; inputs are uniform random, never zeros, q
scaled so that the logits have a standard deviation of 2 (`--logit-std`; `flat`: q in [-1, 1],
logits of std 1/3, 2/3 with fp8 KV: the inputs of results recorded before commit c03b04e). The
copy bandwidth is measured in the same run; each case reports its fewest bytes
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
import traceback

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, HERE)
# The modules beside this one (benchmarks/, on the path above): the matrix, the inputs and their
# check, the timers, the implementations (importing it sets the libraries' environment), the table.
import peers_table  # noqa: E402
import peers_timing as timing  # noqa: E402
from peers_cases import GEOMETRIES, MAX_KV_BYTES, bytes_min, causal_flops, decode_cell, kv_elem_bytes, \
    suite_cases  # noqa: E402
from peers_impls import MIX_WAYS, FlashInfer, Ours, OursJax, PallasDecode, Skip  # noqa: E402
from peers_inputs import LOGIT_STD, LOGIT_STD_HELP, MIN_POOL_BYTES, Inputs, check, logit_std_arg, \
    tolerance  # noqa: E402
from peers_timing import kernel_time_us, time_cuda  # noqa: E402

# Also record each torch implementation's device busy time per call (profiler; --no-kernel-time).
KERNEL_TIME = True


def copy_bandwidth():
    """Device-to-device copy of 1 GiB: bytes read + written over the median time, GB/s."""
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
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


def run_case(case, ci, impls, copy_gbs, logit_std=LOGIT_STD):
    """Checks every implementation on one case, then times those that passed."""
    free, _ = torch.cuda.mem_get_info()
    if memory_needed(case) > free:
        case.notes.append(f"skipped: needs ~{memory_needed(case) / 2**30:.1f} GiB with the peers' copies, "
                          f"{free / 2**30:.1f} GiB free")
        print(f"[{case.name}] {case.notes[-1]}", flush=True)
        return
    inp = Inputs(case, seed=ci, logit_std=logit_std)
    timers, calls = {}, {}
    tol = tolerance(inp)

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
                err = check(inp, case, rows_fn)
            except Skip as e:
                case.notes.append(f"{name} skipped: {e}")
                continue
            except Exception as e:  # noqa: BLE001
                failed(name, e)
                continue
            case.results[name] = {"rel_l2_error": err.rel_l2, "worst_row_rel_error": err.worst_row,
                                  "max_abs_error": err.max_abs, "timing": how, **extra, "samples": []}
            if not err.worst_row <= tol:
                wrong = f"a row's rel L2 error {err.worst_row:.3g} > {tol} (all rows {err.rel_l2:.3g}, " \
                    f"max abs {err.max_abs:.3g})"
                print(f"[{case.name}] {name} WRONG: {wrong}", flush=True)
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
    global KERNEL_TIME
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
    ap.add_argument("--logit-std", type=logit_std_arg, default=LOGIT_STD, help=LOGIT_STD_HELP)
    ap.add_argument("--quick", action="store_true", help="a small subset of the suite")
    ap.add_argument("--filter", default=None, help="only cases whose name contains one of these (comma separated)")
    ap.add_argument("--cells", default=None,
                    help="decode cells in place of the suite's: BxCTX[:KV_DTYPE], comma separated (e.g. "
                         "1x16384,1x32768:float8_e4m3fn)")
    ap.add_argument("--out", default=None, help="result file (.json; the plot goes next to it as .png)")
    ap.add_argument("--rederive", metavar="FILE.json", default=None,
                    help="no run: recompute a result file's derived figures (ratios) and redraw its plot")
    args = ap.parse_args()
    logit_std = args.logit_std
    if args.rederive:
        with open(args.rederive) as f:
            result = rederive(json.load(f))
        with open(args.rederive, "w") as f:
            json.dump(result, f, indent=1)
        plot(result, os.path.splitext(args.rederive)[0] + ".png")
        return
    timing.configure(graphs=not args.eager, cold_l2=args.cold_l2)
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
                  "protocol": __doc__.split("\n\n")[1], "l2": "cold" if timing.COLD_L2 else "warm",
                  "logit_std": "flat" if logit_std is None else logit_std, "cases": [
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
            run_case(case, ci, impls, copy_gbs, logit_std)
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
