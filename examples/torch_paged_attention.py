"""torch usage of xla_gpu_kernels: `torch.ops.xla_gpu.simple_add` / `paged_attention` on CPU and
(when present) CUDA tensors, under `torch.compile`, and the torch_xla route.

    python examples/torch_paged_attention.py

torch_xla (<= 2.8, built with CUDA) would instead use the legacy custom calls:

    import xla_gpu_kernels.torch_xla as txla
    txla.register()                       # _xla_register_custom_call_target(..., "CUDA")
    out = txla.paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=0.088)
    # or torch.ops.xla_gpu.paged_attention on XLA tensors (its "XLA" implementation does the same)
"""

import torch

import xla_gpu_kernels.torch  # noqa: F401  (registers torch.ops.xla_gpu.*)


def problem(device, dtype=torch.bfloat16):
    """Two sequences: a decode (1 query over 37 keys) and a chunked prefill (4 queries over 20 keys)."""
    g = torch.Generator().manual_seed(0)
    pages, page_size, kv_heads, heads, dim = 16, 8, 2, 8, 128
    q = torch.randn(8, heads, dim, generator=g).to(dtype)  # 5 real rows + 3 padding rows
    kv_pages = torch.randn(pages, page_size, 2 * kv_heads, dim, generator=g).to(dtype)
    kv_lens = torch.tensor([37, 20], dtype=torch.int32)
    page_indices = torch.tensor([[3, 9, 1, 12, 5], [7, 0, 14, 0, 0]], dtype=torch.int32)
    cu_q_lens = torch.tensor([0, 1, 5], dtype=torch.int32)
    num_seqs = torch.tensor([2], dtype=torch.int32)
    return [t.to(device) for t in (q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs)]


def naive(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale):
    """The contract in plain torch (float32), for the check below."""
    out = torch.zeros(q.shape, dtype=torch.float32)
    q, kv = q.float().cpu(), kv_pages.float().cpu()
    kv_heads = kv.shape[2] // 2
    for s in range(int(num_seqs[0])):
        q0, q1, n = int(cu_q_lens[s]), int(cu_q_lens[s + 1]), int(kv_lens[s])
        tokens = kv[page_indices[s].long().cpu()].reshape(-1, 2 * kv_heads, kv.shape[-1])[:n]
        k = tokens[:, 0::2].repeat_interleave(q.shape[1] // kv_heads, dim=1)
        v = tokens[:, 1::2].repeat_interleave(q.shape[1] // kv_heads, dim=1)
        logits = torch.einsum("qhd,khd->hqk", q[q0:q1], k) * sm_scale
        pos = n - (q1 - q0) + torch.arange(q1 - q0)[:, None]
        logits = logits.masked_fill(torch.arange(n)[None, :] > pos, float("-inf"))
        out[q0:q1] = torch.einsum("hqk,khd->qhd", logits.softmax(-1), v)
    return out


def main():
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        a = torch.rand(1000, device=device)
        assert torch.equal(torch.ops.xla_gpu.simple_add(a, a), a + a)
        args = problem(device)
        out = torch.ops.xla_gpu.paged_attention(*args, sm_scale=128 ** -0.5)
        err = (out.float().cpu() - naive(*args, sm_scale=128 ** -0.5)).abs().max().item()
        compiled = torch.compile(lambda *t: torch.ops.xla_gpu.paged_attention(*t, sm_scale=128 ** -0.5),
                                 backend="aot_eager", fullgraph=True)
        same = torch.equal(compiled(*args), out)
        print(f"device={device} max error vs naive torch={err:.2e} torch.compile identical={same}")
        assert err < 3e-2 and same
    try:
        import xla_gpu_kernels.torch_xla as txla
        txla.register()
    except RuntimeError as e:
        print(f"torch_xla: {e}")


if __name__ == "__main__":
    main()
