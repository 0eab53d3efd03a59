"""Random ragged paged attention problems for the Python tests (numpy, framework-neutral)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

HEAD_DIMS = (64, 80, 96, 112, 128, 192, 256)
DTYPES = {
    "float32": np.float32,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
}
# |ours - reference| <= atol + rtol * |reference|; the reference rounds probabilities to q's dtype.
TOLERANCE = {"float32": (1e-4, 1e-4), "float16": (4e-3, 8e-3), "bfloat16": (2.5e-2, 2.5e-2)}


def make_case(rng: np.random.Generator, *, q_dtype="bfloat16", kv_dtype=None, head_dim=128, num_kv_heads=2, group=4,
              page_size=16, seqs=((1, 40), (5, 30)), pad=2, extra_seqs=1, **attrs):
    """Returns (args tuple of numpy arrays, attrs dict). `seqs` holds (q_len, kv_len) pairs."""
    kv_dtype = kv_dtype or q_dtype
    max_num_seqs = len(seqs) + extra_seqs
    max_kv = max(kv for _, kv in seqs)
    pages_per_seq = -(-max_kv // page_size) + 1
    used = sum(-(-kv // page_size) for _, kv in seqs)
    total_pages = used + 3
    pool = rng.permutation(total_pages)
    page_indices = np.zeros((max_num_seqs, pages_per_seq), np.int32)
    nxt = 0
    for i, (_, kv) in enumerate(seqs):
        n = -(-kv // page_size)
        page_indices[i, :n] = pool[nxt:nxt + n]
        nxt += n
    cu = np.zeros(max_num_seqs + 1, np.int32)
    cu[1:len(seqs) + 1] = np.cumsum([q for q, _ in seqs])
    cu[len(seqs) + 1:] = cu[len(seqs)]
    kv_lens = np.zeros(max_num_seqs, np.int32)
    kv_lens[:len(seqs)] = [kv for _, kv in seqs]
    tokens = int(cu[-1]) + pad
    q = rng.uniform(-1, 1, (tokens, num_kv_heads * group, head_dim)).astype(DTYPES[q_dtype])
    kv = rng.uniform(-1, 1, (total_pages, page_size, 2 * num_kv_heads, head_dim))
    if kv_dtype.startswith("float8"):
        kv = kv * 4
        attrs.setdefault("k_scale", 0.5)
        attrs.setdefault("v_scale", 0.75)
    kv = kv.astype(DTYPES[kv_dtype])
    attrs.setdefault("sm_scale", float(head_dim) ** -0.5)
    args = (q, kv, kv_lens, page_indices, cu, np.array([len(seqs)], np.int32))
    return args, attrs


def random_seqs(rng: np.random.Generator, max_kv=200):
    seqs = []
    for _ in range(rng.integers(1, 5)):
        kv = int(rng.integers(1, max_kv))
        kind = rng.integers(0, 3)
        q = 1 if kind == 0 else kv if kind == 1 else int(rng.integers(1, kv + 1))
        seqs.append((min(q, 48), kv))
    return tuple(seqs)


def random_cases(seed: int, count: int):
    """`count` cases cycling through every dtype pair, head dim, page size, head layout and feature."""
    rng = np.random.default_rng(seed)
    dtype_pairs = [("float32", None), ("float16", None), ("bfloat16", None), ("bfloat16", "float8_e4m3fn"),
                   ("float16", "float8_e5m2"), ("float32", "float8_e4m3fn"), ("bfloat16", "float8_e5m2")]
    page_sizes = (1, 3, 8, 16, 32, 64, 128, 256)
    heads = ((1, 1), (2, 4), (1, 8), (4, 1), (2, 2))
    cases = []
    for i in range(count):
        q_dtype, kv_dtype = dtype_pairs[i % len(dtype_pairs)]
        kvh, group = heads[i % len(heads)]
        attrs = {}
        feature = i % 6
        if feature == 1:
            attrs["sliding_window"] = int(rng.integers(1, 64))
        elif feature == 2:
            attrs["soft_cap"] = float(rng.uniform(5, 50))
            attrs["sm_scale"] = 0.3
        elif feature == 3:
            attrs["mask_value"] = -2.5
        elif feature == 4:
            attrs["sliding_window"] = int(rng.integers(1, 32))
            attrs["soft_cap"] = 30.0
        elif feature == 5 and kv_dtype is None:
            attrs["k_scale"], attrs["v_scale"] = 0.5, 1.5
        case = make_case(rng, q_dtype=q_dtype, kv_dtype=kv_dtype, head_dim=HEAD_DIMS[i % len(HEAD_DIMS)],
                         num_kv_heads=kvh, group=group, page_size=page_sizes[i % len(page_sizes)],
                         seqs=random_seqs(rng), pad=int(rng.integers(0, 4)), extra_seqs=int(rng.integers(0, 3)),
                         **attrs)
        cases.append((f"case{i}-{q_dtype}-{kv_dtype or q_dtype}-d{HEAD_DIMS[i % len(HEAD_DIMS)]}", case))
    return cases


def check_close(ours, ref, cu, num_seqs, q_dtype, label=""):
    """Valid rows within tolerance, padding rows exactly zero; returns the worst abs error."""
    n = int(cu[int(num_seqs[0])])
    ours = np.asarray(ours, np.float32)
    ref = np.asarray(ref, np.float32)
    assert np.isfinite(ours).all(), f"{label}: non-finite output"
    assert (ours[n:] == 0).all(), f"{label}: padding rows not zero"
    atol, rtol = TOLERANCE[str(q_dtype)]
    err = np.abs(ours[:n] - ref[:n])
    bad = err > atol + rtol * np.abs(ref[:n])
    assert not bad.any(), f"{label}: {bad.sum()} elements off, worst {err.max()}"
    return float(err.max()) if err.size else 0.0
