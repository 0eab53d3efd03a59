"""The inputs every implementation of `peers.py` gets, and the check each must pass before it is
timed: a float32 reference of sampled rows; each row's relative L2 error must stay within
`tolerance`."""

from __future__ import annotations

import argparse
import math
from typing import NamedTuple

import torch

from peers_cases import GEOMETRIES, kv_elem_bytes

MIN_POOL_BYTES = 512 << 20  # far above L2: a call's KV is not left in L2 by the previous one
# q's scale: the logits' standard deviation. At 2 a row's softmax weighs some keys far above others,
# as a trained model's does; a faulty scale, soft cap, merge or key range then moves the outputs
# well past the tolerance (tests/python/test_peers_harness.py). None: q uniform in [-1, 1], logits
# of std 1/3 (2/3 with fp8 KV), a nearly flat softmax under which a 5 % scale error passed (the
# inputs of results recorded before commit c03b04e).
LOGIT_STD = 2.0
CHECK_SEQS, CHECK_ROWS = 4, 256  # reference: sampled sequences a case, rows a sequence
LOGIT_STD_HELP = ("q's scale: the logits' standard deviation (default %(default)s), or `flat` for q uniform in "
                  "[-1, 1] (logits of std 1/3, 2/3 with fp8 KV: the inputs of results recorded before commit c03b04e)")


def logit_std_arg(text: str) -> float | None:
    """`--logit-std`'s value (an argparse `type`): a finite number above 0, or None for `flat`."""
    if text == "flat":
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r}: a finite number above 0, or flat")
    return value


class Inputs:
    """One case's tensors in our layout on `device`; the peers derive their layouts from these.
    The KV pool holds at least `min_pool_bytes`, its pages handed out in random order. K and V are
    uniform random (fp8: stored x4, scaled back by k_scale 0.5 and v_scale 0.75); q is uniform
    random with a range that gives the logits (q.k times sm_scale) a standard deviation of
    `logit_std`, or uniform in [-1, 1] when it is None (the flat inputs, see `LOGIT_STD`)."""

    def __init__(self, case, seed, device="cuda", min_pool_bytes=MIN_POOL_BYTES, logit_std=LOGIT_STD):
        hq, hkv, d, soft_cap, window = GEOMETRIES[case.geometry]
        self.hq, self.hkv, self.d, self.soft_cap, self.window = hq, hkv, d, soft_cap, window
        g = torch.Generator(device=device).manual_seed(seed)
        page = self.page = case.page
        self.pages_per_seq = max(-(-kv // page) for _, kv in case.seqs)
        used = sum(-(-kv // page) for _, kv in case.seqs)
        token_bytes = 2 * hkv * d * kv_elem_bytes(case)
        self.total_pages = max(used, -(-min_pool_bytes // (token_bytes * page)))  # extra random pages
        kv = torch.empty((self.total_pages, page, 2 * hkv, d), dtype=torch.bfloat16, device=device)
        kv.uniform_(-1, 1, generator=g)
        self.kv_dtype = getattr(torch, case.kv_dtype)
        self.kv = kv if self.kv_dtype == torch.bfloat16 else (kv * 4).to(self.kv_dtype)
        del kv
        self.k_scale = self.v_scale = None
        if self.kv_dtype != torch.bfloat16:
            self.k_scale, self.v_scale = 0.5, 0.75
        perm = torch.randperm(self.total_pages, generator=torch.Generator().manual_seed(seed))
        num = len(case.seqs)
        table = torch.zeros((num, self.pages_per_seq), dtype=torch.int32)
        nxt, self.seq_pages = 0, []
        for i, (_, kv_len) in enumerate(case.seqs):
            n = -(-kv_len // page)
            table[i, :n] = perm[nxt:nxt + n]
            self.seq_pages.append(perm[nxt:nxt + n].clone())
            nxt += n
        self.page_indices = table.to(device)
        self.kv_lens = torch.tensor([kv for _, kv in case.seqs], dtype=torch.int32, device=device)
        cu = [0]
        for q, _ in case.seqs:
            cu.append(cu[-1] + q)
        self.cu_list = cu
        self.cu_q_lens = torch.tensor(cu, dtype=torch.int32, device=device)
        self.num_seqs = torch.tensor([num], dtype=torch.int32, device=device)
        self.tokens = cu[-1]
        # K's elements are uniform in [-gk, gk] (variance gk^2 / 3), q's in [-a, a]; a logit's
        # variance is then d * (a^2 / 3) * (gk^2 / 3) * sm_scale^2 = (a * gk / 3)^2.
        gk = 1.0 if self.k_scale is None else 4 * self.k_scale
        a = 1.0 if logit_std is None else 3 * logit_std / gk
        self.q = torch.empty((self.tokens, hq, d), dtype=torch.bfloat16, device=device).uniform_(-a, a, generator=g)
        self.sm_scale = d ** -0.5


def check_rows(q_len, seed):
    """Rows of a sequence the check compares: all, or the first, the last and random others."""
    if q_len <= CHECK_ROWS:
        return torch.arange(q_len)
    pick = torch.randperm(q_len - 2, generator=torch.Generator().manual_seed(seed))[:CHECK_ROWS - 2] + 1
    return torch.cat([torch.tensor([0, q_len - 1]), pick]).sort().values


def reference(inp, case, seq, rows):
    """float32 attention of the given rows of one sequence: [len(rows), hq, d]."""
    q_len, kv_len = case.seqs[seq]
    dev = inp.q.device
    kv = inp.kv[inp.seq_pages[seq].to(dev).long()]  # [pages, page, 2*hkv, d]
    k = kv[:, :, 0::2, :].float().reshape(-1, inp.hkv, inp.d)[:kv_len]
    v = kv[:, :, 1::2, :].float().reshape(-1, inp.hkv, inp.d)[:kv_len]
    if inp.k_scale is not None:  # the contract: scaled K/V rounded to q's dtype
        k = (k * inp.k_scale).to(inp.q.dtype).float()
        v = (v * inp.v_scale).to(inp.q.dtype).float()
    rows = rows.to(dev)
    group = inp.hq // inp.hkv
    q = inp.q[inp.cu_list[seq] + rows].float().view(-1, inp.hkv, group, inp.d)
    out = torch.empty_like(q)
    j = torch.arange(kv_len, device=dev)
    step = max(1, (256 << 20) // (4 * inp.hq * kv_len))  # rows per chunk: logits <= 256 MiB
    for a in range(0, len(rows), step):
        logits = torch.einsum("rkgd,jkd->kgrj", q[a:a + step], k) * inp.sm_scale
        if inp.soft_cap:
            logits = inp.soft_cap * torch.tanh(logits / inp.soft_cap)
        pos = (kv_len - q_len + rows[a:a + step])[:, None]
        mask = j[None, :] <= pos
        if inp.window:
            mask &= j[None, :] > pos - inp.window
        logits = logits.masked_fill(~mask, float("-inf"))
        out[a:a + step] = torch.einsum("kgrj,jkd->rkgd", torch.softmax(logits, dim=-1), v)
    return out.view(-1, inp.hq, inp.d)


class Errors(NamedTuple):
    """How far an implementation's sampled rows are from the reference (worst over the sequences)."""
    rel_l2: float      # relative L2 error of a sequence's sampled rows together
    worst_row: float   # relative L2 error of the worst single row (all its heads): what the gate uses
    max_abs: float     # largest absolute error of one element


def check(inp, case, out_rows_fn):
    """`Errors` over up to CHECK_SEQS sampled sequences (in mixed batches the first and last
    prefill and decode sequences); out_rows_fn(seq) -> [q_len, hq, d]. The worst row is the
    measure: a fault confined to a few rows (a tile edge, the diagonal, one split) stays
    above the tolerance there, where the rows' error together dilutes it over up to 256 rows."""
    n = len(case.seqs)
    pre = [i for i, (q, _) in enumerate(case.seqs) if q > 1]
    dec = [i for i, (q, _) in enumerate(case.seqs) if q == 1]
    picks = {pre[0], pre[-1], dec[0], dec[-1]} if pre and dec else {0, n - 1, n // 2, n // 3}
    rel = row = mabs = 0.0
    for s in sorted(picks)[:CHECK_SEQS]:
        rows = check_rows(case.seqs[s][0], seed=s)
        ref = reference(inp, case, s, rows)
        got = out_rows_fn(s)[rows.to(ref.device)].float().to(ref.device)
        if not torch.isfinite(got).all():
            return Errors(float("inf"), float("inf"), float("inf"))
        rel = max(rel, ((got - ref).norm() / ref.norm().clamp_min(1e-12)).item())
        per_row = (got - ref).flatten(1).norm(dim=1) / ref.flatten(1).norm(dim=1).clamp_min(1e-12)
        row = max(row, per_row.max().item())
        mabs = max(mabs, (got - ref).abs().max().item())
    return Errors(rel, row, mabs)


def tolerance(inp):
    """The largest relative L2 error of a row `check`'s caller lets pass: about ten times a correct
    kernel's (bf16 outputs and P round at 2^-9 relative); fp8 KV's widened operands add theirs."""
    return 3e-2 if inp.kv.dtype != torch.bfloat16 else 2e-2
