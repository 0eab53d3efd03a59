"""Experiment (session 25, not part of the product): the bound of a mix's prefill and decode rows
side by side from the start. Needs the experiment library whose warp-specialized grid takes
XGK_EXP_WS_BLOCKS persistent blocks. Prefill rows first on one stream with K blocks, the decode
rows on a second stream of the same graph: the decode grid takes the other multiprocessors."""
import os, statistics, sys, json
sys.path.insert(0, "benchmarks")
import torch
import peers
from mix_overlap import call_of, graph_of, two_streams

rows = []
for name, seqs in peers.MIXES:
    dec = peers.Case(name + " decode", "G1", [s for s in seqs if s[0] == 1])
    pre = peers.Case(name + " prefill", "G1", [s for s in seqs if s[0] > 1])
    mix = peers.Case(name, "G1", seqs)
    f_mix, f_dec, f_pre = (call_of(peers.Inputs(c, seed=7)) for c in (mix, dec, pre))
    side = torch.cuda.Stream()
    timers = {}
    os.environ.pop("XGK_EXP_WS_BLOCKS", None)
    timers["mix"] = graph_of(f_mix)
    timers["decode"] = graph_of(f_dec)
    timers["prefill 132"] = graph_of(f_pre)
    timers["concurrent decode first"] = graph_of(two_streams(f_dec, f_pre, side))
    for k in [int(x) for x in os.environ.get("KS", "16,24,32,40,48,64").split(",")]:
        os.environ["XGK_EXP_WS_BLOCKS"] = str(k)
        timers[f"prefill {k}"] = graph_of(f_pre)
        timers[f"prefill {k} first"] = graph_of(two_streams(f_pre, f_dec, side))
    os.environ.pop("XGK_EXP_WS_BLOCKS", None)
    samples = {k: [] for k in timers}
    for _ in range(3):
        for k, t in timers.items():
            samples[k] += t()
    med = {k: round(statistics.median(v), 1) for k, v in samples.items()}
    rows.append({"mix": name, "median_us": med})
    print(name, flush=True)
    for k, v in med.items():
        print(f"  {k:<28} {v:>9.1f}", flush=True)
json.dump(rows, open(os.environ.get("OUT", ".") + "/r/partition.json", "w"), indent=1)
