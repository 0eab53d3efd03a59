"""The benchmark matrix of `peers.py` (shared/reference/benchmarks.md): geometries, cases and
suites, and each case's fewest bytes and causal FLOPs. No GPU, torch or library needed."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

GEOMETRIES = {  # q heads, kv heads, head dim, soft cap, sliding window
    "G1": (32, 8, 128, None, None),
    "G2": (64, 8, 128, None, None),
    "G3": (32, 32, 128, None, None),
    "G4": (16, 8, 256, 50.0, 4096),
    "G5": (32, 8, 64, None, None),     # head_dim 64
    "G6": (16, 8, 256, None, None),    # head_dim 256, no window or cap
}
MAX_KV_BYTES = 20 << 30  # cells whose fewest bytes exceed this are dropped from a suite


@dataclass
class Case:
    name: str
    geometry: str
    seqs: list  # (q_len, kv_len), prefill rows first in mixed batches
    page: int = 16
    kv_dtype: str = "bfloat16"
    results: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    @property
    def kind(self):
        decode = [q == 1 for q, _ in self.seqs]
        return "decode" if all(decode) else "prefill" if not any(decode) else "mixed"

    @property
    def decode(self):
        return self.kind == "decode"


def kv_elem_bytes(case):
    return 1 if case.kv_dtype.startswith("float8") else 2


def visible_keys(q_len, kv_len, window):
    """Keys the rows of one sequence see in total: row r at position p = kv_len - q_len + r sees
    keys max(0, p - window + 1) ..= p."""
    pos = np.arange(kv_len - q_len, kv_len, dtype=np.int64)
    return int(np.minimum(pos + 1, window).sum()) if window else int((pos + 1).sum())


def bytes_min(case):
    """Fewest bytes a call must move: each key some row sees, K and V once (a sliding window bounds
    a decode row's keys), q read and the output written once."""
    hq, hkv, d, _, window = GEOMETRIES[case.geometry]
    keys = [min(kv_len, window) if (window and q == 1) else kv_len for q, kv_len in case.seqs]
    kv = sum(2 * n * hkv * d * kv_elem_bytes(case) for n in keys)
    tokens = sum(q for q, _ in case.seqs)
    return kv + tokens * hq * d * 4  # bf16 q and output


def causal_flops(case):
    """4·q_heads·dim per visible (row, key) pair; without a window Σ_i q_i·kv_i − q_i(q_i−1)/2."""
    hq, _, d, _, window = GEOMETRIES[case.geometry]
    return 4 * hq * d * sum(visible_keys(q, kv, window) for q, kv in case.seqs)


def decode_cell(spec, geometry):
    """A decode cell from `BxCTX[:KV_DTYPE]` (`--cells`): B rows of CTX keys each."""
    shape, _, kv_dtype = spec.partition(":")
    b, ctx = (int(x) for x in shape.split("x"))
    kv_dtype = kv_dtype or "bfloat16"
    suffix = "" if kv_dtype == "bfloat16" else f" {kv_dtype}"
    return Case(f"{geometry} decode {b}x{ctx}{suffix}", geometry, [(1, ctx)] * b, kv_dtype=kv_dtype)


def _mixes():
    """The prefill suite's engine-step mixes (name, seqs): prefill rows first, then decode rows."""
    rng = np.random.default_rng(2)
    mix16 = [(128, int(x)) for x in rng.integers(2048, 8192 + 1, 16)] + \
            [(1, int(x)) for x in rng.integers(2048, 8192 + 1, 240)]
    return (("mix 4q256s2k + 124 decode s1k-4k", [(256, 2048)] * 4 + [(1, 1024 + 24 * i) for i in range(124)]),
            ("mix 16q128 + 240 decode s2k-8k", mix16))


MIXES = _mixes()


def suite_cases(suite, quick, geometry, kv_dtype="bfloat16"):
    """The benchmark matrix (shared/reference/benchmarks.md); cells over MAX_KV_BYTES are dropped.
    `kv_dtype` applies to the prefill, short and mixes suites (named in each cell)."""
    cases, dropped = [], []
    kvd = "" if kv_dtype == "bfloat16" else f" {kv_dtype}"
    if suite in ("decode", "all"):
        batches = (1, 16, 64) if quick else (1, 4, 16, 64, 256)
        contexts = (2048, 32768) if quick else (512, 2048, 8192, 32768)
        for b in batches:
            for ctx in contexts:
                cases.append(Case(f"{geometry} decode {b}x{ctx}", geometry, [(1, ctx)] * b))
        if not quick:
            for b, ctx in ((32, 4096), (128, 2048)):  # the cells
                cases.append(Case(f"{geometry} decode {b}x{ctx}", geometry, [(1, ctx)] * b))
    if suite in ("uneven", "all"):
        rng = np.random.default_rng(0)
        lens = rng.integers(256, 16384 + 1, 64)
        cases.append(Case(f"{geometry} uneven uniform[256,16k] B64", geometry, [(1, int(x)) for x in lens]))
        rng = np.random.default_rng(1)
        # Zipf (a = 1.2) over [64, 32k]: 64 * numpy zipf draws, clipped to [64, 32768].
        z = np.clip(64 * rng.zipf(1.2, 64), 64, 32768)
        cases.append(Case(f"{geometry} uneven zipf[64,32k] B64", geometry, [(1, int(x)) for x in z]))
    if suite in ("pages", "all"):
        for page in (1, 8, 16, 32, 64, 128, 256):
            for b, ctx in ((32, 4096), (1, 32768)):
                cases.append(Case(f"{geometry} decode {b}x{ctx} page{page}", geometry, [(1, ctx)] * b, page=page))
    if suite in ("features", "all"):
        for g in ("G2", "G3", "G4"):
            for b, ctx in ((32, 4096), (64, 8192)):
                cases.append(Case(f"{g} decode {b}x{ctx}", g, [(1, ctx)] * b))
        for b, ctx in ((32, 4096), (64, 8192), (1, 32768)):
            for kvd in ("float8_e4m3fn",):
                cases.append(Case(f"{geometry} decode {b}x{ctx} {kvd}", geometry, [(1, ctx)] * b, kv_dtype=kvd))
                cases.append(Case(f"{geometry} decode {b}x{ctx} bf16 (fp8 control)", geometry, [(1, ctx)] * b))
    if suite in ("prefill", "all"):
        (mix4_name, mix4), (mix16_name, mix16) = MIXES
        prefill = [("prefill 1x2048", [(2048, 2048)]), ("prefill 4x1024", [(1024, 1024)] * 4),
                   ("prefill 1x8192", [(8192, 8192)]), ("prefill 1x32768", [(32768, 32768)]),
                   ("chunked 8x512 over 4k", [(512, 4096)] * 8),
                   (mix4_name, mix4), (mix16_name, mix16)]
        if quick:
            prefill = [prefill[0], prefill[4], prefill[5]]
        cases += [Case(f"{geometry} {name}{kvd}", geometry, seqs, kv_dtype=kv_dtype) for name, seqs in prefill]
    if suite in ("short", "all"):
        # Short prefills: the chunk tails of a serving step, over 2k contexts.
        short = [("short 1x512 over 2k", [(512, 2048)]), ("short 4x256 over 2k", [(256, 2048)] * 4),
                 ("short 16x128 over 2k", [(128, 2048)] * 16), ("short 64x32 over 2k", [(32, 2048)] * 64)]
        cases += [Case(f"{geometry} {name}{kvd}", geometry, seqs, kv_dtype=kv_dtype) for name, seqs in short]
    if suite == "mixes":
        # Engine steps: the prefill suite's two mixes and two short ones, where a call's host
        # cost and launches weigh most (a mix in one launch against two, `XGK_RPA_DECODE_APART`).
        cases += [Case(f"{geometry} {name}{kvd}", geometry, seqs, kv_dtype=kv_dtype) for name, seqs in MIXES]
        cases.append(Case(f"{geometry} mix 1q64 + 63 decode s512{kvd}", geometry, [(64, 512)] + [(1, 512)] * 63,
                          kv_dtype=kv_dtype))
        cases.append(Case(f"{geometry} mix 2q128 + 126 decode s256-2k{kvd}", geometry,
                          [(128, 1024)] * 2 + [(1, 256 + 14 * i) for i in range(126)], kv_dtype=kv_dtype))
    if suite == "mixparts":
        # The mixes' prefill and decode rows apart: where a mix's time goes, kernel by kernel.
        for name, seqs in MIXES:
            name = name.split(" + ")[0]
            cases.append(Case(f"{geometry} {name} prefill rows", geometry, [s for s in seqs if s[0] > 1]))
            cases.append(Case(f"{geometry} {name} decode rows", geometry, [s for s in seqs if s[0] == 1]))
    for c in cases:
        if bytes_min(c) > MAX_KV_BYTES:
            dropped.append(c.name)
    return [c for c in cases if c.name not in dropped], dropped

