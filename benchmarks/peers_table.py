"""Tables of a `benchmarks/peers.py` result file: Markdown (docs/performance.md's tables come from
these, through benchmarks/report.py) or fixed width (what peers.py prints last).

    python3 benchmarks/peers_table.py benchmarks/results/h100/decode.json [--fixed]

Decode cases show median µs (% of the copy bandwidth measured in the same run); prefill and mixed
batches median µs (causal TFLOP/s). A peer with profiler kernel times (`kernel_us`: device busy
time per call, no launch gaps or host cost) gets a second column "<peer> kernels". The last
column is ours-auto's speed against the fastest peer (> 1: ours faster; a peer's time is the
shorter of its median and its kernel time, ours is its median); without an ours-auto row, the
first ours-* row's.
"""

from __future__ import annotations

import json
import math
import sys


def kind(case: dict) -> str:
    """decode / prefill / mixed (result files before the "kind" key held decode cases only)."""
    return case.get("kind") or ("decode" if case["tokens"] == case["seqs"] else "prefill")


def impl_names(cases: list) -> list:
    """Implementations in order of first appearance."""
    return list(dict.fromkeys(n for c in cases for n in c["results"]))


def ours_name(names: list) -> str:
    return "ours-auto" if "ours-auto" in names else next((n for n in names if n.startswith("ours")), "ours-auto")


def cell(case: dict, res: dict | None, key: str = "median_us") -> str:
    if res is None:
        return "—"
    if key not in res or "median_us" not in res:
        return "error" if "median_us" not in res else "—"
    scale = res["median_us"] / res[key]  # the derived figures are per median
    # A result timed though its check failed (`PEERS_TIME_WRONG`, experiment builds) says so.
    wrong = " wrong" if "check_error" in res else ""
    if kind(case) == "decode":
        return f"{res[key]:.1f} ({100 * res['copy_fraction'] * scale:.0f} %){wrong}"
    return f"{res[key]:.1f} ({res['TFLOPs'] * scale:.0f} TFLOP/s){wrong}"


def columns(cases: list, names: list) -> list:
    """(header, implementation, key): each implementation's median, and the kernel time of the
    peers that have one."""
    cols = []
    for n in names:
        cols.append((n, n, "median_us"))
        if not n.startswith("ours") and any("kernel_us" in c["results"].get(n, {}) for c in cases):
            cols.append((f"{n} kernels", n, "kernel_us"))
    return cols


def summary(cases: list, ours: str, peers: list) -> str:
    ratios = [c["results"][ours]["speed_vs_fastest_peer"] for c in cases
              if "speed_vs_fastest_peer" in c["results"].get(ours, {})]
    if not ratios or not peers:
        return ""
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    return (f"{ours} against the fastest peer: geometric mean {geo:.2f}×, worst {min(ratios):.2f}× "
            f"over {len(ratios)} cases (speed ratio, > 1 = ours faster).")


def markdown(result: dict) -> str:
    cases = result["cases"]
    names = impl_names(cases)
    ours = ours_name(names)
    peers = [n for n in names if not n.startswith("ours")]
    unit = "median µs (% of copy bandwidth)"
    if any(kind(c) != "decode" for c in cases):
        unit = "median µs (% of copy bandwidth for decode; causal TFLOP/s for prefill and mixed batches)"
    cols = columns(cases, names)
    head = "| case | " + " | ".join(h for h, _, _ in cols) + f" | {ours} vs fastest peer |"
    lines = [f"{result['gpu']}, {result['date']}, copy bandwidth {result['copy_GBps']:.0f} GB/s; {unit}", "", head,
             "|---|" + "---:|" * (len(cols) + 1)]
    for c in cases:
        cells = [cell(c, c["results"].get(n), key) for _, n, key in cols]
        res = c["results"].get(ours, {})
        ratio = f"{res['speed_vs_fastest_peer']:.2f}×" if "speed_vs_fastest_peer" in res else "—"
        if c["notes"] and not any("median_us" in r for r in c["results"].values()):
            cells = ["; ".join(c["notes"])] + [""] * (len(cols) - 1)
        lines.append(f"| {c['name']} | " + " | ".join(cells) + f" | {ratio} |")
    line = summary(cases, ours, peers)
    if line:
        lines += ["", line]
    return "\n".join(lines)


def fixed_width(result: dict) -> str:
    """Plain-text table: per implementation the median µs and % of copy bandwidth (decode) or
    TFLOP/s (prefill, mixed); "ERR" for a failed or wrong implementation, "-" where it did not run."""
    cases = result["cases"]
    names = impl_names(cases)
    ours = ours_name(names)
    peers = [n for n in names if not n.startswith("ours")]
    width = max([len(c["name"]) for c in cases] + [4])
    cols = [max(15, len(n)) for n in names]
    out = [f"{result['gpu']}  copy {result['copy_GBps']:.0f} GB/s  (µs, % of copy bw | TFLOP/s; x = {ours} vs "
           f"fastest peer)",
           f"{'case':<{width}}  " + "  ".join(f"{n:>{w}}" for n, w in zip(names, cols)) + f"  {'x':>6}"]
    for c in cases:
        row = []
        for n, w in zip(names, cols):
            r = c["results"].get(n)
            if r is None:
                s = "-"
            elif "median_us" not in r:
                s = "ERR"
            elif kind(c) == "decode":
                s = f"{r['median_us']:.1f} {100 * r['copy_fraction']:3.0f}%"
            else:
                s = f"{r['median_us']:.1f} {r['TFLOPs']:4.0f}TF"
            row.append(f"{s:>{w}}")
        res = c["results"].get(ours, {})
        x = f"{res['speed_vs_fastest_peer']:.2f}" if "speed_vs_fastest_peer" in res else "-"
        out.append(f"{c['name']:<{width}}  " + "  ".join(row) + f"  {x:>6}")
        for note in c["notes"]:
            out.append(f"{'':<{width}}  note: {note}")
    for key in ("error", "check_error"):
        for n, c in ((n, c) for c in cases for n, r in c["results"].items() if key in r):
            out.append(f"{key} {c['name']} / {n}: {c['results'][n][key][:200]}")
    line = summary(cases, ours, peers)
    if line:
        out.append(line)
    return "\n".join(out)




def plot(data: dict, path: str, dpi: int = 110) -> None:
    """Grouped bars per case: ours and each peer (its profiler kernel time as a second bar,
    "<peer> (kernels)"): % of copy bandwidth for decode cases, causal TFLOP/s for prefill and
    mixed batches. Drawn by peers.py for each run and by report.py for the result files."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def bars(case):
        out = {}
        for n, r in case["results"].items():
            if "median_us" not in r:
                continue
            if n in ("flashinfer-all", "flashinfer-split"):
                continue
            out[n] = r
            if not n.startswith("ours") and "kernel_us" in r:
                f = r["median_us"] / r["kernel_us"]
                out[f"{n} (kernels)"] = {"median_us": r["kernel_us"], "copy_fraction": r["copy_fraction"] * f,
                                         "TFLOPs": r["TFLOPs"] * f}
        return {**case, "results": out}

    cases = [bars(c) for c in data["cases"] if any("median_us" in r for r in c["results"].values())]
    panels = [(k, [c for c in cases if (kind(c) == "decode") == (k == "decode")])
              for k in ("decode", "prefill")]
    panels = [(k, cs) for k, cs in panels if cs]
    fig, axes = plt.subplots(len(panels), 1, squeeze=False,
                             figsize=(max(8, max(len(cs) for _, cs in panels) * 0.6), 4.5 * len(panels)))
    everyone = list(dict.fromkeys(n for c in cases for n in c["results"]))
    for ax, (panel, cs) in zip(axes[:, 0], panels):
        names = [n for n in everyone if any(n in c["results"] for c in cs)]
        width = 0.8 / len(names)
        for i, n in enumerate(names):
            ys = [c["results"].get(n, {}).get("copy_fraction" if panel == "decode" else "TFLOPs", 0) *
                  (100 if panel == "decode" else 1) for c in cs]
            ax.bar([x + i * width for x in range(len(cs))], ys, width, label=n, color=f"C{everyone.index(n) % 10}")
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(cs))])
        ax.set_xticklabels([c["name"] for c in cs], rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("% of copy bandwidth (higher is faster)" if panel == "decode"
                      else "causal TFLOP/s (higher is faster)")
        ax.set_title(f"{data['gpu']}, copy {data['copy_GBps']:.0f} GB/s, {data['date']}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        data = json.load(f)
    print(fixed_width(data) if "--fixed" in sys.argv[2:] else markdown(data))
