"""Markdown table of a `benchmarks/peers.py` result file (the README's tables come from these).

    python3 benchmarks/peers_table.py benchmarks/results/peers-decode-G1-H100-...json
"""

from __future__ import annotations

import json
import sys


def markdown(result: dict) -> str:
    cases = result["cases"]
    names = []
    for c in cases:
        for n in c["results"]:
            if n not in names:
                names.append(n)
    peers = [n for n in names if not n.startswith("ours")]
    head = "| case | " + " | ".join(names) + " | ours-auto vs fastest peer |"
    lines = [f"{result['gpu']}, {result['date']}, copy bandwidth {result['copy_GBps']:.0f} GB/s; "
             f"median µs (% of copy bandwidth)", "", head, "|---|" + "---:|" * (len(names) + 1)]
    for c in cases:
        cells = []
        for n in names:
            r = c["results"].get(n)
            if r is None:
                cells.append("—")
            elif "median_us" in r:
                cells.append(f"{r['median_us']:.1f} ({100 * r['copy_fraction']:.0f} %)")
            else:
                cells.append("error")
        ours = c["results"].get("ours-auto", {})
        ratio = f"{ours['speed_vs_fastest_peer']:.2f}×" if "speed_vs_fastest_peer" in ours else "—"
        if c["notes"] and not any("median_us" in r for r in c["results"].values()):
            cells = ["; ".join(c["notes"])] + [""] * (len(names) - 1)
        lines.append(f"| {c['name']} | " + " | ".join(cells) + f" | {ratio} |")
    ratios = [c["results"]["ours-auto"]["speed_vs_fastest_peer"] for c in cases
              if "speed_vs_fastest_peer" in c["results"].get("ours-auto", {})]
    if ratios and peers:
        geo = 1.0
        for r in ratios:
            geo *= r
        geo **= 1 / len(ratios)
        lines += ["", f"ours-auto against the fastest peer: geometric mean {geo:.2f}×, worst {min(ratios):.2f}× "
                      f"over {len(ratios)} cases (speed ratio, > 1 = ours faster)."]
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(markdown(json.load(f)))
