"""How much of an engine-step mix's time could its decode and prefill rows share?

A mixed batch (prefill chunks and decode rows in one call) runs its decode rows in the pipelined
decode kernel and its prefill rows in the tile kernel, one after the other on the call's stream.
The decode rows are memory-bound and the prefill rows compute-bound, so each leaves the other's
resource idle. This probe bounds what overlapping them could gain: for each of `peers.py`'s mixes
it times, as CUDA-graph replays (µs per step, medians of 3 rounds):

- `mix`: the whole mix as one call (what the library runs);
- `decode` / `prefill`: the mix's decode rows / prefill rows as calls of their own;
- `serial`: both calls on one stream;
- `concurrent`: both calls on two streams of one graph (decode first, prefill first): the
  hardware's own interleaving of the two grids, the bound a one-stream overlap approaches.

    python3 benchmarks/mix_overlap.py [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_impls  # noqa: E402,F401  (the in-tree package on the path, the libraries' environment)
from peers_cases import MIXES, Case  # noqa: E402
from peers_inputs import Inputs  # noqa: E402
from peers_timing import time_cuda  # noqa: E402


def call_of(inp):
    import xla_gpu_kernels.torch  # noqa: F401  (defines torch.ops.xla_gpu)
    args = (inp.q, inp.kv, inp.kv_lens, inp.page_indices, inp.cu_q_lens, inp.num_seqs)
    kw = dict(sm_scale=inp.sm_scale, sliding_window=inp.window, soft_cap=inp.soft_cap)
    return lambda: torch.ops.xla_gpu.paged_attention(*args, **kw)


def graph_of(body, reps=10):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        body()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            body()
    return lambda: [t / reps for t in time_cuda(g.replay, warmup=3, iters=10)]


def two_streams(first, second, side):
    def body():
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        first()
        with torch.cuda.stream(side):
            second()
        main.wait_stream(side)
    return body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rows = []
    for name, seqs in MIXES:
        mix = Case(name, "G1", seqs)
        dec = Case(name + " decode", "G1", [s for s in seqs if s[0] == 1])
        pre = Case(name + " prefill", "G1", [s for s in seqs if s[0] > 1])
        f_mix, f_dec, f_pre = (call_of(Inputs(c, seed=7)) for c in (mix, dec, pre))
        side = torch.cuda.Stream()
        bodies = {
            "mix": f_mix,
            "decode": f_dec,
            "prefill": f_pre,
            "serial": lambda: (f_dec(), f_pre()),
            "concurrent decode first": two_streams(f_dec, f_pre, side),
            "concurrent prefill first": two_streams(f_pre, f_dec, side),
        }
        timers = {k: graph_of(b) for k, b in bodies.items()}
        samples = {k: [] for k in timers}
        for _ in range(3):
            for k, t in timers.items():
                samples[k] += t()
        med = {k: statistics.median(v) for k, v in samples.items()}
        rows.append({"mix": name, "median_us": med})
        print(name, {k: round(v, 1) for k, v in med.items()}, flush=True)
    props = torch.cuda.get_device_properties(0)
    result = {"gpu": props.name, "torch": torch.__version__, "rows": rows}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    print(f"{'mix':<40} " + " ".join(f"{k[:18]:>18}" for k in rows[0]["median_us"]))
    for r in rows:
        print(f"{r['mix']:<40} " + " ".join(f"{v:>18.1f}" for v in r["median_us"].values()))


if __name__ == "__main__":
    main()
