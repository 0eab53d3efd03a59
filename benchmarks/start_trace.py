"""Where a prefill call's start goes: the warp-specialized kernel's start trace, per step.

Needs a library built with `XGK_TRACE=1` (`kernels-gpu::kernels::prefill::hopper::trace`): each
block marks its steps (entry, grid dependency wait, block 0's plan items done, plan written /
ready, roles split, first pair taken from the schedule ring, first pair, the item's rows, first K
and Q copies issued, consumer 0's first Q, first K, first S, first item done, last item done) as
pairs of `%globaltimer` (ns, across blocks) and `%clock64` (cycles, within a block) after the
call's workspace. This script runs our torch op on the prefill and short suites' cases (G1
unless `--geometry`), gives each call a workspace with room for the trace, and prints, per case
and step, the time from the call's first block entry: median and max over the blocks, and block
0's (the planner's) and one other block's from their cycle counters.

Two ways per case: `alone` (a synchronize before each call: no kernel before it to overlap) and
`queued` (10 calls back to back, the way the benchmarks time them: with programmatic dependent
launch a call's blocks start under the one before and wait for it; the trace of the 9th call).

    python3 benchmarks/start_trace.py [--geometry G1] [--cases 1x512/2048,4x256/2048,...] [--out F.json]

With `--tiles`, the consumers' main loop too: each consumer's thread 0 marks its turn, its
products' issue, its S's completion, its softmax's end and the previous P V's completion on each
of the block's first 64 tiles (`%clock64`); the script prints, per step, the median cycles over
the tiles and blocks of the `alone` calls (the steady tiles: the first 4 of each block left out),
and at the items' boundaries: an item's last softmax to the next item's first turn ("item edge",
against "softmax to next turn" inside an item), that first tile's S latency and the new item's
first two periods, and the edge's parts ("edge: ..."): to the consumer's next pair (split: to
the last P V's completion, to the stores', to the pair), to its rows, to Q ready (with fp8 KV
converted), to the first K in the ring, to the turn, and when the first K was copied and (fp8)
widened, from the last softmax (negative: before). `--kv-dtype` times fp8 KV (k_scale 0.5,
v_scale 0.75, as peers.py).

A timing tool, not a benchmark: the marks cost a few stores per block (per tile with `--tiles`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

# The Python kernels of the torch op (ctypes into the C API), whose workspace this script sizes;
# the native ones allocate it in libtorch.
os.environ["XGK_TORCH_KERNELS"] = "python"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# benchmarks/: the suites' geometries, inputs and variants (peers.py's modules).
from peers_cases import GEOMETRIES, Case  # noqa: E402
from peers_impls import Ours  # noqa: E402
from peers_inputs import LOGIT_STD, LOGIT_STD_HELP, Inputs, logit_std_arg  # noqa: E402

POINTS = 16
STEPS = ["entry", "prerequisites", "plan written", "plan ready", "first pair", "item rows", "first K issued",
         "first Q issued", "first Q ready", "first K ready", "first S", "first item done", "consumer done",
         "roles split", "plan items done", "pair taken"]
TRACE_SLACK = 8 << 20  # bytes past the workspace: POINTS pairs of 8-byte words per block, then the tile trace
TILE_EVENTS, TRACED_TILES, TRACED_CONSUMERS = 13, 64, 3
TILE_TRACE_AFTER_BLOCKS, TILE_TRACED_BLOCKS = 1024, 256  # trace.rs: where the tile trace starts, whose
TILE_STEPS = ["turn begun", "issued", "S ready", "softmax done", "P V done", "item entered", "rows ready",
              "Q ready", "K ready", "K issued", "K converted", "last P V done", "stores done"]
STEADY = 5  # the events every tile of a consumer has (the others: an item's first tile, or the producer's)


class TracedWorkspaces:
    """Installed for the whole run (every call's marks land after its workspace, warm-up calls'
    too): the op's uint8 workspace allocations (`xla_gpu_kernels.torch`) get TRACE_SLACK bytes
    more, zeroed: from `ready` (zeroed before, so that queued calls have no kernel between them)
    while it lasts, else allocated; `taken` keeps (tensor, asked bytes) of each."""

    def __init__(self):
        self.ready, self.taken = [], []
        real = torch.empty

        def empty(*args, **kw):
            if kw.get("dtype") is torch.uint8 and len(args) == 1:
                n = int(args[0])
                t = self.ready.pop(0) if self.ready else torch.zeros(n + TRACE_SLACK, dtype=torch.uint8,
                                                                     device=kw.get("device"))
                self.taken.append((t, n))
                return t[:n]
            return real(*args, **kw)
        torch.empty = empty

    def reset(self, ready=()):
        self.ready, self.taken = list(ready), []


def read_trace(buf, nbytes):
    """The blocks' marks: a list per block of (ns, cycles) or None per step."""
    at = -(-nbytes // 128) * 128
    words = buf[at:at + TILE_TRACE_AFTER_BLOCKS * POINTS * 16].view(torch.int64).cpu().tolist()
    blocks = []
    for b in range(len(words) // (2 * POINTS)):
        marks = [(words[2 * (b * POINTS + i)], words[2 * (b * POINTS + i) + 1]) for i in range(len(STEPS))]
        if marks[0][0] == 0:
            break
        blocks.append([m if m[0] else None for m in marks])
    return blocks


def read_tiles(buf, nbytes, nblocks):
    """The tile trace: per block, per consumer, per tile, the TILE_EVENTS cycle words (0: unmarked)."""
    at = -(-nbytes // 128) * 128 + TILE_TRACE_AFTER_BLOCKS * POINTS * 16
    nblocks = min(nblocks, TILE_TRACED_BLOCKS)
    n = nblocks * TRACED_CONSUMERS * TRACED_TILES * TILE_EVENTS
    words = buf[at:at + 8 * n].view(torch.int64).cpu().tolist()
    if len(words) < n:
        return []
    at_tile = lambda b, c, t: ((b * TRACED_CONSUMERS + c) * TRACED_TILES + t) * TILE_EVENTS  # noqa: E731
    return [[[words[at_tile(b, c, t):at_tile(b, c, t) + TILE_EVENTS] for t in range(TRACED_TILES)]
             for c in range(TRACED_CONSUMERS)] for b in range(nblocks)]


def summarize_tiles(tiles, first=4):
    """Per tile step, median cycles over the steady tiles (from the `first`-th on, both consumers
    marked, every event of the tile and of the one before) and the blocks: a tile's period (turn
    to next turn), the turn's wait (the previous tile's P V done to the turn), the issue (turn to
    turn ended), S's latency (issued to S ready), the softmax, the wait for the P V after it, and
    consumer 1's turn after consumer 0's."""
    cols = {k: [] for k in ("period", "turn wait", "issue", "S latency", "softmax", "P V wait", "c1 after c0")}
    for blk in tiles:
        c0, c1 = blk[0], blk[1]
        for t in range(first, TRACED_TILES - 1):
            a, nxt, prev, b = c0[t], c0[t + 1], c0[t - 1], c1[t]
            if not all(all(x[:STEADY]) for x in (a, nxt, prev, b)):
                continue
            cols["period"].append(nxt[0] - a[0])
            cols["turn wait"].append(a[0] - prev[4])
            cols["issue"].append(a[1] - a[0])
            cols["S latency"].append(a[2] - a[1])
            cols["softmax"].append(a[3] - a[2])
            cols["P V wait"].append(a[4] - a[3])
            cols["c1 after c0"].append(b[0] - a[0])
    # Item boundaries: an item's first tile is the peeled one, marked without a P V ("P V done"
    # 0). From the last traced tile before it (its softmax done) to the first tile's turn: the
    # last P V, the stores, the next item's Q (and, with fp8 KV, its conversion), its first K.
    # Against it, the same span between two tiles of one item ("softmax to next turn").
    # Then an item's first two periods (turn to next turn), against "period" (a steady tile's):
    # where a new item's tiles wait longer (fp8's converters catching up, say), they show here.
    # The edge's parts (consumers' marks on the new item's first tile; the K copier's and converter
    # 0's in consumer 0's record of the same tile): last softmax -> the pair taken (the last P V,
    # the stores) -> the rows -> Q ready (with fp8 KV converted) -> K ready -> the turn; and when
    # the first K was issued and (fp8) widened, from the last softmax.
    parts = ("edge: to entered", "edge: entered to rows", "edge: rows to Q", "edge: Q to K", "edge: K to turn",
             "edge: K issued at", "edge: K converted at", "edge: to last P V", "edge: P V to stores",
             "edge: stores to entered")
    edges = {k: [] for k in ("item edge", "softmax to next turn", "item first S latency", "item period 1",
                             "item period 2") + parts}
    for blk in tiles:
        for c in blk[:2]:
            marked = [t for t in range(TRACED_TILES) if c[t][0] and c[t][3]]
            for a, b in zip(marked, marked[1:]):
                if c[b][4] == 0:
                    edges["item edge"].append(c[b][0] - c[a][3])
                    if all(c[b][5:9]):
                        e = c[b]
                        for k, (x, y) in zip(parts, ((c[a][3], e[5]), (e[5], e[6]), (e[6], e[7]), (e[7], e[8]),
                                                      (e[8], e[0]))):
                            edges[k].append(y - x)
                    for k, ev in (("edge: K issued at", 9), ("edge: K converted at", 10)):
                        if blk[0][b][ev]:
                            edges[k].append(blk[0][b][ev] - c[a][3])
                    # The first part split: the previous item's last P V and its stores (marked on
                    # its last tile, a).
                    if c[a][11] and c[a][12] and c[b][5]:
                        edges["edge: to last P V"].append(c[a][11] - c[a][3])
                        edges["edge: P V to stores"].append(c[a][12] - c[a][11])
                        edges["edge: stores to entered"].append(c[b][5] - c[a][12])
                    edges["item first S latency"].append(c[b][2] - c[b][1])
                    for k in (1, 2):
                        t = b + k
                        if t < TRACED_TILES and c[t][0] and c[t][4] and c[t - 1][0]:
                            edges[f"item period {k}"].append(c[t][0] - c[t - 1][0])
                elif b == a + 1:
                    edges["softmax to next turn"].append(c[b][0] - c[a][3])
    cols |= edges
    return {k: (round(statistics.median(v)) if v else None) for k, v in cols.items()} | {
        "tiles": len(cols["period"]), "item edges": len(edges["item edge"])}


def summarize(blocks):
    """Per step: (median, max) µs over the blocks from the first block's entry (globaltimer), and
    block 0's and block 1's µs from their own entry (cycle counter, at the clock the blocks'
    globaltimer spans give)."""
    t0 = min(b[0][0] for b in blocks)
    rates = []  # cycles per ns, from each block's span
    for b in blocks:
        last = max((m for m in b if m), key=lambda m: m[0])
        if last[0] - b[0][0] > 2000:
            rates.append((last[1] - b[0][1]) / (last[0] - b[0][0]))
    rate = statistics.median(rates) if rates else 1.98
    rows = []
    for i, step in enumerate(STEPS):
        ts = [(b[i][0] - t0) / 1e3 for b in blocks if b[i]]
        own = []
        for k in (0, 1):
            m = blocks[k][i] if k < len(blocks) else None
            own.append(round((m[1] - blocks[k][0][1]) / rate / 1e3, 3) if m else None)
        rows.append({"step": step, "blocks": len(ts), "median_us": round(statistics.median(ts), 3) if ts else None,
                     "min_us": round(min(ts), 3) if ts else None, "max_us": round(max(ts), 3) if ts else None,
                     "block0_us": own[0], "block1_us": own[1]})
    return {"blocks": len(blocks), "ghz": round(rate, 3), "steps": rows}


def parse_cases(spec, geometry, kv_dtype="bfloat16"):
    cases = []
    suffix = "" if kv_dtype == "bfloat16" else f" {kv_dtype}"
    for item in spec.split(","):
        shape, _, ctx = item.partition("/")
        b, q = (int(x) for x in shape.split("x"))
        kv = int(ctx) if ctx else q
        cases.append(Case(f"{geometry} {b}x{q} over {kv}{suffix}", geometry, [(q, kv)] * b, kv_dtype=kv_dtype))
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--geometry", default="G1", choices=list(GEOMETRIES))
    ap.add_argument("--cases", default="1x512/2048,4x256/2048,16x128/2048,1x2048,1x8192")
    ap.add_argument("--kv-dtype", default="bfloat16", choices=["bfloat16", "float8_e4m3fn", "float8_e5m2"])
    ap.add_argument("--variant", default="auto", help="ours' variant, as peers.py --variants takes one")
    ap.add_argument("--repeats", type=int, default=7, help="traced calls per way (medians over them)")
    ap.add_argument("--tiles", action="store_true", help="also the consumers' per-tile trace (alone calls)")
    ap.add_argument("--logit-std", type=logit_std_arg, default=LOGIT_STD, help=LOGIT_STD_HELP)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import xla_gpu_kernels.torch  # noqa: F401
    ours = Ours(args.variant)
    ours.select()
    ws = TracedWorkspaces()
    report = {"gpu": torch.cuda.get_device_name(), "variant": args.variant, "cases": []}
    for case in parse_cases(args.cases, args.geometry, args.kv_dtype):
        inp = Inputs(case, seed=0, logit_std=args.logit_std)
        call = lambda: torch.ops.xla_gpu.paged_attention(  # noqa: E731
            inp.q, inp.kv, inp.kv_lens, inp.page_indices, inp.cu_q_lens, inp.num_seqs, sm_scale=inp.sm_scale,
            k_scale=inp.k_scale, v_scale=inp.v_scale)
        for _ in range(5):
            call()
        torch.cuda.synchronize()
        ws.reset()
        call()
        torch.cuda.synchronize()
        nbytes = ws.taken[0][1]
        ways = {}
        for way in ("alone", "queued"):
            runs = []
            for _ in range(args.repeats):
                ready = [torch.zeros(nbytes + TRACE_SLACK, dtype=torch.uint8, device=inp.q.device)
                         for _ in range(10)] if way == "queued" else []
                torch.cuda.synchronize()
                ws.reset(ready)
                if way == "alone":
                    call()
                else:
                    for _ in range(10):
                        call()
                torch.cuda.synchronize()
                buf, nbytes = ws.taken[0 if way == "alone" else 8]
                blocks = read_trace(buf, nbytes)
                if not blocks:
                    raise SystemExit("no trace: is the library built with XGK_TRACE=1?")
                runs.append(summarize(blocks))
                if args.tiles and way == "alone":
                    tiles = read_tiles(buf, nbytes, len(blocks))
                    runs[-1]["tiles"] = summarize_tiles(tiles)
                    runs[-1]["tiles_raw"] = [blk[:2] for blk in tiles[:4]]  # blocks 0-3, consumers 0-1
            # Medians over the runs, per step and column.
            steps = []
            for i, step in enumerate(STEPS):
                row = {"step": step}
                for col in ("median_us", "min_us", "max_us", "block0_us", "block1_us"):
                    vals = [r["steps"][i][col] for r in runs if r["steps"][i][col] is not None]
                    row[col] = round(statistics.median(vals), 3) if vals else None
                steps.append(row)
            ways[way] = {"blocks": runs[0]["blocks"], "ghz": runs[0]["ghz"], "steps": steps}
            if "tiles" in runs[0]:
                ways[way]["tiles"] = {k: statistics.median(r["tiles"][k] for r in runs if r["tiles"][k] is not None)
                                      if any(r["tiles"][k] is not None for r in runs) else None
                                      for k in runs[0]["tiles"]}
                ways[way]["tiles_raw"] = runs[0]["tiles_raw"]
        report["cases"].append({"name": case.name, "ways": ways})
        print(f"\n{case.name}: {ways['alone']['blocks']} blocks, {ways['alone']['ghz']} GHz; µs from the first entry")
        print(f"{'step':<18}" + "".join(f"{w + ' ' + c:>15}" for w in ways for c in ("med", "max", "b0", "b1")))
        for i, step in enumerate(STEPS):
            cells = []
            for w in ways:
                r = ways[w]["steps"][i]
                cells += [r["median_us"], r["max_us"], r["block0_us"], r["block1_us"]]
            print(f"{step:<18}" + "".join(f"{'-' if c is None else c:>15}" for c in cells))
        if "tiles" in ways["alone"]:
            print("consumer 0's steady tiles, median cycles: " + ", ".join(
                f"{k} {v}" for k, v in ways["alone"]["tiles"].items()))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
