#!/usr/bin/env python3
"""The performance tables and plots of README.md and docs/performance.md, generated from the result
files under `benchmarks/results/<kind>/` (kind: h100, h200).

    python3 benchmarks/report.py [--no-plots] [--check]

For every `benchmarks/peers.py` result file of a kind (decode.json, prefill.json, ...) it writes
the plot beside it (same name, .png; needs matplotlib) and the Markdown table
(`benchmarks/peers_table.py`) into docs/performance.md, between the markers
`<!-- report: h100/decode.json -->` and `<!-- /report -->`. For each kind it writes the headline
table (G1 decode and prefill against FlashInfer) into README.md between
`<!-- report: headline h100 -->` and `<!-- /report -->`, its plot `<kind>/headline.png`, and
`<kind>/COMMANDS.md`: for each result file the command that made it, the device, driver,
versions and date it records, and the commit that recorded it. `--check` rewrites nothing and
fails when a generated block differs from what the files hold (CI-friendly).

A new result: run the suite on a GPU machine (`benchmarks/peers.py --suite decode --no-jax --out
benchmarks/runs/<name>.json`; per-run scripts and logs go to the git-ignored `benchmarks/runs/`),
copy the JSON over `benchmarks/results/<kind>/<suite>.json`, add its entry below if it is new, and
run this script.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
sys.path.insert(0, HERE)
import peers_table  # noqa: E402

# Every file under benchmarks/results/<kind>/ but COMMANDS.md and the plots: what it is, the
# commit that recorded it, and (for files without an `argv` of their own) the command that made it.
# Commands run on the GPU machine from the repository root after `scripts/stage_gpu.sh` (the
# library and binaries in .gpu/, XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so).
MANIFEST = {
    "h100": {
        "decode.json": ("G1 decode against FlashInfer, L2-warm (CUDA-graph replays)", "5ce4df2", None),
        "decode-cold-l2.json": ("G1 decode against FlashInfer, every call L2-cold", "b9c45fd", None),
        "features.json": ("G2-G4 geometries and fp8 KV against FlashInfer", "5ce4df2", None),
        "uneven.json": ("uneven batches (uniform and Zipf lengths) against FlashInfer", "5ce4df2", None),
        "pages.json": ("page sizes 1-256 against FlashInfer", "5f74928", None),
        "prefill.json": ("G1 prefill, chunked prefill and engine-step mixes against FlashInfer", "825f645", None),
        "prefill-g5-d64.json": ("G5 (head_dim 64, 32 q / 8 KV heads) prefill against FlashInfer", "825f645", None),
        "prefill-g6-d256.json": ("G6 (head_dim 256, 16 q / 8 KV heads, no window or cap) prefill against FlashInfer",
                                 "825f645", None),
        "short.json": ("short prefills (the chunk tails of a serving step) against FlashInfer", "825f645", None),
        "prefill-fp8.json": ("G1 prefill, chunked prefill and engine-step mixes with fp8 (e4m3fn) KV against "
                             "FlashInfer's fp8 path", "825f645", None),
        "prefill-g5-fp8.json": ("G5 (head_dim 64) prefill and chunked prefill with fp8 (e4m3fn) KV against "
                                "FlashInfer's fp8 path", "825f645", None),
        "mixes-fp8.json": ("engine-step mixes with fp8 (e4m3fn) KV against FlashInfer's fp8 path", "825f645", None),
        "short-fp8.json": ("short prefills with fp8 (e4m3fn) KV against FlashInfer's fp8 path", "825f645", None),
        "mixes.json": ("engine-step mixes: ours-auto in two launches (the default when measured) against ours-auto:da3 in one (the default since)",
                       "11ee810", None),
        "prefill-g4-d256.json": ("G4 (head_dim 256, soft cap 50, window 4096) prefill against FlashInfer", "825f645",
                                 None),
        "decode-jax.json": ("decode through jax.jit against JAX's Pallas paged_attention", "e17f5db",
                            "python3 benchmarks/peers.py --suite decode --only-jax --logit-std flat"),
        "simple-add-vs-xla.json": ("simple_add against jnp.add through jax.jit", "4b2ddd9",
                                   "python3 benchmarks/simple_add_vs_xla.py"),
        "tensor-parallel-2gpu.json": ("2-way tensor-parallel decode step against one GPU (two H100s)", "06fd660",
                                      "python3 benchmarks/tensor_parallel.py"),
        "sharding-2gpu.log": ("tests/python/test_sharding_gpu.py on two H100s", "1d9b320",
                              "python3 -m pytest -v -s -m gpu --durations=0 tests/python/test_sharding_gpu.py"),
        "overhead.json": ("torch and JAX per-call costs (eager, call + sync, command buffers)", "280b8be",
                          "python3 benchmarks/overhead.py --parts torch,sync"),
        "step-overhead.json": ("a 32-layer decode step under JAX's command buffers", "9c06ea3",
                               "python3 benchmarks/overhead.py"),
        "host-overhead-2026-11-26.log": ("host cost per call (criterion), two runs", "4b2ddd9, dac0211",
                                         ".gpu/bin/host_overhead --bench --noplot"),
        "host-overhead-2026-11-27.log": ("host cost per call (criterion), three runs on three machines: a mix in "
                                         "one launch", "82b218c, 52f87db",
                                         "run 1: .gpu/bin/host_overhead --bench --noplot 'mix|prefill|floor' (the build's default "
                                         "then: a mix in two launches), then XGK_RPA_DECODE_APART=3 "
                                         ".gpu/bin/host_overhead --bench --noplot 'mix' (one launch); run 2: "
                                         ".gpu/bin/host_overhead --bench --noplot 'floor|mix|prefill'; run 3: "
                                         ".gpu/bin/host_overhead --bench --noplot "
                                         "'prepared|floor|ffi_cuda/|encode|validate', twice"),
        "read-ceiling.json": ("a kernel that only reads: the DRAM's ceiling", "18060e4",
                              "python3 benchmarks/read_ceiling.py"),
        "soak.txt": ("100 000 random calls from 8 threads", "eab21f3",
                     "XGK_SOAK_REPORT=soak.txt .gpu/bin/soak --include-ignored --nocapture"),
        "sanitizers.md": ("compute-sanitizer (racecheck, synccheck) over the stronger GPU suite", "eaad203",
                          "bash scripts/sanitize.sh (the file names the settings)"),
        "startup.json": ("the first call in a fresh process (0.2.0): empty and filled driver cache, native code "
                         "(the sm_90a cubin) and the sm_90a PTX JIT-compiled kernel by kernel, torch and JAX", "19c711b",
                         "cd /tmp && env -u XLA_GPU_KERNELS_LIB PYTHONPATH=<the wheel installed with pip --target> "
                         "python3 $REPO/benchmarks/startup.py"),
        "native-vs-jit.json": ("the cubins (ptxas 13.0.88) against the driver's JIT of the same PTX: the decode and "
                               "prefill suites, ours only, run three times back to back (cubin, JIT, cubin)", "19c711b",
                               "for s in decode prefill; do for v in native ptx native2; do "
                               "[ $v = ptx ] && export XGK_PTX_ARCH=sm_90a || unset XGK_PTX_ARCH; "
                               "python3 benchmarks/peers.py --suite $s --no-jax --no-flashinfer --logit-std flat --out $s-$v.json; "
                               "done; done; "
                               "python3 benchmarks/native_vs_jit.py native-vs-jit.json decode:decode-native.json,"
                               "decode-ptx.json,decode-native2.json prefill:prefill-native.json,prefill-ptx.json,"
                               "prefill-native2.json"),
        "accuracy.md": ("worst row-relative error per dtype under the stronger tests: the GPU kernels against the CPU "
                        "path, JAX's reference and a float64 dense reference", "289a063",
                        "the GPU suite (.gpu/bin/gpu --include-ignored), then from the installed wheel: "
                        "XGK_TEST_INSTALLED=1 python3 -m pytest -m gpu tests/python/test_jax_gpu.py "
                        "tests/python/test_long_gpu.py"),
        "serving-step.json": ("Llama-3-8B's serving step (32 layers, bf16, page 16) with each attention backend: ours, "
                              "Pallas paged_attention + cuDNN, pure XLA, no attention; GPU time by kernel class "
                              "(jax.profiler)", "155081e",
                              "cd /tmp && XGK_TEST_INSTALLED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.94 python3 "
                              "$REPO/benchmarks/serving_step.py --config llama3-8b --cases decode:64x2048,decode:64x8192,"
                              "decode:256x2048,decode:256x8192,prefill:1x8192,prefill:8x1024@4096,"
                              "mixed:63x4096+2x512@2048 --cache-gb 28 --iters 10 --profile --out serving-step.json"),
        "serving-step-no-command-buffers.json": ("the same step with XLA's command buffers off (host time)", "155081e",
                                                 "XLA_FLAGS=--xla_gpu_enable_command_buffer= python3 "
                                                 "$REPO/benchmarks/serving_step.py --config llama3-8b --backends "
                                                 "ours,no-attn --cases decode:64x2048,decode:256x2048,"
                                                 "mixed:63x4096+2x512@2048 --cache-gb 28 --iters 20 "
                                                 "--out serving-step-no-command-buffers.json"),
        "serving-trace.json": ("the engine's continuous batching at Llama-3-8B's size: 64 requests, prompts "
                               "128-2048, 128 new tokens, 64 slots, 2048 tokens a step", "155081e",
                               "python3 $REPO/examples/serving_step.py --config llama3-8b --requests 64 --new-tokens "
                               "128 --prompt-lens 128 2048 --max-seqs 64 --budget 2048 --json serving-trace.json"),
        "criterion.md": ("criterion benches of the kernels", "564735a",
                         "cargo bench --bench kernels; python3 scripts/bench_report.py BENCH_LOG DEVICE_TXT"),
    },
    "h200": {
        "decode.json": ("G1 decode against FlashInfer, L2-warm (CUDA-graph replays)", "34ebd80", None),
        "decode-cold-l2.json": ("G1 decode against FlashInfer, every call L2-cold", "6b73627", None),
        "features.json": ("G2-G4 geometries and fp8 KV against FlashInfer", "34ebd80", None),
        "uneven.json": ("uneven batches against FlashInfer", "34ebd80", None),
        "pages.json": ("page sizes 1-256 against FlashInfer", "6b73627", None),
        "prefill.json": ("G1 prefill, chunked prefill and engine-step mixes against FlashInfer", "530ccb3", None),
        "prefill-fp8.json": ("G1 prefill and chunked prefill with fp8 (e4m3fn) KV against FlashInfer's fp8 path",
                             "2eaf898", None),
        "mixes-fp8.json": ("engine-step mixes with fp8 (e4m3fn) KV against FlashInfer's fp8 path", "2eaf898", None),
        "short.json": ("short prefills (the chunk tails of a serving step) against FlashInfer", "530ccb3", None),
        "short-fp8.json": ("short prefills with fp8 (e4m3fn) KV against FlashInfer's fp8 path", "2eaf898", None),
        "prefill-g5-d64.json": ("G5 (head_dim 64, 32 q / 8 KV heads) prefill against FlashInfer", "530ccb3", None),
        "prefill-g6-d256.json": ("G6 (head_dim 256, 16 q / 8 KV heads, no window or cap) prefill against FlashInfer",
                                 "530ccb3", None),
        "read-ceiling.json": ("a kernel that only reads: the DRAM's ceiling", "34ebd80",
                              "python3 benchmarks/read_ceiling.py"),
        "simple-add-vs-xla.json": ("simple_add against jnp.add through jax.jit", "d2e064a",
                                   "python3 benchmarks/simple_add_vs_xla.py"),
        "host-overhead-merge-mode.log": ("host cost of a split decode call, merge blocks against a merge kernel "
                                         "(criterion; six runs on two machines)", "783a798",
                                         "XGK_RPA_MERGE_MODE=4 (default) or 0 .gpu/bin/host_overhead --bench --noplot "
                                         "decode_1x32k"),
        "soak.txt": ("60 000 random calls from 8 threads", "72b6041",
                     "XGK_SOAK_CALLS=60000 XGK_SOAK_REPORT=soak.txt .gpu/bin/soak --include-ignored --nocapture"),
        "accuracy.md": ("worst absolute error per dtype: GPU kernels against the CPU and JAX's reference", "ac5bd0a",
                        "the GPU suite and tests/python/test_jax_gpu.py (scripts/gpu_check.sh)"),
        "serving-step-tp.json": ("Llama-3-8B's serving step on one GPU and tensor parallel over two and four (4 x "
                                 "H200 of one host, NVLink), ours, f32 all-reduces, profiled", "058d1fb",
                                 "python3 $REPO/benchmarks/serving_step.py --config llama3-8b --backends "
                                 "ours,ours@tp2,ours@tp4 --cases decode:64x2048,decode:64x8192,decode:256x2048,"
                                 "prefill:1x8192,prefill:8x1024@4096,mixed:63x4096+2x512@2048 --cache-gb 28 "
                                 "--iters 10 --compile-workers 16 --profile --out serving-step-tp.json"),
        "serving-step-tp-bf16.json": ("the same with bf16 all-reduces (Config.reduce_dtype)", "058d1fb",
                                      "python3 $REPO/benchmarks/serving_step.py ... --reduce-dtype bfloat16 "
                                      "--out serving-step-tp-bf16.json (no --profile)"),
        "serving-step-allreduce-levers.json": ("decode steps at TP=2 and TP=4 under each all-reduce setting: bf16, "
                                               "XLA's one-shot kernel, NCCL symmetric buffers, collectives in "
                                               "command buffers (4 x H200)", "058d1fb",
                                               "XLA_FLAGS=<the variant's xla_flags> python3 $REPO/benchmarks/"
                                               "serving_step.py --config llama3-8b --backends ours@tp2,ours@tp4 "
                                               "--cases decode:64x2048,decode:256x2048 [--reduce-dtype bfloat16] "
                                               "--cache-gb 28 --iters 10"),
        "serving-step-70b-tp.json": ("Llama-3-70B's shapes (40 of 80 layers) at TP=2 and TP=4, bf16 all-reduces, "
                                     "profiled (4 x H200)", "058d1fb",
                                     "python3 $REPO/benchmarks/serving_step.py --config llama3-70b --layers 40 "
                                     "--backends ours@tp2,ours@tp4 --cases decode:64x2048,decode:256x2048,"
                                     "prefill:1x8192,mixed:63x4096+2x512@2048 --cache-gb 40 --iters 10 "
                                     "--reduce-dtype bfloat16 --profile --out serving-step-70b-tp.json"),
        "engine-tp4.json": ("the engine at Llama-3-8B's size tensor parallel over four GPUs in one process: 16 "
                            "requests, 32 new tokens (4 x H200)", "058d1fb",
                            "python3 $REPO/examples/serving_step.py --config llama3-8b --requests 16 --new-tokens 32 "
                            "--max-seqs 16 --budget 1024 --tp 4 --json engine-tp4.json"),
        "engine-4proc.json": ("the same over four processes, one GPU each (jax.distributed); equal tokens to "
                              "engine-tp4.json", "058d1fb",
                              "for i in 0 1 2 3; do python3 $REPO/examples/serving_step.py ... --tp 4 --coordinator "
                              "127.0.0.1:23457 --num-processes 4 --process-id $i --local-device-ids $i "
                              "--json engine-4proc.json & done"),
        "greedy-70b-l4-tp1.json": ("greedy generation with Llama-3-70B's shapes (4 layers; 8 prompts, 32 tokens) "
                                   "against the dense f32 reference, one GPU", "058d1fb",
                                   "python3 $REPO/examples/serving_step.py --config llama3-70b --layers 4 --requests 8 "
                                   "--new-tokens 32 --check --tp 1 --json greedy-70b-l4-tp1.json"),
        "greedy-70b-l4-tp4.json": ("the same at TP=4", "058d1fb",
                                   "python3 $REPO/examples/serving_step.py ... --tp 4 --json greedy-70b-l4-tp4.json"),
        "engine-tp1.json": ("the engine at Llama-3-8B's size on one GPU: 16 requests, 32 new tokens (2 x H200 host)",
                            "155081e", "python3 $REPO/examples/serving_step.py --config llama3-8b --requests 16 "
                            "--new-tokens 32 --max-seqs 16 --budget 1024 --tp 1 --json engine-tp1.json"),
        "engine-tp2.json": ("the same, tensor parallel over two GPUs in one process", "155081e",
                            "python3 $REPO/examples/serving_step.py ... --tp 2 --json engine-tp2.json"),
        "engine-2proc.json": ("the same over two processes, one GPU each (jax.distributed); equal tokens to "
                              "engine-tp2.json", "155081e",
                              "for i in 0 1; do python3 $REPO/examples/serving_step.py ... --tp 2 --coordinator "
                              "127.0.0.1:23456 --num-processes 2 --process-id $i --local-device-ids $i "
                              "--json engine-2proc.json & done"),
        "greedy-check-8b.json": ("greedy generation at Llama-3-8B's size (8 prompts, 32 tokens) against the dense "
                                 "f32 reference", "155081e",
                                 "python3 $REPO/examples/serving_step.py --config llama3-8b --check "
                                 "--json greedy-check-8b.json"),
    },
}
GPU_NAMES = {"h100": "H100", "h200": "H200"}
# The headline's decode cells (every cell counts in its geometric mean).
HEADLINE_DECODE = ["1x2048", "1x32768", "4x8192", "16x2048", "32x4096", "64x8192", "128x2048", "256x8192"]


def load(kind: str, name: str) -> dict:
    with open(os.path.join(RESULTS, kind, name)) as f:
        return json.load(f)


def is_peers(data) -> bool:
    return isinstance(data, dict) and "cases" in data and "copy_GBps" in data


def peers_files(kind: str) -> list:
    out = []
    for name in MANIFEST[kind]:
        if name.endswith(".json") and is_peers(load(kind, name)):
            out.append(name)
    return out


def command(data: dict, name: str) -> str:
    argv = list(data.get("argv") or [])
    if "--out" in argv:
        i = argv.index("--out")
        argv[i + 1] = f"benchmarks/runs/{name}"
    if "logit_std" not in data:  # measured before `--logit-std`: q uniform in [-1, 1]
        argv += ["--logit-std", "flat"]
    return "python3 benchmarks/peers.py " + shlex.join(argv)


def commands_md(kind: str) -> str:
    lines = [f"# Result files: {GPU_NAMES[kind]}", "",
             "Generated by `python3 benchmarks/report.py` from the files and its manifest. Commands run on the GPU "
             "machine from the repository root after `scripts/stage_gpu.sh` (library and binaries in `.gpu/`, "
             "`XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so`; FlashInfer 0.6.18.post1 for the peers). "
             "Each `.png` is drawn by the report script from the `.json` of its name. \"Recorded in\" is the commit "
             "that added the result to the repository (the build measured is that commit's parent or the commit "
             "itself); `git log --follow` on the file shows its history. Files recorded before commit c03b04e were "
             "measured on q uniform in [-1, 1], so their commands carry `--logit-std flat`; a rerun checks each "
             "sampled row against the tolerance, where those runs checked a sequence's sampled rows together.", ""]
    for name, (what, commit, cmd) in MANIFEST[kind].items():
        lines.append(f"## {name}")
        lines.append("")
        lines.append(f"{what}. Recorded in {commit}.")
        data = None
        if name.endswith(".json"):
            data = load(kind, name)
        if data is not None and is_peers(data):
            v = data.get("versions", {})
            vs = ", ".join(f"{k} {v[k]}" for k in ("torch", "cuda", "jax", "flashinfer") if k in v)
            lines.append(f"Device {data['gpu']} (name, driver), {data['date']}, copy bandwidth "
                         f"{data['copy_GBps']:.0f} GB/s; {vs}; {v.get('xla_gpu_kernels', '')}.")
            lines += ["", "```sh", cmd or command(data, name), "```", ""]
        else:
            if isinstance(data, dict):
                facts = [f"{k} {data[k]}" for k in ("gpu", "device_kind", "date", "jax") if k in data]
                if facts:
                    lines.append("Records: " + ", ".join(str(f) for f in facts) + ".")
            lines += ["", "```sh", cmd, "```", ""]
    return "\n".join(lines)


def ratio_of(case: dict, ours: str = "ours-auto"):
    res = case["results"].get(ours, {})
    return res.get("speed_vs_fastest_peer"), res.get("median_us")


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def headline_rows(kind: str):
    """(section, case label, ours µs, FlashInfer µs, ratio) rows and the geometric means."""
    rows, means = [], {}
    dec = load(kind, "decode.json")
    pre = load(kind, "prefill.json")
    for label, data, pick in (("decode", dec, lambda c: any(c["name"].endswith(" " + x) for x in HEADLINE_DECODE)),
                              ("prefill", pre, lambda c: True)):
        rs = []
        for c in data["cases"]:
            r, ours = ratio_of(c)
            if r is None:
                continue
            rs.append(r)
            if pick(c):
                rows.append((label, c["name"].replace("G1 ", ""), ours, ours * r, r,
                             c["results"]["ours-auto"].get("TFLOPs") if label == "prefill" else None))
        means[label] = (geomean(rs), min(rs), len(rs), data)
    return rows, means


def headline_md(kind: str) -> str:
    rows, means = headline_rows(kind)
    dec = means["decode"][3]
    pre = means["prefill"][3]
    out = [f"{dec['gpu_name']}, driver {dec['driver']}; decode {dec['date']}, prefill {pre['date']} "
           f"(`benchmarks/results/{kind}/decode.json`, `prefill.json`). Median µs; FlashInfer is the shorter of its "
           "eager time and its profiler kernel time; > 1 means ours is faster.", "",
           "| case (Llama-3-8B G1, bf16, page 16) | ours µs | FlashInfer µs | ours vs FlashInfer |",
           "|---|---:|---:|---:|"]
    for label, name, ours, fi, r, tf in rows:
        extra = f" ({tf:.0f} TFLOP/s)" if tf else ""
        out.append(f"| {name} | {ours:.1f}{extra} | {fi:.1f} | {r:.2f}× |")
    for label in ("decode", "prefill"):
        g, w, n, _ = means[label]
        what = "decode" if label == "decode" else "prefill and mixes"
        out.append(f"| **{what}: geometric mean over {n} cells** (worst) | | | **{g:.2f}×** ({w:.2f}×) |")
    return "\n".join(out)


def plot_peers(data: dict, path: str):
    """The suite's plot, as peers.py draws it (`peers_table.plot`)."""
    peers_table.plot(data, path, dpi=90)


def plot_headline(kind: str, path: str):
    """Ours against FlashInfer per G1 cell (speed ratio), decode and prefill side by side."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [3, 1.2]})
    for ax, name, title in ((axes[0], "decode.json", "decode"), (axes[1], "prefill.json", "prefill and mixes")):
        data = load(kind, name)
        cs = [c for c in data["cases"] if ratio_of(c)[0] is not None]
        rs = [ratio_of(c)[0] for c in cs]
        ax.bar(range(len(cs)), rs, color=["C2" if r >= 1 else "C3" for r in rs])
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(range(len(cs)))
        ax.set_xticklabels([c["name"].replace("G1 ", "").replace("decode ", "") for c in cs], rotation=60,
                           ha="right", fontsize=7)
        ax.set_ylim(min(0.9, min(rs) - 0.02), max(rs) + 0.05)
        ax.set_ylabel("ours vs FlashInfer (speed, > 1: ours faster)", fontsize=8)
        ax.set_title(f"{GPU_NAMES[kind]} {title}, {data['date']}\ngeometric mean {geomean(rs):.2f}×", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


SERVING_BACKENDS = (("ours", "ours"), ("pallas+cudnn", "Pallas + cuDNN"), ("xla", "pure XLA"),
                    ("no-attn", "no attention"))


def serving_rows(data: dict) -> dict:
    """{case: {backend: row}} in the file's order."""
    out: dict = {}
    for r in data["rows"]:
        out.setdefault(r["case"], {})[r["backend"]] = r
    return out


def serving_md(data: dict) -> str:
    """Step time per case and backend, ours against the faster baseline, attention's share."""
    lines = [f"Llama-3-8B, {data['layers']} layers, bf16, one {data['device']}, JAX {data['jax']}, "
             f"{data['date'][:10]}: milliseconds per engine step (median of {data['iters']}, each waited for).", "",
             "| step | tokens | " + " | ".join(label for _, label in SERVING_BACKENDS)
             + " | ours vs the faster baseline | attention's share of GPU time (ours) |",
             "|---|---:|" + "---:|" * len(SERVING_BACKENDS) + "---:|---:|"]
    for case, got in serving_rows(data).items():
        cells = [f"{got[b]['ms']:.1f}" if "ms" in got.get(b, {}) else "n/a" for b, _ in SERVING_BACKENDS]
        base = [got[b]["ms"] for b in ("pallas+cudnn", "xla") if "ms" in got.get(b, {})]
        ours = got.get("ours", {})
        speed = f"{min(base) / ours['ms']:.2f}x" if base and "ms" in ours else "n/a"
        share = ours.get("profile", {}).get("share_by_class", {}).get("ours")
        tokens = next(iter(got.values()))["tokens"]
        lines.append(f"| {case} | {tokens} | " + " | ".join(cells) + f" | {speed} | "
                     + (f"{share:.0%}" if share is not None else "n/a") + " |")
    return "\n".join(lines)


def tp_width(backend: str) -> int:
    """N of ``ours@tpN``."""
    return int(backend.split("@tp")[1])


MODEL_NAMES = {"llama3-8b": "Llama-3-8B", "llama3-70b": "Llama-3-70B's shapes", "tiny": "tiny"}


def serving_tp_md(data: dict) -> str:
    """Tensor-parallel widths against the narrowest run (one GPU when it ran), per case, with the
    host's part and the back-to-back time of the widest."""
    rows = serving_rows(data)
    backends = list(dict.fromkeys(r["backend"] for r in data["rows"]))
    width = {b: tp_width(b) if "@tp" in b else 1 for b in backends}
    base, tps = backends[0], backends[1:]
    wide = backends[-1]
    reduce = data.get("reduce_dtype", "float32").replace("float32", "f32").replace("bfloat16", "bf16")
    lines = [f"{MODEL_NAMES.get(data['config'], data['config'])}, {data['layers']} layers, {data['device']}, "
             f"{reduce} all-reduces, JAX {data['jax']}, {data['date'][:10]}: milliseconds per engine step (each "
             f"waited for); speed-up against {'one GPU' if width[base] == 1 else f'TP={width[base]}'}.", "",
             "| step | " + " | ".join(f"TP={width[b]}" for b in backends) + " | "
             + " | ".join(f"TP={width[b]} speed-up" for b in tps)
             + f" | TP={width[wide]} speed-up, steps back to back | TP={width[wide]}: host's part (ms) |",
             "|---|" + "---:|" * (2 * len(backends) + 1)]
    for case, got in rows.items():
        one = got.get(base, {}).get("ms")
        cells = [f"{got[b]['ms']:.1f}" if "ms" in got.get(b, {}) else "n/a" for b in backends]
        ups = [f"{one / got[b]['ms']:.2f}x" if one and "ms" in got.get(b, {}) else "n/a" for b in tps]
        w = got.get(wide, {})
        b2b = got.get(base, {}).get("pipelined_ms")
        lines.append(f"| {case} | " + " | ".join(cells) + " | " + " | ".join(ups)
                     + (f" | {b2b / w['pipelined_ms']:.2f}x | {w['dispatch_ms']:.1f} |" if "ms" in w and b2b
                        else " | n/a | n/a |"))
    return "\n".join(lines)


def save_grouped_bars(path: str, cases: list, series: list, ticks: list, ylabel: str, title: str,
                      hlines: list) -> None:
    """One group of bars per case, one bar per ``(label, ys, color, alpha)`` of ``series``, then
    the horizontal lines ``hlines`` (``axhline`` keyword arguments each), saved to ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11.5, 3.8))
    width = 0.8 / len(series)
    for i, (label, ys, color, alpha) in enumerate(series):
        ax.bar([x + i * width for x in range(len(cases))], ys, width, label=label, color=color, alpha=alpha)
    for line in hlines:
        ax.axhline(**line)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(cases))])
    ax.set_xticklabels(ticks, fontsize=7)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_serving_tp(f32: dict, bf16: dict, path: str):
    """Speed-up over one GPU per case and width, f32 and bf16 all-reduces side by side."""
    rows = {"f32": serving_rows(f32), "bf16": serving_rows(bf16)}
    cases = list(rows["f32"])
    tps = [b for b in dict.fromkeys(r["backend"] for r in f32["rows"]) if "@tp" in b]
    series = []
    for b in tps:
        for name in ("f32", "bf16"):
            got = rows[name]
            ys = [got[c]["ours"]["ms"] / got[c][b]["ms"] if "ms" in got[c].get(b, {}) else 0 for c in cases]
            series.append((f"TP={tp_width(b)}, {name}", ys, f"C{len(series)}", 1.0 if name == "f32" else 0.6))
    widths = sorted({tp_width(b) for b in tps})
    save_grouped_bars(path, cases, series,
                      [f"{c}\n{rows['f32'][c]['ours']['ms']:.1f} ms" for c in cases], "speed-up over one GPU",
                      f"Llama-3-8B serving step ({f32['layers']} layers), {f32['device']} x {max(widths)}: tensor "
                      "parallel against one GPU (under each case: one GPU)",
                      [dict(y=n, color="grey", lw=0.8, ls=":") for n in widths])


def plot_serving(data: dict, path: str):
    """Each backend's step time relative to ours, per case (> 1: slower than ours)."""
    rows = serving_rows(data)
    cases = list(rows)
    series = [(label, [rows[c][b]["ms"] / rows[c]["ours"]["ms"] if "ms" in rows[c].get(b, {}) else 0 for c in cases],
               f"C{i + 1}", 1.0)
              for i, (b, label) in enumerate((b, label) for b, label in SERVING_BACKENDS if b != "ours")]
    save_grouped_bars(path, cases, series, [f"{c}\n{rows[c]['ours']['ms']:.1f} ms" for c in cases], "step time / ours",
                      f"Llama-3-8B serving step ({data['layers']} layers), {data['device']}: each backend's step time "
                      "relative to ours (under each case: ours)",
                      [dict(y=1.0, color="C0", lw=1.2, label="ours")])


def replace_blocks(text: str, blocks: dict) -> str:
    def sub(m):
        key = m.group(1).strip()
        if key not in blocks:
            return m.group(0)
        return f"<!-- report: {key} -->\n{blocks[key]}\n<!-- /report -->"
    return re.sub(r"<!-- report: (.*?) -->\n.*?<!-- /report -->", sub, text, flags=re.S)


def main():
    plots = "--no-plots" not in sys.argv[1:]
    check = "--check" in sys.argv[1:]
    blocks, outputs = {}, {}
    for kind in MANIFEST:
        for name in peers_files(kind):
            blocks[f"{kind}/{name}"] = peers_table.markdown(load(kind, name))
            if plots and not check:
                plot_peers(load(kind, name), os.path.join(RESULTS, kind, name[:-5] + ".png"))
        blocks[f"headline {kind}"] = headline_md(kind)
        if plots and not check:
            plot_headline(kind, os.path.join(RESULTS, kind, "headline.png"))
        if "serving-step.json" in MANIFEST[kind]:
            blocks[f"serving {kind}"] = serving_md(load(kind, "serving-step.json"))
            if plots and not check:
                plot_serving(load(kind, "serving-step.json"), os.path.join(RESULTS, kind, "serving-step.png"))
        for name, key in (("serving-step-tp.json", "serving-tp"), ("serving-step-tp-bf16.json", "serving-tp-bf16"),
                          ("serving-step-70b-tp.json", "serving-tp-70b")):
            if name in MANIFEST[kind]:
                blocks[f"{key} {kind}"] = serving_tp_md(load(kind, name))
        if "serving-step-tp-bf16.json" in MANIFEST[kind] and plots and not check:
            plot_serving_tp(load(kind, "serving-step-tp.json"), load(kind, "serving-step-tp-bf16.json"),
                            os.path.join(RESULTS, kind, "serving-step-tp.png"))
        outputs[os.path.join(RESULTS, kind, "COMMANDS.md")] = commands_md(kind) + "\n"
    for doc in ("README.md", os.path.join("docs", "performance.md"), os.path.join("docs", "serving.md")):
        path = os.path.join(ROOT, doc)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            outputs[path] = replace_blocks(f.read(), blocks)
    stale = []
    for path, text in outputs.items():
        old = open(path).read() if os.path.exists(path) else None
        if old != text:
            stale.append(os.path.relpath(path, ROOT))
            if not check:
                with open(path, "w") as f:
                    f.write(text)
    if check and stale:
        print("out of date (run python3 benchmarks/report.py):", ", ".join(stale))
        sys.exit(1)
    print(("checked" if check else "wrote") + f": {len(outputs)} files, {len(blocks)} tables"
          + (", plots" if plots and not check else ""))


if __name__ == "__main__":
    main()
