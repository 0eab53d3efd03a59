"""benchmarks/peers.py's matrix and correctness gate, on the CPU: each case's FLOPs and bytes against
brute-force counts, the inputs' logit spread, the float32 reference against the library's CPU
implementation, and the gate (a row's relative L2 error within `tolerance`) rejecting the deliberate
faults of mutants.py, which a wrong fast kernel would resemble, on fresh random inputs."""

import argparse
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import mutants
import xla_gpu_kernels.torch  # noqa: F401  (defines torch.ops.xla_gpu)
from rpa_cases import case_seed

# Appended, not prepended: benchmarks/ and examples/ both hold a serving_step.py.
sys.path.append(str(Path(__file__).resolve().parents[2] / "benchmarks"))
from peers_cases import GEOMETRIES, Case, bytes_min, causal_flops, suite_cases  # noqa: E402
from peers_inputs import LOGIT_STD, Inputs, check, logit_std_arg, tolerance  # noqa: E402

SEED = case_seed()
# Small geometries (q heads, kv heads, head dim, soft cap, sliding window) the CPU runs in well under
# a second a call: one plain, one with a window and a soft cap that binds (Grok-1's 30).
TEST_GEOMETRIES = {"T1": (8, 2, 128, None, None), "T2": (8, 2, 128, 30.0, 256)}
# Prefill rows over short contexts (a dropped key weighs more there) and decode rows of 512+ keys
# (the lost-second-half fault's): over 40 seeds each fault's worst row stayed above 2.5 times the
# tolerance, a correct one below 0.1 of it (benchmarks/NOTES.md "v49").
CASES = {
    "mix": Case("mix", "T1", [(48, 250), (1, 520), (1, 900)]),
    "window-cap": Case("window-cap", "T2", [(40, 700), (1, 800)]),
    "e4m3": Case("e4m3", "T1", [(64, 200), (1, 530), (1, 700)], kv_dtype="float8_e4m3fn"),
    "e5m2": Case("e5m2", "T1", [(64, 200), (1, 530), (1, 700)], kv_dtype="float8_e5m2"),
}


@pytest.fixture(autouse=True)
def test_geometries(monkeypatch):
    for name, geometry in TEST_GEOMETRIES.items():
        monkeypatch.setitem(GEOMETRIES, name, geometry)


def cpu_op(q, kv, kv_lens, pages, cu, num_seqs, **attrs):
    return torch.ops.xla_gpu.paged_attention(q, kv, kv_lens, pages, cu, num_seqs, **attrs)


def errors(case, fault=None, logit_std=LOGIT_STD):
    """`check`'s errors of the library's CPU implementation (with mutants.py's `fault`, if named)."""
    inp = Inputs(case, seed=SEED, device="cpu", min_pool_bytes=0, logit_std=logit_std)
    call = cpu_op if fault is None else mutants.faulty(cpu_op, mutants._Torch(), fault)
    out = call(inp.q, inp.kv, inp.kv_lens, inp.page_indices, inp.cu_q_lens, inp.num_seqs, sm_scale=inp.sm_scale,
               sliding_window=inp.window, soft_cap=inp.soft_cap, k_scale=inp.k_scale, v_scale=inp.v_scale)
    return check(inp, case, lambda s: out[inp.cu_list[s]:inp.cu_list[s + 1]]), tolerance(inp)


def visible_pairs(q_len, kv_len, window):
    """(row, key) pairs a causal sequence's rows see, counted on the mask itself."""
    pos = np.arange(kv_len - q_len, kv_len)[:, None]
    keys = np.arange(kv_len)[None, :]
    mask = keys <= pos
    if window:
        mask &= keys > pos - window
    return int(mask.sum())


@pytest.mark.parametrize("geometry", ["G1", "G4", "T2"])
def test_causal_flops_count_the_visible_pairs(geometry):
    rng = np.random.default_rng(SEED)
    hq, _, d, _, window = GEOMETRIES[geometry]
    for _ in range(20):
        kv = int(rng.integers(1, 3000))
        seqs = [(int(rng.integers(1, kv + 1)), kv), (1, int(rng.integers(1, 3000)))]
        case = Case("c", geometry, seqs)
        assert causal_flops(case) == 4 * hq * d * sum(visible_pairs(q, k, window) for q, k in seqs)


def test_bytes_min_reads_each_seen_key_once():
    """A decode row under a sliding window reads only the window's keys; a prefill sequence's rows
    together see all of its keys; fp8 KV moves 1 byte an element; q and the output are bf16."""
    hq, hkv, d, _, window = GEOMETRIES["G4"]
    case = Case("c", "G4", [(1, 8192), (1, 100), (300, 9000)])
    keys = window + 100 + 9000
    assert bytes_min(case) == 2 * keys * hkv * d * 2 + 302 * hq * d * 4
    hq, hkv, d, _, _ = GEOMETRIES["G1"]
    fp8 = Case("c", "G1", [(512, 2048)], kv_dtype="float8_e5m2")
    assert bytes_min(fp8) == 2 * 2048 * hkv * d * 1 + 512 * hq * d * 4


def test_the_prefill_and_short_suites_hold_their_cells():
    """The cells the prefill results and issue 48's targets name, fp8 ones marked in their names."""
    prefill, dropped = suite_cases("prefill", False, "G1", "float8_e4m3fn")
    assert not dropped
    seqs = {c.name: c.seqs for c in prefill}
    assert seqs["G1 prefill 1x8192 float8_e4m3fn"] == [(8192, 8192)]
    assert seqs["G1 chunked 8x512 over 4k float8_e4m3fn"] == [(512, 4096)] * 8
    assert all(c.kv_dtype == "float8_e4m3fn" for c in prefill) and len(prefill) == 7
    short, _ = suite_cases("short", False, "G1")
    assert [c.seqs for c in short] == [[(512, 2048)], [(256, 2048)] * 4, [(128, 2048)] * 16, [(32, 2048)] * 64]
    mixes = [c for c in prefill if c.kind == "mixed"]
    assert len(mixes) == 2 and all(q > 1 for c in mixes for q, _ in c.seqs[:4])


def test_logit_std_option_takes_a_finite_positive_number_or_flat():
    assert logit_std_arg("flat") is None and logit_std_arg("2") == 2.0 and logit_std_arg("0.25") == 0.25
    for bad in ("0", "-1", "inf", "nan", "two", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="finite number above 0, or flat"):
            logit_std_arg(bad)


@pytest.mark.parametrize("case", ["mix", "e4m3"])
@pytest.mark.parametrize("logit_std", [1.0, 2.0, 4.0])
def test_inputs_give_the_logit_spread_asked_for(case, logit_std):
    """The standard deviation of sm_scale * q.k (K scaled by k_scale) over many (row, head, key)
    triples is the one asked for, within 5 %."""
    inp = Inputs(CASES[case], seed=SEED, device="cpu", min_pool_bytes=0, logit_std=logit_std)
    k = inp.kv[:, :, 0::2, :].float().reshape(-1, inp.d)
    if inp.k_scale is not None:
        k = k * inp.k_scale
    g = torch.Generator().manual_seed(SEED)
    q = inp.q.float().reshape(-1, inp.d)
    qi = torch.randint(0, q.shape[0], (20000,), generator=g)
    ki = torch.randint(0, k.shape[0], (20000,), generator=g)
    logits = (q[qi] * k[ki]).sum(-1) * inp.sm_scale
    assert abs(logits.std().item() / logit_std - 1) < 0.05, f"XGK_TEST_SEED={SEED}"


@pytest.mark.parametrize("logit_std", [2.0, None])
@pytest.mark.parametrize("case", list(CASES))
def test_reference_matches_the_library_cpu_implementation(case, logit_std):
    """The benchmark's float32 reference (its own gather, mask, window, cap and scales) and the
    library's CPU implementation agree to bf16 output rounding: every row within a fifth of the
    gate's tolerance."""
    err, tol = errors(CASES[case], logit_std=logit_std)
    assert err.worst_row < tol / 5, (f"XGK_TEST_SEED={SEED}", err)
    assert err.rel_l2 <= err.worst_row


# Each fault on the cases it applies to: equal_weight_merge needs decode rows without a window,
# ignore_cap a soft cap, zero_second_half sequences of 512+ keys (all of these cases).
FAULT_CASES = [(fault, case) for fault in mutants.MUTANTS for case in ("mix", "window-cap", "e4m3")
               if not (fault == "equal_weight_merge" and case == "window-cap")
               and not (fault == "ignore_cap" and case != "window-cap")]


@pytest.mark.parametrize("fault,case", FAULT_CASES)
def test_gate_rejects_a_wrong_kernel(fault, case):
    """With the benchmark's default inputs (`LOGIT_STD`: logits of std 2), every deliberate fault
    leaves some sampled row past the tolerance, so `peers.py` reports the implementation wrong and
    does not time it."""
    err, tol = errors(CASES[case], fault)
    assert err.worst_row > tol, (f"XGK_TEST_SEED={SEED}", fault, case, err)
