"""Where a kernel's warps spend their time, instruction by instruction: Nsight Compute's source
counters (warp-state sampling per SASS instruction) folded into runs of one opcode along a hot
path, each with its share of the path's samples and its main stall reasons.

    ncu --kernel-name regex:rpa_tile_ws --launch-skip 1 --launch-count 1 --section SourceCounters \\
        --import-source no -o prof python3 benchmarks/profile_case.py --seqs 8192x8192 --calls 3
    ncu -i prof.ncu-rep --page source --csv --print-source sass > prof.csv
    python3 benchmarks/source_profile.py prof.csv [--executed N] [--top 12]

The hot path is the instructions executed exactly N times (a loop body's fast path: each of its
instructions runs once an iteration a warp; default: the count whose instructions hold the most
samples). Samples are proportional to the time warps spend at an instruction (issuing it or
stalled before it), so a run's share is its share of a warp's time on the path. Instructions of
the path's branches taken rarely (another execution count) are left out; `--executed 0` lists
every instruction instead.
"""

from __future__ import annotations

import argparse
import collections
import csv
import re


def read(path):
    """(offset, opcode, SASS text, samples, executions, {stall reason: samples}) per instruction."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header_at = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    header = rows[header_at]
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "(Not" not in h]
    out = []
    for r in rows[header_at + 1:]:
        if len(r) < len(header) or not r[col["Address"]].startswith("0x"):
            continue
        text = r[col["Source"]].strip()
        opcode = re.sub(r"^@!?U?P\w+\s+", "", text).split(" ")[0]
        out.append((int(r[col["Address"]], 16), opcode, text, int(r[col["Warp Stall Sampling (All Samples)"]] or 0),
                    int(r[col["Instructions Executed"]] or 0),
                    {h[len("stall_"):]: int(r[col[h]] or 0) for h in reasons}))
    base = min(i[0] for i in out)
    return [(a - base, *rest) for a, *rest in out]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu -i REPORT --page source --csv --print-source sass")
    ap.add_argument("--executed", type=int, default=None, help="the hot path's execution count (0: every instruction)")
    ap.add_argument("--top", type=int, default=3, help="stall reasons shown per run")
    args = ap.parse_args()
    ins = read(args.csv)
    total = sum(i[3] for i in ins)
    by_count = collections.Counter()
    for _, _, _, samples, executed, _ in ins:
        by_count[executed] += samples
    executed = args.executed if args.executed is not None else by_count.most_common(1)[0][0]
    path = [i for i in ins if executed == 0 or i[4] == executed]
    path_samples = sum(i[3] for i in path) or 1
    print(f"{len(ins)} instructions, {total} samples; the path: {len(path)} instructions executed "
          f"{executed} times, {path_samples} samples ({100 * path_samples / max(total, 1):.1f} %)")
    print(f"{'offset':>7} {'run':<30} {'n':>3} {'share':>6} {'cum':>6}  stall reasons (share of the run)")
    cum = 0
    runs = []
    for offset, opcode, _, samples, _, stalls in path:
        key = opcode.split(".")[0]
        if not runs or runs[-1]["key"] != key:
            runs.append({"key": key, "opcode": opcode, "offset": offset, "n": 0, "samples": 0,
                         "stalls": collections.Counter()})
        run = runs[-1]
        run["n"] += 1
        run["samples"] += samples
        run["stalls"].update(stalls)
    for run in runs:
        cum += run["samples"]
        top = ", ".join(f"{k} {100 * v / run['samples']:.0f} %" for k, v in run["stalls"].most_common(args.top) if v)
        print(f"{run['offset']:7x} {run['opcode'][:30]:<30} {run['n']:3d} {100 * run['samples'] / path_samples:5.1f}% "
              f"{100 * cum / path_samples:5.1f}%  {top}")


if __name__ == "__main__":
    main()
