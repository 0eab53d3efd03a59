"""A serving step: a Llama-3-style model (bf16 weights from a seed) generating for a stream of
requests with continuous batching over a paged KV cache, attention by xla_gpu_kernels' ragged
paged attention. Each engine step is one jitted call on a ragged batch mixing decode rows and
prefill chunks under a token budget, the cache donated. Runs on CUDA when JAX sees a GPU, on CPU
(our Host handler) otherwise.

    python examples/serving_step.py                        # tiny model, checked against a dense f32 reference
    python examples/serving_step.py --config llama3-8b     # Llama-3-8B shapes (GPU; --layers N for short runs)
    python examples/serving_step.py --tp 2                 # tensor parallel over 2 devices
    python examples/serving_step.py --config llama3-70b --tp 8   # Llama-3-70B shapes, one KV head a GPU
    # the same over 2 processes (JAX multi-controller; on GPUs add --local-device-ids i):
    python examples/serving_step.py --tp 2 --coordinator 127.0.0.1:23456 --num-processes 2 --process-id {0,1}
"""

import argparse
import dataclasses
import hashlib
import json
import time

import jax
import numpy as np
from jax.sharding import Mesh

from xla_gpu_kernels.serving import (CONFIGS, Engine, compare_greedy, dense_greedy, init_params, param_shardings,
                                     teacher_forced_logits)

DEFAULTS = {  # max_num_seqs, token_budget, prompt lengths
    "tiny": (4, 32, (5, 60)),
    "llama3-8b": (32, 512, (64, 1024)),
    "llama3-70b": (32, 512, (64, 1024)),
}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    ap.add_argument("--layers", type=int, help="number of decoder layers (default: the config's)")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--max-seqs", type=int, help="sequence slots per step")
    ap.add_argument("--budget", type=int, help="tokens per step")
    ap.add_argument("--prompt-lens", type=int, nargs=2, metavar=("MIN", "MAX"))
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--num-pages", type=int, help="cache pages (default: enough for every slot at full length)")
    ap.add_argument("--tp", type=int, default=1, help="tensor parallel over this many devices")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trace", type=int, default=12, help="print the first N steps")
    ap.add_argument("--check", action=argparse.BooleanOptionalAction, default=None,
                    help="compare with the dense f32 reference (default: on for tiny)")
    ap.add_argument("--tol", type=float, default=0.05,
                    help="max |logit difference| vs the dense reference; near-ties within 2*tol may flip")
    ap.add_argument("--coordinator", help="HOST:PORT: run as one of several processes (jax.distributed)")
    ap.add_argument("--num-processes", type=int, default=1)
    ap.add_argument("--process-id", type=int, default=0)
    ap.add_argument("--local-device-ids", type=int, nargs="*", help="this process's GPUs")
    ap.add_argument("--json", help="write the run's statistics and every step to this file")
    args = ap.parse_args(argv)
    if args.coordinator:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU collectives across processes
        jax.distributed.initialize(coordinator_address=args.coordinator, num_processes=args.num_processes,
                                   process_id=args.process_id, local_device_ids=args.local_device_ids)
    if args.check is None:  # the dense reference reads whole arrays: one process only
        args.check = args.config == "tiny" and not args.coordinator
    cfg = CONFIGS[args.config](args.layers)
    seqs, budget, lens = DEFAULTS[args.config]
    seqs, budget = args.max_seqs or seqs, args.budget or budget
    lo, hi = args.prompt_lens or lens
    rng = np.random.default_rng(args.seed)
    prompt_lens = rng.integers(lo, hi + 1, args.requests)
    prompts = [rng.integers(0, cfg.vocab_size, n).tolist() for n in prompt_lens]
    max_len = int(prompt_lens.max()) + args.new_tokens
    num_pages = args.num_pages or seqs * -(-max_len // args.page_size)

    mesh = Mesh(np.array(jax.devices()[:args.tp]), ("tp",)) if args.tp > 1 else None
    t0 = time.perf_counter()
    params = init_params(cfg, args.seed, param_shardings(cfg, mesh) if mesh else None)
    jax.block_until_ready(params)
    init_s = time.perf_counter() - t0
    engine = Engine(cfg, params, max_num_seqs=seqs, token_budget=budget, page_size=args.page_size,
                    num_pages=num_pages, max_model_len=max_len, record_logits=bool(args.check), mesh=mesh)
    compile_s = engine.warmup()
    print(f"backend={jax.default_backend()} devices={args.tp} processes={jax.process_count()} config={args.config} "
          f"layers={cfg.num_layers} "
          f"params={cfg.num_params() / 1e9:.3g}B (init {init_s:.1f}s, compile {compile_s:.1f}s)")
    print(f"{args.requests} requests, prompts {lo}-{hi} tokens, {args.new_tokens} new tokens each; "
          f"{seqs} slots, budget {budget} tokens/step, {num_pages} pages of {args.page_size}")
    requests = [engine.add_request(p, args.new_tokens) for p in prompts]
    stats = engine.run()
    for s in engine.history[:args.trace]:
        print(f"  step {s.step:3d}: {s.num_seqs} seqs, {s.decode_rows:3d} decode rows + {s.prefill_tokens:4d} prefill "
              f"tokens, {s.seconds * 1e3:7.2f} ms")
    if len(engine.history) > args.trace:
        print(f"  ... {len(engine.history) - args.trace} more steps")
    step_ms = np.array([s.seconds for s in engine.history]) * 1e3
    print(f"steps={stats['steps']} (mixed prefill+decode: {stats['mixed_steps']}) in {stats['seconds']:.2f}s: "
          f"{stats['generated_per_s']:.1f} generated tokens/s, {stats['processed_per_s']:.1f} processed tokens/s, "
          f"step median {np.median(step_ms):.2f} ms")
    digest = hashlib.sha1(str([r.output for r in requests]).encode()).hexdigest()[:16]
    print(f"outputs {digest} (first request: {requests[0].output[:8]} ...)")
    stats["digest"] = digest
    if args.check:
        outputs = [r.output for r in requests]
        dense_tokens, _ = dense_greedy(engine.params, cfg, prompts, args.new_tokens)
        forced = teacher_forced_logits(engine.params, cfg, prompts, outputs)
        engine_logits = np.stack([np.stack(r.logits) for r in requests])
        result = compare_greedy(np.array(outputs), engine_logits, dense_tokens, forced, tol=args.tol)
        same = int((np.array(outputs) == dense_tokens).all(axis=1).sum())
        print(f"vs dense f32 reference: {same}/{len(requests)} sequences equal token for token, max logit error "
              f"{result['max_logit_error']:.4f}, bf16 near-tie divergences {result['divergences'] or 'none'}")
        stats.update(result)
    if args.json and jax.process_index() == 0:
        stats["divergences"] = {str(k): v for k, v in stats.get("divergences", {}).items()}
        record = {"config": args.config, "layers": cfg.num_layers, "devices": args.tp,
                  "processes": jax.process_count(), "device": jax.devices()[0].device_kind, "jax": jax.__version__,
                  "requests": args.requests, "new_tokens": args.new_tokens, "prompt_lens": [lo, hi],
                  "max_num_seqs": seqs, "token_budget": budget, "page_size": args.page_size, "num_pages": num_pages,
                  "init_s": init_s, "compile_s": compile_s, "stats": stats,
                  "steps": [dataclasses.asdict(s) for s in engine.history]}
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    return stats


if __name__ == "__main__":
    main()
