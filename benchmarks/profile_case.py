"""Runs our torch op on one paged-attention case a few times, for a profiler (Nsight Compute,
compute-sanitizer) to wrap: the same inputs as benchmarks/peers.py (G1 geometry unless told).

    ncu --kernel-name regex:rpa_tile --launch-skip 1 --launch-count 1 \\
        python3 benchmarks/profile_case.py --seqs 8192x8192 --calls 3

With `--section SourceCounters` ncu samples each SASS instruction; `benchmarks/source_profile.py`
reads those counters (exported with `ncu -i REPORT --page source --csv --print-source sass`).

`--impl flashinfer` makes the same calls through FlashInfer's wrapper as peers.py builds it (its
plan made once, before the calls), to profile the peer beside ours.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_cases import GEOMETRIES, Case  # noqa: E402
from peers_impls import FlashInfer, Ours  # noqa: E402
from peers_inputs import LOGIT_STD, LOGIT_STD_HELP, Inputs, logit_std_arg  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqs", required=True, help="q_len x kv_len [* count], comma separated: 2048x2048,1x4096*64")
    ap.add_argument("--geometry", default="G1", choices=list(GEOMETRIES))
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--kernel", default="auto", help="a peers.py variant of ours for the calls (auto, auto:st5, ...)")
    ap.add_argument("--kv-dtype", default="bfloat16", help="KV cache dtype: bfloat16, float8_e4m3fn, float8_e5m2")
    ap.add_argument("--logit-std", type=logit_std_arg, default=LOGIT_STD, help=LOGIT_STD_HELP)
    ap.add_argument("--impl", default="ours", choices=["ours", "flashinfer"], help="whose kernels make the calls")
    args = ap.parse_args()
    seqs = []
    for part in args.seqs.split(","):
        shape, _, count = part.partition("*")
        q, kv = (int(x) for x in shape.split("x"))
        seqs += [(q, kv)] * int(count or 1)
    case = Case(f"profile {args.seqs}", args.geometry, seqs, kv_dtype=args.kv_dtype)
    inp = Inputs(case, seed=0, logit_std=args.logit_std)
    if args.impl == "flashinfer":
        fi = FlashInfer()
        out = torch.empty_like(inp.q)
        plan = fi._decode if case.decode else fi._prefill
        run, _ = plan(inp, case, range(len(seqs)), inp.q, out, False)
    else:
        Ours(args.kernel).select()  # also imports our torch op
        run = lambda: torch.ops.xla_gpu.paged_attention(  # noqa: E731
            inp.q, inp.kv, inp.kv_lens, inp.page_indices, inp.cu_q_lens, inp.num_seqs, sm_scale=inp.sm_scale,
            sliding_window=inp.window, soft_cap=inp.soft_cap, k_scale=inp.k_scale, v_scale=inp.v_scale)
    for _ in range(args.calls):
        run()
    torch.cuda.synchronize()
    print(f"{args.calls} calls of {case.name} done")


if __name__ == "__main__":
    main()
