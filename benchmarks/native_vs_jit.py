"""Native code against the driver's JIT of the same PTX: merges peers.py runs of one suite made
back to back on one GPU — the default build (the cubin), `XGK_PTX_ARCH=sm_90a` (the PTX
JIT-compiled by the driver), and the cubin again (its spread is the noise) — into one result file
with a plot.

    python3 benchmarks/native_vs_jit.py OUT.json decode:NATIVE.json,PTX.json,NATIVE2.json [prefill:...]
"""

from __future__ import annotations

import json
import math
import sys


def medians(path: str) -> tuple[dict, dict]:
    data = json.load(open(path))
    cells = {c["name"]: c["results"]["ours-auto"]["median_us"] for c in data["cases"]
             if "median_us" in c["results"].get("ours-auto", {})}
    return cells, data


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def main() -> int:
    out, specs = sys.argv[1], sys.argv[2:]
    result = {"suite": "native-vs-jit", "suites": {}}
    for spec in specs:
        suite, files = spec.split(":", 1)
        (a, meta), (b, _), (c, _) = (medians(f) for f in files.split(","))
        names = [n for n in a if n in b and n in c]
        cells = [{"name": n, "cubin_us": [a[n], c[n]], "jit_us": b[n], "jit_over_cubin": 2 * b[n] / (a[n] + c[n]),
                  "cubin_over_cubin": c[n] / a[n]} for n in names]
        result["suites"][suite] = {
            "cells": cells,
            "geomean_jit_over_cubin": geomean([x["jit_over_cubin"] for x in cells]),
            "geomean_cubin_over_cubin": geomean([x["cubin_over_cubin"] for x in cells]),
            "argv": meta.get("argv"),
        }
        for k in ("gpu", "driver", "date", "versions", "copy_GBps"):
            result.setdefault(k, meta.get(k))
    json.dump(result, open(out, "w"), indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot")
        return 0
    suites = list(result["suites"].items())
    fig, axes = plt.subplots(1, len(suites), figsize=(6 * len(suites), 4.5), squeeze=False)
    for ax, (suite, s) in zip(axes[0], suites):
        names = [x["name"].replace("G1 ", "") for x in s["cells"]]
        ys = range(len(names))
        ax.barh([y + 0.2 for y in ys], [x["jit_over_cubin"] for x in s["cells"]], height=0.4, label="JIT / cubin")
        ax.barh([y - 0.2 for y in ys], [x["cubin_over_cubin"] for x in s["cells"]], height=0.4,
                label="cubin / cubin (noise)")
        ax.set_yticks(list(ys), names, fontsize=7)
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_xlim(0.9, 1.1)
        ax.set_title(f"{suite}: JIT/cubin geomean {s['geomean_jit_over_cubin']:.3f}")
        ax.legend(fontsize=7)
    fig.suptitle(f"{result['gpu']}, {result['date']}: time of the JIT-compiled PTX over the cubin's")
    fig.tight_layout()
    fig.savefig(out.rsplit(".", 1)[0] + ".png", dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
