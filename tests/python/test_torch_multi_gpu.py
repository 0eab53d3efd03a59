"""torch ops on any CUDA device (issue "Several GPUs", part 4): on `cuda:1` the op launches in that
device's context on its current stream, gives what the same call gives on `cuda:0`, and inputs on
two devices are a clear error. Marked `gpu`; never skips: with fewer than 2 GPUs it fails."""

import pytest
import torch

import xla_gpu_kernels.torch  # noqa: F401  (defines torch.ops.xla_gpu)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def two_gpus():
    assert torch.cuda.is_available() and torch.cuda.device_count() >= 2, \
        f"needs >= 2 CUDA GPUs, torch sees {torch.cuda.device_count()}"


def decode_inputs(device, seed=0):
    g = torch.Generator().manual_seed(seed)
    seqs, pages_per_seq = 3, 40
    q = (torch.rand(seqs, 8, 128, generator=g) - 0.5).bfloat16()
    kv = (torch.rand(seqs * pages_per_seq, 16, 4, 128, generator=g) - 0.5).bfloat16()
    table = torch.randperm(seqs * pages_per_seq, generator=g).int().reshape(seqs, pages_per_seq)
    kv_lens = torch.tensor([600, 17, 333], dtype=torch.int32)
    cu = torch.arange(seqs + 1, dtype=torch.int32)
    ns = torch.tensor([seqs], dtype=torch.int32)
    return [t.to(device) for t in (q, kv, kv_lens, table, cu, ns)]


def test_ops_on_the_second_gpu_match_the_first():
    want = torch.ops.xla_gpu.paged_attention(*decode_inputs("cuda:0"), sm_scale=0.088)
    # The current device stays cuda:0: the op must follow its tensors, not the current device.
    torch.cuda.set_device(0)
    got = torch.ops.xla_gpu.paged_attention(*decode_inputs("cuda:1"), sm_scale=0.088)
    assert got.device == torch.device("cuda:1")
    torch.testing.assert_close(got.cpu(), want.cpu(), rtol=0, atol=0)
    a = torch.rand(1 << 20, device="cuda:1")
    torch.testing.assert_close(torch.ops.xla_gpu.simple_add(a, a), 2 * a, rtol=0, atol=0)


def test_ops_on_the_second_gpu_use_its_current_stream():
    inputs = decode_inputs("cuda:1")
    s = torch.cuda.Stream(device="cuda:1")
    with torch.cuda.device(1), torch.cuda.stream(s):
        out = torch.ops.xla_gpu.paged_attention(*inputs, sm_scale=0.088)
    s.synchronize()
    want = torch.ops.xla_gpu.paged_attention(*decode_inputs("cuda:0"), sm_scale=0.088)
    torch.testing.assert_close(out.cpu(), want.cpu(), rtol=0, atol=0)


def test_inputs_on_two_gpus_are_a_clear_error():
    inputs = decode_inputs("cuda:0")
    inputs[1] = inputs[1].to("cuda:1")
    with pytest.raises(ValueError, match="one device"):
        torch.ops.xla_gpu.paged_attention(*inputs)
    with pytest.raises(ValueError, match="one device"):
        torch.ops.xla_gpu.simple_add(torch.ones(4, device="cuda:0"), torch.ones(4, device="cuda:1"))
