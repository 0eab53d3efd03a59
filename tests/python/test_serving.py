"""The serving step (xla_gpu_kernels.serving) on CPU, tiny configuration: the paged engine under
continuous batching generates, token for token, what the same model run densely (no pages, full
causal attention in f32) generates, up to bf16 near-ties; plus the scheduler's and the cache's
invariants. Our op runs through the library's Host handler."""

import importlib.util
import json
import math
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xla_gpu_kernels.serving import (Engine, PageAllocator, compare_greedy, dense_greedy, init_params, llama3_8b,
                                     llama3_70b, make_step, teacher_forced_logits, tiny, write_kv)
from xla_gpu_kernels.serving.model import rope

jax.config.update("jax_platforms", "cpu")

PARAM_SEED, PROMPT_SEED = 0, 1234
PROMPT_LENS = [5, 12, 23, 31, 40, 47, 55, 60]
NEW_TOKENS = 32
# Logits have std ~1 (weights std 1/sqrt(fan_in)). The engine rounds q, K, V and the attention output
# to bf16; the f32 dense reference does not: measured max |difference| 0.018 over 256 steps.
LOGIT_TOL = 0.05


@pytest.fixture(scope="module")
def run():
    print(f"param seed {PARAM_SEED}, prompt seed {PROMPT_SEED}")
    cfg = tiny()
    params = init_params(cfg, PARAM_SEED)
    rng = np.random.default_rng(PROMPT_SEED)
    prompts = [rng.integers(0, cfg.vocab_size, n).tolist() for n in PROMPT_LENS]
    # 4 sequence slots, 32-token budget, pages for ~4 requests: prompts are chunked, decode rows and
    # prefill chunks share steps, requests wait for slots and pages, and freed pages are reused.
    engine = Engine(cfg, params, max_num_seqs=4, token_budget=32, page_size=16, num_pages=20, max_model_len=96,
                    record_logits=True)
    requests = [engine.add_request(p, NEW_TOKENS) for p in prompts]
    stats = engine.run()
    print("engine:", stats)
    return cfg, params, prompts, engine, requests, stats


def test_paged_engine_matches_dense_f32_reference(run):
    cfg, params, prompts, engine, requests, _ = run
    engine_tokens = np.array([r.output for r in requests])
    engine_logits = np.stack([np.stack(r.logits) for r in requests])
    assert engine_tokens.shape == (8, NEW_TOKENS) and engine_logits.shape == (8, NEW_TOKENS, cfg.vocab_size)
    width = max(PROMPT_LENS) + NEW_TOKENS
    dense_tokens, dense_logits = dense_greedy(params, cfg, prompts, NEW_TOKENS, width)
    forced = teacher_forced_logits(params, cfg, prompts, [r.output for r in requests], width)
    # where the engine has not diverged, teacher forcing is the free-running dense run (up to the
    # f32 summation order of matmuls of other shapes)
    for i in range(8):
        same = np.cumprod(engine_tokens[i] == dense_tokens[i]).astype(bool)
        np.testing.assert_allclose(forced[i][same], dense_logits[i][same], atol=1e-3)
    result = compare_greedy(engine_tokens, engine_logits, dense_tokens, forced, LOGIT_TOL)
    matched = int((engine_tokens == dense_tokens).all(axis=1).sum())
    print(f"{matched}/8 sequences equal token for token; max logit error {result['max_logit_error']:.4f}; "
          f"divergences (seq: step, engine token, dense token, dense top-2 gap): {result['divergences']}")
    assert matched >= 6, result


def test_paged_engine_matches_dense_with_bf16_rounded_qkv_exactly(run):
    """The divergences above are the bf16 rounding of q/K/V and nothing else: a dense reference that
    rounds them the same way (attention still dense f32) gives the engine's tokens exactly."""
    cfg, params, prompts, engine, requests, _ = run
    engine_tokens = np.array([r.output for r in requests])
    engine_logits = np.stack([np.stack(r.logits) for r in requests])
    dense_tokens, _ = dense_greedy(params, cfg, prompts, NEW_TOKENS, round_qkv=True)
    np.testing.assert_array_equal(engine_tokens, dense_tokens)
    forced = teacher_forced_logits(params, cfg, prompts, [r.output for r in requests], round_qkv=True)
    result = compare_greedy(engine_tokens, engine_logits, dense_tokens, forced, LOGIT_TOL)
    print(f"bf16-rounded dense: all tokens equal; max logit error {result['max_logit_error']:.4f}")


def test_long_prompt_chunked_matches_dense():
    """A 530-token prompt prefilled in 64-token chunks (each chunk attends to every earlier one's
    pages) and decoded past 512 keys, beside a short one: the same check against the dense f32
    reference (long contexts are where a kernel splits its keys)."""
    cfg = tiny()
    params = init_params(cfg, PARAM_SEED)
    rng = np.random.default_rng(PROMPT_SEED + 1)
    prompts = [rng.integers(0, cfg.vocab_size, n).tolist() for n in (530, 17)]
    engine = Engine(cfg, params, max_num_seqs=2, token_budget=64, page_size=16, num_pages=40, max_model_len=560,
                    record_logits=True)
    requests = [engine.add_request(p, 8) for p in prompts]
    engine.run()
    assert requests[0].prefill_chunks == 9
    tokens = np.array([r.output for r in requests])
    logits = np.stack([np.stack(r.logits) for r in requests])
    dense_tokens, _ = dense_greedy(params, cfg, prompts, 8, 544)
    forced = teacher_forced_logits(params, cfg, prompts, [r.output for r in requests], 544)
    result = compare_greedy(tokens, logits, dense_tokens, forced, LOGIT_TOL)
    print(f"long prompt: max logit error {result['max_logit_error']:.4f}, divergences {result['divergences']}")


def test_continuous_batching_schedule(run):
    cfg, _, prompts, engine, requests, stats = run
    hist = engine.history
    assert all(s.decode_rows + s.prefill_tokens <= engine.token_budget for s in hist)
    assert all(s.num_seqs <= engine.max_num_seqs for s in hist)
    assert stats["tokens_generated"] == 8 * NEW_TOKENS
    assert stats["tokens_processed"] == sum(len(p) for p in prompts) + 8 * (NEW_TOKENS - 1)
    assert stats["mixed_steps"] > 0, "no step mixed decode rows with a prefill chunk"
    assert max(r.prefill_chunks for r in requests) > 1, "no prompt was chunked"
    assert max(r.admitted_step for r in requests) > 0, "every request was admitted at once"
    # freed pages went to later requests; all are back at the end
    assert engine.allocator.num_free == engine.num_pages and not engine.running and not engine.waiting
    late = max(requests, key=lambda r: r.admitted_step)
    early = [r for r in requests if r.finished_step is not None and r.finished_step < late.admitted_step]
    assert early, "the last admitted request did not wait for an earlier one to finish"
    print(f"{len(hist)} steps, {stats['mixed_steps']} mixed, admissions at steps "
          f"{[r.admitted_step for r in requests]}, finished at {[r.finished_step for r in requests]}")


def test_step_compiles_once_and_donates_the_cache(run):
    cfg, params, _, engine, _, _ = run
    assert engine.step_fn._cache_size() == 1  # one static shape for every mixed batch
    old = engine.caches
    engine.warmup()  # an empty batch (num_seqs 0)
    assert all(c.is_deleted() for c in old)
    batch = engine.build_batch([])
    hlo = engine.step_fn.lower(params, engine.caches, batch).compile().as_text()
    assert "xla_gpu_paged_attention" in hlo
    assert hlo.count("must-alias") + hlo.count("may-alias") >= cfg.num_layers, "caches not aliased to outputs"


def test_page_allocator():
    a = PageAllocator(6)
    x = a.allocate(4)
    assert x == [0, 1, 2, 3] and a.num_free == 2
    with pytest.raises(MemoryError):
        a.allocate(3)
    a.free([1, 2])
    assert a.allocate(3) == [1, 2, 4]
    with pytest.raises(ValueError):
        a.free([5])


def test_write_kv_interleaves_k_and_v_and_drops_padding():
    rng = np.random.default_rng(7)
    cache = jnp.zeros((3, 4, 4, 8), jnp.float32)
    k = jnp.asarray(rng.standard_normal((3, 2, 8)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((3, 2, 8)), jnp.float32)
    out = np.asarray(write_kv(cache, k, v, jnp.array([2, 0, 3]), jnp.array([1, 3, 0])))  # page 3: padding
    np.testing.assert_array_equal(out[2, 1, 0::2], k[0])
    np.testing.assert_array_equal(out[2, 1, 1::2], v[0])
    np.testing.assert_array_equal(out[0, 3, 0::2], k[1])
    assert np.count_nonzero(out) == 2 * 2 * 2 * 8


def test_rope_is_relative():
    """<rope(q, m), rope(k, n)> depends on m - n only, and rope keeps norms."""
    rng = np.random.default_rng(3)
    q = jnp.asarray(rng.standard_normal((1, 1, 64)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((1, 1, 64)), jnp.float32)
    dot = lambda m, n: float(jnp.sum(rope(q, jnp.array([m]), 500000.0) * rope(k, jnp.array([n]), 500000.0)))
    assert math.isclose(dot(7, 3), dot(104, 100), rel_tol=1e-4)
    assert not math.isclose(dot(7, 3), dot(3, 7), rel_tol=1e-3)
    np.testing.assert_allclose(jnp.linalg.norm(rope(q, jnp.array([1234]), 500000.0)), jnp.linalg.norm(q), rtol=1e-5)


def test_llama3_8b_step_traces_at_full_shapes():
    """The 8B configuration's parameters and step, shapes only (nothing allocated)."""
    cfg = llama3_8b()
    assert (cfg.num_layers, cfg.hidden, cfg.num_q_heads, cfg.num_kv_heads, cfg.head_dim, cfg.mlp_hidden,
            cfg.vocab_size) == (32, 4096, 32, 8, 128, 14336, 128256)
    params = jax.eval_shape(lambda: init_params(cfg, 0))
    n = sum(math.prod(x.shape) for x in jax.tree.leaves(params))
    assert n == cfg.num_params() and 8.0e9 < n < 8.1e9
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(params))
    cfg2 = llama3_8b(num_layers=2)
    params2 = jax.eval_shape(lambda: init_params(cfg2, 0))
    engine_like = Engine.__new__(Engine)
    engine_like.token_budget, engine_like.max_num_seqs, engine_like.pages_per_seq = 64, 8, 8
    engine_like.num_pages, engine_like.page_size = 64, 16
    batch = Engine.build_batch(engine_like, [])
    caches = [jax.ShapeDtypeStruct((64, 16, 16, 128), jnp.bfloat16)] * 2
    tokens, logits, new = jax.eval_shape(make_step(cfg2), params2, caches, batch)
    assert tokens.shape == (8,) and logits.shape == (8, 128256) and new[0].shape == (64, 16, 16, 128)


ROOT = Path(__file__).resolve().parents[2]

TP_PROGRAM = r"""
import re, jax, numpy as np
from jax.sharding import Mesh
from xla_gpu_kernels.serving import Engine, init_params, param_shardings, tiny
cfg = tiny()
mesh = Mesh(np.array(jax.devices()[:2]), ("tp",))
engine = Engine(cfg, init_params(cfg, 0, param_shardings(cfg, mesh)), max_num_seqs=4, token_budget=32, num_pages=24,
                max_model_len=96, mesh=mesh)
hlo = engine.step_fn.lower(engine.params, engine.caches, engine.build_batch([])).compile().as_text()
count = lambda op: len(re.findall(r"= \S+ " + op + r"(-start)?\(", hlo))
calls = re.findall(r"(bf16\[\d+,\d+,\d+\])\{[^}]*\}, u8\[\d+\]\{0\}\) custom-call\(", hlo)
print("all-reduce", count("all-reduce"), "all-gather", count("all-gather"), "attention calls", calls)
assert count("all-reduce") == 2 * cfg.num_layers and count("all-gather") == 0, hlo
assert calls == ["bf16[32,2,64]"] * cfg.num_layers, calls  # each device: its 2 of the 4 query heads
"""


def _run(args, devices):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    print(done.stdout)
    return done.stdout


BAD_TP_PROGRAM = r"""
import jax, numpy as np
from jax.sharding import Mesh
from xla_gpu_kernels.serving import make_step, tiny
try:
    make_step(tiny(), mesh=Mesh(np.array(jax.devices()[:4]), ("tp",)))
except ValueError as e:
    print("ValueError:", e)
    assert "use a mesh axis of 1, 2 devices" in str(e) and "num_kv_heads=2" in str(e), e
else:
    raise AssertionError("no error")
"""


REDUCE_DTYPE_PROGRAM = r"""
import dataclasses, glob, re, sys, jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh
from xla_gpu_kernels.serving import Engine, init_params, param_shardings, tiny
mesh = Mesh(np.array(jax.devices()[:2]), ("tp",))
logits = {}
for name in ("float32", "bfloat16"):
    cfg = dataclasses.replace(tiny(), reduce_dtype=jnp.dtype(name))
    engine = Engine(cfg, init_params(cfg, 0, param_shardings(cfg, mesh)), max_num_seqs=4, token_budget=32,
                    num_pages=24, max_model_len=96, mesh=mesh, record_logits=True)
    req = engine.add_request(list(range(1, 30)), max_new_tokens=1)
    engine.run()
    logits[name] = req.logits[0]
# After SPMD partitioning (the dump of this process's steps; the CPU backend later widens bf16
# all-reduces to f32 to run them), the model's all-reduces are in the configured dtype.
found = {}
for path in sorted(glob.glob(sys.argv[1] + "/*jit_step*after_spmd-partitioning*")):
    found.setdefault(tuple(sorted(set(re.findall(r"= (\w+)\[[0-9,]+\]\S* all-reduce\(", open(path).read())))), 0)
print("all-reduce dtypes per compiled step:", found, "max logit difference", np.abs(logits["float32"] - logits["bfloat16"]).max())
assert set(found) == {("f32",), ("bf16",)}, found
assert np.abs(logits["float32"] - logits["bfloat16"]).max() < 0.1
"""


def test_bf16_reduce_dtype_puts_the_tensor_parallel_all_reduces_in_bf16(tmp_path):
    """``Config.reduce_dtype=bf16`` under TP=2: the o / down products are all-reduced in bf16
    (half the bytes), the default in f32; the logits stay within bf16 rounding of each other."""
    env_flags = f"--xla_dump_to={tmp_path} --xla_dump_hlo_pass_re=spmd-partitioning"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count=2 {env_flags}")
    done = subprocess.run([sys.executable, "-c", REDUCE_DTYPE_PROGRAM, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    print(done.stdout)


def test_tensor_parallel_width_that_splits_a_kv_head_is_a_value_error():
    """4 devices for 2 KV heads: a ValueError naming the widths that work, before any tracing."""
    _run(["-c", BAD_TP_PROGRAM], 4)


def test_tensor_parallel_step_is_megatron_on_two_cpu_devices():
    """TP=2: two all-reduces per layer, no all-gather, one attention call per device on its heads."""
    _run(["-c", TP_PROGRAM], 2)


def test_llama3_70b_config():
    """The 70B configuration's shapes and parameter count (shapes only, nothing allocated)."""
    cfg = llama3_70b()
    assert (cfg.num_layers, cfg.hidden, cfg.num_q_heads, cfg.num_kv_heads, cfg.head_dim, cfg.mlp_hidden,
            cfg.vocab_size, cfg.rms_eps, cfg.rope_theta) == (80, 8192, 64, 8, 128, 28672, 128256, 1e-5, 500000.0)
    assert llama3_70b(num_layers=2).num_layers == 2
    params = jax.eval_shape(lambda: init_params(cfg, 0))
    n = sum(math.prod(x.shape) for x in jax.tree.leaves(params))
    assert n == cfg.num_params() and 70.5e9 < n < 70.6e9  # ~141 GB of bf16


TP70B_PROGRAM = r"""
import re, sys, time, jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from xla_gpu_kernels.serving import Batch, cache_sharding, init_params, llama3_70b, make_step, param_shardings
tp, layers = int(sys.argv[1]), int(sys.argv[2])
cfg = llama3_70b(num_layers=layers)
mesh = Mesh(np.array(jax.devices()[:tp]), ("tp",))
T, S, PAGES, PAGE, PER_SEQ = 32, 8, 64, 16, 8  # token budget, sequences, pages, page size, pages per sequence
# Shapes with their shardings only: no weight, cache or batch is allocated.
sds = lambda x, sh: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh)
params = jax.tree.map(sds, jax.eval_shape(lambda: init_params(cfg, 0)), param_shardings(cfg, mesh))
caches = [jax.ShapeDtypeStruct((PAGES, PAGE, 2 * cfg.num_kv_heads, cfg.head_dim), cfg.dtype,
                               sharding=cache_sharding(mesh))] * layers
rep = NamedSharding(mesh, P())
i32 = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.int32, sharding=rep)
batch = Batch(i32(T), i32(T), i32(T), i32(T), i32(S), i32(S, PER_SEQ), i32(S + 1), i32(1), i32(S))
t0 = time.perf_counter()
hlo = make_step(cfg, mesh=mesh).lower(params, caches, batch).compile().as_text()
print(f"TP={tp} layers={layers}: lower + compile {time.perf_counter() - t0:.1f} s")
count = lambda op: len(re.findall(r"= \S+ " + op + r"(-start)?\(", hlo))
found = {op: count(op) for op in ("all-reduce", "all-gather", "all-to-all", "collective-permute", "reduce-scatter")}
reduced = re.findall(r"= (\S+)\{[\d,]*\} all-reduce(?:-start)?\(", hlo)
# the attention custom call's (q, pool) operand shapes, as each device sees them
calls = re.findall(r'custom_call_target="xla_gpu_paged_attention", operand_layout_constraints='
                   r"\{(bf16\[[\d,]+\])\{[\d,]*\}, (bf16\[[\d,]+\])\{", hlo)
print("collectives", found, "all-reduced", sorted(set(reduced)), "attention calls (q, pool)", calls)
# Megatron: one all-reduce of the hidden states after each row-parallel matmul (o and down), nothing
# else; embedding and LM head are replicated, so they add none.
assert found == {"all-reduce": 2 * layers, "all-gather": 0, "all-to-all": 0, "collective-permute": 0,
                 "reduce-scatter": 0}, found
assert reduced == [f"f32[{T},{cfg.hidden}]"] * (2 * layers), reduced
hq, hkv = cfg.num_q_heads // tp, cfg.num_kv_heads // tp  # 8 q heads and 1 KV head a device at TP=8
assert calls == [(f"bf16[{T},{hq},{cfg.head_dim}]", f"bf16[{PAGES},{PAGE},{2 * hkv},{cfg.head_dim}]")] * layers, calls
"""


@pytest.mark.parametrize("tp", [8, 4])
def test_llama3_70b_tensor_parallel_step_is_megatron_on_eight_cpu_devices(tp):
    """The engine step at Llama-3-70B's shapes (2 layers; nothing allocated: ShapeDtypeStructs with
    shardings), lowered and compiled for TP=8 (one KV head and its 8 query heads a device) and
    TP=4 (2 KV / 16 q) on 8 host devices: exactly 2 all-reduces per layer, of the [tokens, hidden]
    activations; no all-gather, all-to-all, collective-permute or reduce-scatter; one attention call
    per device per layer on local shapes. Compile ~1 s each on CPU (80 layers: ~10 s at TP=8)."""
    out = _run(["-c", TP70B_PROGRAM, str(tp), "2"], 8)
    assert f"TP={tp} layers=2" in out


def _digest(out):
    return re.search(r"^outputs (\w+)", out, re.M).group(1)


def test_serving_example_tp2_in_one_and_in_two_processes():
    """examples/serving_step.py tensor parallel over two CPU devices: in one process (checked
    against the dense reference), then as two processes of one device each (JAX multi-controller,
    gloo collectives): the same tokens."""
    args = [str(ROOT / "examples" / "serving_step.py"), "--requests", "6", "--new-tokens", "8", "--trace", "2"]
    one_process = _run(args + ["--tp", "2"], 2)
    assert "backend=cpu devices=2 processes=1 config=tiny" in one_process and "vs dense f32 reference" in one_process
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    procs = [subprocess.Popen([sys.executable, *args, "--tp", "2", "--coordinator", f"127.0.0.1:{port}",
                               "--num-processes", "2", "--process-id", str(i)], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
        assert "devices=2 processes=2" in out, out
    print(outs[0])
    assert _digest(outs[0]) == _digest(outs[1]) == _digest(one_process)


def test_serving_benchmark_backends_agree_on_cpu():
    """benchmarks/serving_step.py in a tiny case: every backend (ours, Pallas paged decode in
    interpret mode + XLA prefill, pure XLA gather + dense, no-attention) runs the same step, and the
    baselines' logits match ours (asserted inside). CPU times mean nothing."""
    spec = importlib.util.spec_from_file_location("bench_serving_step", ROOT / "benchmarks" / "serving_step.py")
    bench = importlib.util.module_from_spec(spec)  # by path: examples/ has a serving_step.py too
    sys.modules[spec.name] = bench  # (dataclasses look their module up)
    spec.loader.exec_module(bench)

    assert bench.Layout.parse("mixed:6x64+1x32") == bench.Layout("mixed:6x64+1x32", 6, 64, 1, 32, 32)
    assert bench.Layout.parse("prefill:4x16@48") == bench.Layout("prefill:4x16@48", 0, 0, 4, 16, 48)
    # A cache cap below the layout's pages: context pages shared, the pages the step writes private.
    rng = np.random.default_rng(0)
    layout = bench.Layout.parse("mixed:6x64+2x16@48")
    batch, num_pages, shared = bench.make_batch(layout, 16, rng, max_pages=12)
    assert num_pages == 12 and shared > 0
    written = set(np.asarray(batch.write_pages).tolist())
    assert len(written) == 6 + 2 * 1  # each decode row's last page, each chunk's one page: all distinct
    context = {int(p) for s, n in enumerate([4] * 6 + [3] * 2) for p in np.asarray(batch.page_indices)[s, :n]}
    assert context - written and all(p < num_pages for p in context)
    result = bench.main(["--cases", "mixed:3x32+1x16", "--iters", "1"])
    got = {r["backend"]: r for r in result["rows"]}
    assert set(got) == {"ours", "pallas+cudnn", "xla", "no-attn"}
    assert all("ms" in r for r in got.values()), got
    assert got["ours"]["tokens"] == 3 + 16


def test_serving_benchmark_tensor_parallel_widths_alone(tmp_path):
    """benchmarks/serving_step.py with tensor-parallel backends only (how 70B's shapes run: no one
    device holds their weights): each width's weights are initialised sharded from the same seed,
    and the wider width's logits are checked against the first backend named (asserted inside)."""
    out = tmp_path / "tp.json"
    _run([str(ROOT / "benchmarks" / "serving_step.py"), "--backends", "ours@tp1,ours@tp2", "--cases",
          "mixed:3x32+1x16", "--iters", "1", "--out", str(out)], devices=2)
    rows = {r["backend"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"ours@tp1", "ours@tp2"} and all("ms" in r for r in rows.values()), rows
    assert rows["ours@tp2"]["check"].startswith("max |logits - ours@tp1|"), rows["ours@tp2"]
