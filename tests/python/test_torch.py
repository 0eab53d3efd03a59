"""torch ops `torch.ops.xla_gpu.*`: CPU implementation (CI) and CUDA implementation on torch's
current stream (marked `gpu`), against torch's own add and JAX's `ref_ragged_paged_attention`;
`torch.compile` tracing through the fake implementations; the torch_xla front end's errors."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import xla_gpu_kernels.torch as xt
from rpa_cases import case_seed, check_case, dense_reference_array, random_cases

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
                "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}


def to_torch(a: np.ndarray, device) -> torch.Tensor:
    if a.dtype.kind in "iu":
        return torch.from_numpy(np.ascontiguousarray(a)).to(device)
    # bf16 / fp8 numpy arrays: go through f32 (exact: every value is representable).
    return torch.from_numpy(a.astype(np.float32)).to(TORCH_DTYPES[str(a.dtype)]).to(device)


def jax_reference(args, attrs):
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ref_ragged_paged_attention
    with jax.default_device(jax.devices("cpu")[0]), jax.default_matmul_precision("highest"):
        return np.asarray(ref_ragged_paged_attention(*map(jnp.asarray, args), **attrs), np.float32)


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def test_native_kernels_are_the_ones_registered():
    """The tests here exercise the library's native kernels (libtorch's stable C ABI), not the
    Python fallback, unless XGK_TORCH_KERNELS=python asks for it: a failed registration would
    otherwise fall back and pass unnoticed."""
    want = "python" if os.environ.get("XGK_TORCH_KERNELS") == "python" else "native"
    assert xt.KERNELS["CPU"] == want
    if torch.cuda.is_available() or torch.backends.cuda.is_built():
        assert xt.KERNELS["CUDA"] == want


def test_python_kernels_on_request():
    """XGK_TORCH_KERNELS=python registers the Python kernels (ctypes into the C API): same results."""
    code = ("import torch, xla_gpu_kernels.torch as xt; a = torch.arange(5.0); "
            "assert xt.KERNELS == {'CPU': 'python', 'CUDA': 'python'}, xt.KERNELS; "
            "assert torch.equal(torch.ops.xla_gpu.simple_add(a, a), a + a); print('ok')")
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(xt.__file__)))
    env = dict(os.environ, XGK_TORCH_KERNELS="python",
               PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [1, 5, 1000, 65537])
def test_simple_add_matches_torch(device, dtype, n):
    a = (torch.rand(n, dtype=torch.float32) * 200 - 100).to(dtype).to(device)
    b = (torch.rand(n, dtype=torch.float32) * 200 - 100).to(dtype).to(device)
    torch.testing.assert_close(xt.simple_add(a, b), a + b, rtol=0, atol=0)


@pytest.mark.gpu
def test_cuda_op_runs_on_the_current_stream():
    """The op is enqueued on torch's current stream: on a side stream it reads `b` only after the
    side stream's own work (a spin, then the copy that writes `b`) is done; on any other stream it
    would read `b` before the copy. (`a` is written on the default stream, so the side stream
    waits for it first: torch's rule for tensors shared between streams.)"""
    s = torch.cuda.Stream()
    a = torch.rand(1 << 20, device="cuda")
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # ~25 ms of spinning on the side stream
        b = a.clone()
        out = torch.ops.xla_gpu.simple_add(b, b)
    s.synchronize()
    torch.testing.assert_close(out, 2 * a, rtol=0, atol=0)


def test_errors_are_python_exceptions():
    with pytest.raises(ValueError, match="simple_add: dtype mismatch: a is f32 but b is f16"):
        xt.simple_add(torch.ones(4), torch.ones(4, dtype=torch.float16))
    with pytest.raises(ValueError, match="unsupported dtype s32"):
        xt.simple_add(torch.ones(4, dtype=torch.int32), torch.ones(4, dtype=torch.int32))


SEED = case_seed()
CASES = random_cases(seed=SEED, count=14)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("label,case", CASES, ids=[c[0] for c in CASES])
def test_paged_attention_matches_jax_reference(device, label, case):
    args, attrs = case
    t = [to_torch(a, device) for a in args]
    ours = torch.ops.xla_gpu.paged_attention(*t, **attrs)
    assert ours.shape == t[0].shape and ours.dtype == t[0].dtype and ours.device == t[0].device
    ours = ours.float().cpu().numpy()
    check_case(ours, jax_reference(args, attrs), case, label)
    check_case(ours, dense_reference_array(args, attrs), case, label + " (dense reference)")


def test_python_kernels_compute_paged_attention():
    """The Python fallback kernels (XGK_TORCH_KERNELS=python: ctypes into the C API) pass the
    attributes through: paged attention against the independent dense reference (a fallback that
    forced sm_scale to 1 or dropped the cap passed before issue 50), on CPU, and on CUDA where
    there is a GPU."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = f"""
import sys; sys.path.insert(0, {here!r})
import torch, xla_gpu_kernels.torch as xt
import mutants; mutants.install_from_env()  # scripts/mutation_check.sh (XGK_MUTANT); nothing otherwise
from rpa_cases import check_case, dense_reference_array, random_cases
from test_torch import to_torch
assert xt.KERNELS == {{'CPU': 'python', 'CUDA': 'python'}}, xt.KERNELS
devices = ['cpu'] + (['cuda'] if torch.cuda.is_available() else [])
for label, case in random_cases({SEED}, 14):
    args, attrs = case
    for device in devices:
        ours = torch.ops.xla_gpu.paged_attention(*[to_torch(a, device) for a in args], **attrs)
        check_case(ours.float().cpu().numpy(), dense_reference_array(args, attrs), case, f'{{label}} {{device}}')
print('ok', devices)
"""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(xt.__file__)))
    env = dict(os.environ, XGK_TORCH_KERNELS="python",
               PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
    print(out.stdout.splitlines()[-1])


def test_paged_attention_bad_input_raises():
    args, attrs = CASES[0][1]
    t = [to_torch(a, "cpu") for a in args]
    with pytest.raises(ValueError, match="sliding_window must be > 0"):
        torch.ops.xla_gpu.paged_attention(*t, sliding_window=0)
    with pytest.raises(ValueError, match="kv_lens must be int32"):
        torch.ops.xla_gpu.paged_attention(t[0], t[1], t[2].long(), *t[3:])


def test_ops_trace_under_torch_compile():
    args, attrs = CASES[1][1]
    t = [to_torch(a, "cpu") for a in args]

    def step(q, kv, kv_lens, pages, cu, ns):
        return torch.ops.xla_gpu.paged_attention(q, kv, kv_lens, pages, cu, ns, attrs["sm_scale"]) * 2

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(*t), step(*t), rtol=0, atol=0)
    add = torch.compile(lambda a, b: torch.ops.xla_gpu.simple_add(a, b) + 1, backend="aot_eager", fullgraph=True)
    x = torch.rand(10)
    torch.testing.assert_close(add(x, x), 2 * x + 1, rtol=0, atol=0)


def test_torch_xla_2_9_and_later_is_refused_with_the_alternatives(monkeypatch):
    # torch_xla cannot be installed next to torch 2.11; a stub with its version and _XLAC module
    # exercises the version gate (2.9 removed CUDA custom-call registration).
    import sys
    import types

    import xla_gpu_kernels.torch_xla as txla
    stub = types.ModuleType("torch_xla")
    stub.__version__ = "2.9.0+cpu"
    stub._XLAC = types.ModuleType("torch_xla._XLAC")
    monkeypatch.setitem(sys.modules, "torch_xla", stub)
    monkeypatch.setitem(sys.modules, "torch_xla._XLAC", stub._XLAC)
    with pytest.raises(RuntimeError, match=r"torch_xla 2\.9\.0\+cpu removed CUDA support.*Use JAX"):
        txla.register()


def test_torch_xla_front_end_says_what_to_use_instead():
    import xla_gpu_kernels.torch_xla as txla
    try:
        import torch_xla  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="needs torch_xla built with CUDA"):
            txla.register()
    else:  # pragma: no cover - torch_xla is not installable on our machines
        pytest.fail("torch_xla present: extend this test to run the legacy targets")


@pytest.mark.gpu
@pytest.mark.parametrize("kv_len", [300, 5000])  # one split, and several (stream-ordered scratch)
def test_paged_attention_replays_in_a_cuda_graph_with_new_metadata(kv_len):
    """Captured in a torch CUDA graph, the op replays correctly, also after the metadata tensors'
    contents change (kernels read them on the device at every replay)."""
    torch.manual_seed(0)
    page, pages_per_seq, seqs = 16, -(-kv_len // 16) + 1, 3
    q = torch.rand(seqs, 8, 128, device="cuda", dtype=torch.bfloat16) - 0.5
    kv = torch.rand(seqs * pages_per_seq + 4, page, 4, 128, device="cuda", dtype=torch.bfloat16) - 0.5
    table = torch.randperm(kv.shape[0], device="cuda")[: seqs * pages_per_seq].int().reshape(seqs, pages_per_seq)
    kv_lens = torch.tensor([kv_len, kv_len // 2, 7], dtype=torch.int32, device="cuda")
    cu = torch.arange(seqs + 1, dtype=torch.int32, device="cuda")
    num_seqs = torch.tensor([seqs], dtype=torch.int32, device="cuda")
    args = (q, kv, kv_lens, table, cu, num_seqs)
    op = lambda: torch.ops.xla_gpu.paged_attention(*args, sm_scale=0.088)  # noqa: E731
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        op()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = op()
    for lens in ([kv_len, kv_len // 2, 7], [kv_len // 3, 1, kv_len]):
        kv_lens.copy_(torch.tensor(lens, dtype=torch.int32))
        table.copy_(torch.randperm(kv.shape[0], device="cuda")[: seqs * pages_per_seq].int().reshape(seqs, -1))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, op(), rtol=0, atol=0)


@pytest.mark.gpu
def test_torch_compile_reduce_overhead_runs_our_ops_on_cuda():
    """`torch.compile(mode="reduce-overhead")` (CUDA graphs via cudagraph trees) over a function
    calling both ops: same results as eager, also after new metadata values."""
    torch.manual_seed(1)
    seqs, pages_per_seq = 4, 40
    q = torch.rand(seqs, 8, 128, device="cuda", dtype=torch.bfloat16) - 0.5
    kv = torch.rand(seqs * pages_per_seq, 16, 4, 128, device="cuda", dtype=torch.bfloat16) - 0.5
    table = torch.randperm(kv.shape[0], device="cuda").int().reshape(seqs, pages_per_seq)
    cu = torch.arange(seqs + 1, dtype=torch.int32, device="cuda")
    num_seqs = torch.tensor([seqs], dtype=torch.int32, device="cuda")

    def step(q, kv, kv_lens, table, cu, num_seqs):
        a = torch.ops.xla_gpu.paged_attention(q, kv, kv_lens, table, cu, num_seqs, sm_scale=0.088)
        return torch.ops.xla_gpu.simple_add(a, q)

    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    for lens in ([600, 17, 300, 640], [1, 640, 333, 90], [600, 17, 300, 640]):
        kv_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
        for _ in range(3):  # warm-up, record, replay
            got = compiled(q, kv, kv_lens, table, cu, num_seqs).clone()
        torch.testing.assert_close(got, step(q, kv, kv_lens, table, cu, num_seqs), rtol=0, atol=0)


@pytest.mark.gpu
def test_calls_from_threads_on_their_own_streams():
    """Descriptor caches are per thread: concurrent calls of one shape on several streams give
    the results of single-threaded calls."""
    import threading
    torch.manual_seed(2)
    q = torch.rand(3, 8, 64, device="cuda", dtype=torch.float16) - 0.5
    kv = torch.rand(60, 16, 4, 64, device="cuda", dtype=torch.float16) - 0.5
    table = torch.randperm(60, device="cuda").int().reshape(3, 20)
    cu = torch.arange(4, dtype=torch.int32, device="cuda")
    ns = torch.tensor([3], dtype=torch.int32, device="cuda")
    lens = [torch.tensor([n, 2 * n, 3 * n], dtype=torch.int32, device="cuda") for n in range(1, 9)]
    want = [torch.ops.xla_gpu.paged_attention(q, kv, kl, table, cu, ns) for kl in lens]
    got, errors = [None] * len(lens), []

    def work(i):
        try:
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                for _ in range(50):
                    out = torch.ops.xla_gpu.paged_attention(q, kv, lens[i], table, cu, ns)
            s.synchronize()
            got[i] = out
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(lens))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
