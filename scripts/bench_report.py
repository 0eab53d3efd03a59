#!/usr/bin/env python3
"""Turns a criterion log of benches/kernels.rs (run on a GPU) into a result file:
device, date, versions, median time and achieved bandwidth per case, as a fraction of the
device-to-device copy bandwidth measured in the same run.

    python3 scripts/bench_report.py BENCH_LOG DEVICE_TXT > benchmarks/runs/<date>-<gpu>.md
"""

import re
import sys
from datetime import date

UNITS = {"ps": 1e-6, "ns": 1e-3, "µs": 1.0, "us": 1.0, "ms": 1e3, "s": 1e6}
TPUT = {"B/s": 1e-9, "KiB/s": 1024 / 1e9, "MiB/s": 2**20 / 1e9, "GiB/s": 2**30 / 1e9, "TiB/s": 2**40 / 1e9}


def parse(log: str):
    rows, name = [], None
    for line in log.splitlines():
        m = re.match(r"^(\S+/\S+)\s*(time:.*)?$", line.strip())
        if m and "/" in m.group(1) and not line.startswith(" "):
            name = m.group(1)
        t = re.search(r"time:\s+\[([\d.]+) (\S+) ([\d.]+) (\S+) ([\d.]+) (\S+)\]", line)
        if t and name:
            lo, med, hi = (float(t.group(i)) * UNITS[t.group(i + 1)] for i in (1, 3, 5))
            rows.append({"name": name, "lo": lo, "median": med, "hi": hi, "gbps": None})
        g = re.search(r"thrpt:\s+\[([\d.]+) (\S+) ([\d.]+) (\S+) ([\d.]+) (\S+)\]", line)
        if g and rows and rows[-1]["gbps"] is None:
            rows[-1]["gbps"] = float(g.group(3)) * TPUT[g.group(4)]
    return rows


def main():
    log, device = open(sys.argv[1]).read(), open(sys.argv[2]).read().strip()
    rows = parse(log)
    copy = next((r["gbps"] for r in rows if r["name"].startswith("copy/")), None)
    print(f"# Benchmark results: {date.today().isoformat()}\n")
    print("Device and versions:\n\n```\n" + device + "\n```\n")
    print("`cargo bench --bench kernels` (criterion, CUDA-event timing of back-to-back launches, 20 samples; "
          "median with the 95% interval's ends). GB/s counts the fewest bytes a call must move "
          "(KV read once, q read and output written once; simple_add 3n elements).\n")
    print("| case | median µs | [low, high] µs | GB/s | % of copy bandwidth |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        frac = f"{100 * r['gbps'] / copy:.0f} %" if copy and r["gbps"] else ""
        gb = f"{r['gbps']:.0f}" if r["gbps"] else ""
        print(f"| {r['name']} | {r['median']:.1f} | [{r['lo']:.1f}, {r['hi']:.1f}] | {gb} | {frac} |")


if __name__ == "__main__":
    main()
