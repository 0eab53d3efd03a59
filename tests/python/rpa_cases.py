"""Random ragged paged attention problems for the Python tests (numpy, framework-neutral)."""

from __future__ import annotations

import os

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
# Row tolerance per q dtype, (rtol, floor): a row (one token and q head, head_dim elements) passes
# when max|ours - ref| <= (rtol * max|ref| + floor) * scale. The kernels and references round the
# softmax probabilities (2^-9 relative in bf16, 2^-11 in f16) and the outputs (half an ulp) to q's
# dtype; on an H100 every row agreed with an f32 reference to 0.7 % (bf16), 0.07 % (f16), 3e-6
# (f32) of its largest element, at up to 128k keys with peaky logits and caps that bite (issue 50).
# The bounds are ~3x that (f32: also sequential f32 sums over long rows). The floor serves rows
# whose reference is all zero. `scale` (tolerance_scale) widens it for scaled KV, where the
# references round K * k_scale and V * v_scale to q's dtype and the kernels do not. Before issue 50
# this was per element, atol + rtol * |ref| with atol 2.5e-2 (bf16): larger than the outputs of
# long rows, so a zeroed row passed.
ROW_TOLERANCE = {"float32": (1e-4, 1e-7), "float16": (3e-3, 3e-6), "bfloat16": (2e-2, 2e-5)}


def case_seed(default=None) -> int:
    """The seed of a module's random cases: XGK_TEST_SEED when set (replays a failure), else fresh;
    printed, and put in every case's test id by random_cases."""
    env = os.environ.get("XGK_TEST_SEED")
    seed = int(env) if env else (default if default is not None else int(np.random.SeedSequence().entropy % 2**32))
    print(f"random inputs from XGK_TEST_SEED={seed}")
    return seed


def logit_spread(args, attrs) -> float:
    """Standard deviation of sm_scale * q.k over random (row, key) pairs: sqrt(d) rms(q) rms(K * k_scale)
    sm_scale (q and K elements independent)."""
    q, kv = args[0], args[1]
    qr = float(np.sqrt(np.mean(np.square(q.astype(np.float64)))))
    k = kv[..., 0::2, :].reshape(-1)[: 1 << 16].astype(np.float64)
    kr = float(np.sqrt(np.mean(np.square(k)))) * float(attrs.get("k_scale") or 1.0)
    return float(np.sqrt(q.shape[-1]) * qr * kr * attrs.get("sm_scale", 1.0))


def make_peaky(args, attrs, spread):
    """q scaled (in its dtype) so that logit_spread is `spread` (2-4: attention on a few keys)."""
    q = args[0]
    factor = spread / max(logit_spread(args, attrs), 1e-12)
    q = (q.astype(np.float64) * factor).astype(q.dtype)
    return (q,) + tuple(args[1:])


def biting_cap(args, attrs, rng) -> float:
    """A soft cap 1-3x the logit spread: it moves the largest logits (a cap of 5-50 at spread 0.33
    never did)."""
    return float(logit_spread(args, attrs) * rng.uniform(1, 3))


def tolerance_scale(args, attrs) -> float:
    """How much wider the row tolerance is for a case (tests/common/mod.rs `value_scale`): 1 without
    scales; with them, the largest scaled V over 4 (the fp8 tests' V range), k_scale above 1, and the
    logit spread over 1.5 (the references' rounding of K * k_scale moves logits by |logit| * eps)."""
    if attrs.get("v_scale") is None and attrs.get("k_scale") is None:
        return 1.0
    v = np.abs(args[1][..., 1::2, :].astype(np.float64)).max() * float(attrs.get("v_scale") or 1.0)
    k_scale = float(attrs.get("k_scale") or 1.0)
    # A power-of-two k_scale (the default 0.5) scales the keys exactly: no rounding, no widening.
    k_exact = np.frexp(np.float32(k_scale))[0] == 0.5
    peaky = 1.0 if k_exact else max(1.0, logit_spread(args, attrs) / 1.5)
    return max(1.0, v / 4) * max(1.0, k_scale) * peaky


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


def random_seqs(rng: np.random.Generator, max_kv=200, long_kv=0):
    """1-4 sequences of up to `max_kv` keys, the first with `long_kv` keys when given (a decode row
    long enough for key splits and their merge)."""
    seqs = [(1, long_kv)] if long_kv else []
    for _ in range(rng.integers(1, 5) - bool(long_kv)):
        kv = int(rng.integers(1, max_kv))
        kind = rng.integers(0, 3)
        q = 1 if kind == 0 else kv if kind == 1 else int(rng.integers(1, kv + 1))
        seqs.append((min(q, 48), kv))
    return tuple(seqs)


def random_cases(seed: int, count: int, long_every=4):
    """`count` cases cycling through every dtype pair, head dim, page size, head layout and feature;
    odd cases peaky (logit spread 2-4), even ones smooth (q, K in U(-1, 1): spread ~0.33); soft caps
    1-3x the case's spread; windows shorter and longer than 256 keys; every `long_every`-th case
    with a 600-1500-key decode row. Labels (test ids) name the seed."""
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
            attrs["sliding_window"] = int(rng.integers(1, 64) if rng.integers(0, 2) else rng.integers(300, 1200))
        elif feature == 2:
            attrs["sm_scale"] = 0.3
        elif feature == 3:
            attrs["mask_value"] = -2.5
        elif feature == 4:
            attrs["sliding_window"] = int(rng.integers(1, 32))
        elif feature == 5 and kv_dtype is None:
            attrs["k_scale"], attrs["v_scale"] = 0.5, 1.5
        long_kv = int(rng.integers(600, 1500)) if i % long_every == long_every - 1 else 0
        head_dim = HEAD_DIMS[i % len(HEAD_DIMS)]
        args, attrs = make_case(rng, q_dtype=q_dtype, kv_dtype=kv_dtype, head_dim=head_dim,
                                num_kv_heads=kvh, group=group, page_size=page_sizes[i % len(page_sizes)],
                                seqs=random_seqs(rng, long_kv=long_kv), pad=int(rng.integers(0, 4)),
                                extra_seqs=int(rng.integers(0, 3)), **attrs)
        kind = "peaky" if i % 2 else "smooth"
        if i % 2:
            args = make_peaky(args, attrs, rng.uniform(2, 4))
        if feature in (2, 4):
            attrs["soft_cap"] = biting_cap(args, attrs, rng)
        cases.append((f"seed{seed}-case{i}-{q_dtype}-{kv_dtype or q_dtype}-d{head_dim}-{kind}", (args, attrs)))
    return cases


def row_errors(ours, ref, rows, q_dtype, scale=1.0):
    """(worst row-relative error, worst error over its bound, index of that row) over `rows` rows."""
    rtol, floor = ROW_TOLERANCE[str(q_dtype)]
    ours = np.asarray(ours, np.float64)[:rows].reshape(rows, -1, ours.shape[-1])
    ref = np.asarray(ref, np.float64)[:rows].reshape(rows, -1, ours.shape[-1])
    err = np.abs(ours - ref).max(axis=-1)
    big = np.abs(ref).max(axis=-1)
    bound = (rtol * big + floor) * scale
    ratio = err / bound
    rel = np.where(big > 0, err / np.where(big > 0, big, 1), 0)
    worst = np.unravel_index(np.argmax(ratio), ratio.shape) if ratio.size else (0, 0)
    return (float(rel.max()) if rel.size else 0.0, float(ratio.max()) if ratio.size else 0.0, worst,
            err, big, bound)


def check_close(ours, ref, cu, num_seqs, q_dtype, label="", scale=1.0):
    """Valid rows within the row tolerance (ROW_TOLERANCE times `scale`), padding rows exactly
    zero; returns the worst row-relative error max|ours - ref| / max|ref| (printed)."""
    n = int(np.asarray(cu)[int(np.asarray(num_seqs)[0])])
    ours = np.asarray(ours, np.float32)
    ref = np.asarray(ref, np.float32)
    assert np.isfinite(ours).all(), f"{label}: non-finite output"
    assert (ours[n:] == 0).all(), f"{label}: padding rows not zero"
    rel, ratio, (t, h), err, big, bound = row_errors(ours, ref, n, q_dtype, scale)
    assert ratio <= 1, (f"{label}: {(err > bound).sum()} rows off; worst token {t} head {h}: max|ours - ref| "
                        f"{err[t, h]:.3e}, row max {big[t, h]:.3e} ({err[t, h] / max(big[t, h], 1e-300):.3e} relative), "
                        f"bound {bound[t, h]:.3e}")
    print(f"{label}: worst row-relative error {rel:.3e}")
    return rel


def check_case(ours, ref, case, label=""):
    """check_close for a (args, attrs) case, its tolerance scaled by tolerance_scale."""
    args, attrs = case
    return check_close(ours, ref, args[4], args[5], args[0].dtype, label, tolerance_scale(args, attrs))


def dense_reference(args, attrs, rows=None):
    """The contract in float64, written for the tests from its text (no library code): for each
    valid row t of sequence s, keys j < kv_len read through the page table (page
    page_indices[s, j // page_size], slot j % page_size; K = kv[..., 0::2, :], V = kv[..., 1::2, :]),
    scaled K and V rounded to q's dtype, logits = q.k * sm_scale, soft cap, mask_value added where
    j > p (p = kv_len - q_len + r) or j <= p - sliding_window, softmax, P.V. `rows` (token indices)
    limits it to some rows (long contexts); returns {token: [heads, head_dim] float64}."""
    q, kv, kv_lens, pages, cu, num_seqs = args
    sm_scale = float(attrs.get("sm_scale", 1.0))
    cap, window = attrs.get("soft_cap"), attrs.get("sliding_window")
    mask_value = attrs.get("mask_value")
    mask_value = -0.7 * float(np.finfo(np.float32).max) if mask_value is None else float(mask_value)
    page_size, nkv = kv.shape[1], kv.shape[2] // 2
    group = q.shape[1] // nkv
    out = {}
    for s in range(int(num_seqs[0])):
        t0, t1, kv_len = int(cu[s]), int(cu[s + 1]), int(kv_lens[s])
        want = [t for t in range(t0, t1) if rows is None or t in rows]
        if not want:
            continue
        j = np.arange(kv_len)
        slots = pages[s, j // page_size].astype(np.int64) * page_size + j % page_size
        flat = kv.reshape(-1, 2 * nkv, kv.shape[3])
        k, v = flat[slots, 0::2, :], flat[slots, 1::2, :]  # [kv_len, nkv, d]

        def scaled(x, name):  # widened to f32, times the scale, used as q's dtype (the contract)
            if attrs.get(name) is None:
                return x.astype(np.float64)
            return (x.astype(np.float32) * np.float32(attrs[name])).astype(q.dtype).astype(np.float64)

        k, v = scaled(k, "k_scale"), scaled(v, "v_scale")
        for t in want:
            p = kv_len - (t1 - t0) + (t - t0)
            masked = j > p
            if window is not None:
                masked |= j <= p - int(window)
            rowq = q[t].astype(np.float64).reshape(nkv, group, -1)
            logits = np.einsum("ngd,jnd->ngj", rowq, k) * sm_scale
            if cap is not None:
                logits = cap * np.tanh(logits / cap)
            logits = logits + np.where(masked, mask_value, 0.0)
            w = np.exp(logits - logits.max(axis=-1, keepdims=True))
            o = np.einsum("ngj,jnd->ngd", w, v) / w.sum(axis=-1)[..., None]
            out[t] = o.reshape(q.shape[1], -1)
    return out


def dense_reference_array(args, attrs):
    """dense_reference over every valid row, as a [tokens, heads, head_dim] array (padding zeros)."""
    q = args[0]
    out = np.zeros(q.shape, np.float64)
    for t, o in dense_reference(args, attrs).items():
        out[t] = o
    return out
