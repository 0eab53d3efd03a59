#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/): valid calls and near-valid
ones, encoded as the targets decode their input (fuzz/src/lib.rs, the targets' module docs).

    python3 fuzz/gen_corpus.py     # rewrites fuzz/corpus/{ffi_call_frame,legacy_opaque,capi_descriptors}
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "corpus"

# XLA_FFI_DataType codes.
PRED, S32, S64, U8, F16, F32, F64, BF16, F8E5M2, F8E4M3FN, C64 = 1, 4, 5, 6, 10, 11, 12, 16, 19, 20, 15
# Byte codes of dims the one-byte form cannot hold (fuzz/src/lib.rs SPECIAL_DIMS).
SPECIAL = {-1: 0xE0, -(2**63): 0xE1, 2**63 - 1: 0xE2, 2**31: 0xE3, 2**31 - 1: 0xE4, 2**32: 0xE5,
           2**32 - 1: 0xE6, 256: 0xE7, 512: 0xE8, 1024: 0xE9, 4096: 0xEA, 2**16: 0xEB, 2**40: 0xEC,
           2**62: 0xED, -(2**31): 0xEE, 2**32 + 1: 0xEF}
# Fill modes of a buffer's data (fuzz/src/lib.rs fill): zeros, from the data stream, small ints, 0x3C.
ZEROS, STREAM, SMALL_INTS, ONES = 0, 1, 2, 3


def dim(d: int) -> bytes:
    if 0 <= d < 0xE0:
        return bytes([d])
    if d in SPECIAL:
        return bytes([SPECIAL[d]])
    return bytes([0xF0]) + struct.pack("<q", d)


def dtype(code: int) -> bytes:
    return bytes([code]) if 0 <= code < 32 else bytes([0xE0]) + struct.pack("<i", code)


def i32s(*v: int) -> bytes:
    return struct.pack(f"<{len(v)}i", *v)


# --- ffi_call_frame ---------------------------------------------------------------------------

SIMPLE_ADD, PAGED_ATTENTION, BOTH = 0, 1, 2
NAMES = ["sm_scale", "sliding_window", "soft_cap", "mask_value", "k_scale", "v_scale", "alpha", "", "sm_scal",
         "SM_SCALE"]


def entry(code: int, dims, fill: int = ZEROS, data: str = "backed", entry_flags: int = 0) -> bytes:
    """A buffer entry: [flags, dtype, rank, dims..., data mode]."""
    mode = {"backed": 0, "null": 1, "misaligned": 2}[data] | (fill << 2)
    return bytes([entry_flags]) + dtype(code) + bytes([len(dims) & 0xFF]) + b"".join(map(dim, dims)) + bytes([mode])


def scalar(name: str, code: int, value: bytes) -> bytes:
    return bytes([NAMES.index(name), 0]) + dtype(code) + value.ljust(8, b"\0")


def f64(name, v):
    return scalar(name, F64, struct.pack("<d", v))


def f32(name, v):
    return scalar(name, F32, struct.pack("<f", v))


def s64(name, v):
    return scalar(name, S64, struct.pack("<q", v))


def frame(handler: int, args, rets, attrs=(), stream: bytes = b"", flags: int = 0, extra: bytes = b"") -> bytes:
    head = bytes([handler, flags, len(args), len(rets), len(attrs)]) + extra  # extra: the stage byte
    return head + b"".join(args) + b"".join(rets) + b"".join(attrs) + stream


def pa_frame(q_dtype=BF16, kv_dtype=BF16, head_dim=64, attrs=(), ws=(U8, [0]), q_rows=4, meta=True):
    """A small valid ragged batch: 2 sequences (q_len 3 / kv_len 5, q_len 1 / kv_len 3), 4 pages of 4."""
    q = [q_rows, 2, head_dim]
    kv = [4, 4, 2, head_dim]
    args = [entry(q_dtype, q, ONES), entry(kv_dtype, kv, ONES), entry(S32, [2], STREAM), entry(S32, [2, 2], STREAM),
            entry(S32, [3], STREAM), entry(S32, [1], STREAM)]
    rets = [entry(q_dtype, q), entry(ws[0], ws[1])]
    stream = i32s(5, 3) + i32s(0, 1, 2, 3) + i32s(0, 3, 4) + i32s(2) if meta else b""
    return frame(PAGED_ATTENTION, args, rets, attrs, stream)


def f32_bytes(*v):
    return struct.pack(f"<{len(v)}f", *v)


def ffi_call_frame():
    a, b = f32_bytes(1.0, -2.5, 3.25, 1e30), f32_bytes(0.5, 2.5, float("nan"), 1e30)
    add = lambda code, dims, **kw: frame(SIMPLE_ADD, [entry(code, dims, STREAM), entry(code, dims, STREAM)],  # noqa: E731
                                         [entry(code, dims)], **kw)
    yield "simple_add_f32", add(F32, [4], stream=a + b)
    yield "simple_add_bf16_2x3", add(BF16, [2, 3], stream=bytes(range(24)))
    yield "simple_add_f16_empty", add(F16, [0, 7])
    yield "simple_add_scalar", add(F32, [], stream=f32_bytes(1.5, 2.0))
    yield "simple_add_dtype_mismatch", frame(SIMPLE_ADD, [entry(F32, [4]), entry(BF16, [4])], [entry(F32, [4])])
    yield "simple_add_unknown_attr", add(F32, [4], attrs=[f64("alpha", 2.0)])
    yield "simple_add_one_arg", frame(SIMPLE_ADD, [entry(F32, [4])], [entry(F32, [4])])
    yield "simple_add_huge_dims", add(F32, [2**62, 4])
    yield "simple_add_negative_dim", add(F32, [-1])
    yield "simple_add_s32", add(S32, [4])
    yield "simple_add_not_a_buffer", frame(SIMPLE_ADD, [entry(F32, [4], entry_flags=0x82), entry(F32, [4])],
                                           [entry(F32, [4])])
    yield "pa_bf16", pa_frame(attrs=[f64("sm_scale", 0.125)])
    yield "pa_bf16_all_attrs", pa_frame(attrs=[f64("sm_scale", 0.125), s64("sliding_window", 3), f32("soft_cap", 20.0),
                                               f32("mask_value", -1e4), f64("k_scale", 0.5), f32("v_scale", 2.0)])
    yield "pa_f32_fp8_d128", pa_frame(F32, F8E4M3FN, 128, attrs=[f64("k_scale", 0.25), f64("v_scale", 0.5)])
    yield "pa_f16_e5m2_d256", pa_frame(F16, F8E5M2, 256)
    yield "pa_padding_rows", pa_frame(q_rows=8)
    yield "pa_workspace_f32", pa_frame(ws=(F32, [16]))
    yield "pa_bad_sliding_window", pa_frame(attrs=[s64("sliding_window", 0)])
    yield "pa_sliding_window_f64", pa_frame(attrs=[f64("sliding_window", 3.5)])
    yield "pa_soft_cap_zero", pa_frame(attrs=[f32("soft_cap", 0.0)])
    yield "pa_sm_scale_nan", pa_frame(attrs=[f32("sm_scale", float("nan"))])
    yield "pa_sm_scale_c64", pa_frame(attrs=[scalar("sm_scale", C64, b"\0" * 8)])
    yield "pa_string_attr", pa_frame(attrs=[bytes([NAMES.index("sm_scale"), 2, 5]) + b"0.125"])
    yield "pa_array_attr", pa_frame(attrs=[bytes([NAMES.index("soft_cap"), 1]) + dtype(F32) + bytes([2]) + b"\0" * 8])
    yield "pa_dict_attr", pa_frame(attrs=[bytes([NAMES.index("k_scale"), 3])])
    yield "pa_non_utf8_attr_name", pa_frame(attrs=[bytes([0xF0, 3]) + b"\xff\xfe\x00" + bytes([0]) + dtype(F32) +
                                                   b"\0" * 8])
    yield "pa_huge_heads", frame(PAGED_ATTENTION, [entry(BF16, [2**31 - 1, 2**32 - 1, 256]),
                                                   entry(BF16, [1, 1, 2, 256]), entry(S32, [1]), entry(S32, [1, 1]),
                                                   entry(S32, [2]), entry(S32, [1])],
                                 [entry(BF16, [2**31 - 1, 2**32 - 1, 256]), entry(U8, [0])])
    yield "pa_huge_table", frame(PAGED_ATTENTION, [entry(BF16, [1, 2, 64]), entry(BF16, [1, 1, 2, 64]),
                                                   entry(S32, [2**32 - 1]), entry(S32, [2**32 - 1, 2**32 - 1]),
                                                   entry(S32, [2**32]), entry(S32, [1])],
                                 [entry(BF16, [1, 2, 64]), entry(U8, [0])])
    yield "pa_null_q", frame(PAGED_ATTENTION, [entry(BF16, [4, 2, 64], data="null"), entry(BF16, [4, 4, 2, 64]),
                                               entry(S32, [2]), entry(S32, [2, 2]), entry(S32, [3]), entry(S32, [1])],
                             [entry(BF16, [4, 2, 64]), entry(U8, [0])])
    yield "pa_misaligned_meta", frame(PAGED_ATTENTION, [entry(BF16, [4, 2, 64]), entry(BF16, [4, 4, 2, 64]),
                                                        entry(S32, [2], data="misaligned"), entry(S32, [2, 2]),
                                                        entry(S32, [3]), entry(S32, [1])],
                                      [entry(BF16, [4, 2, 64]), entry(U8, [0])])
    yield "pa_negative_rank", frame(PAGED_ATTENTION, [entry(BF16, [4, 2, 64])] * 5 + [bytes([0, S32, 0xFF, 0])],
                                    [entry(BF16, [4, 2, 64]), entry(U8, [0])])
    yield "probe", frame(BOTH, [], [], flags=1)
    yield "probe_null_api_null_metadata", frame(BOTH, [], [], flags=1 | 2 | 4)
    yield "stage_instantiate", add(F32, [4], flags=0x40, extra=bytes([0]))
    yield "frame_size_160", add(F32, [4], flags=0x10)
    yield "other_extension_api_88", add(F32, [4], flags=0x08 | 0x80 | 0x20)


# --- legacy_opaque ----------------------------------------------------------------------------

def legacy_opaque():
    yield "simple_add", b"xgk1;op=simple_add;dtype=f32;n=1024"
    yield "simple_add_bf16_0", b"xgk1;op=simple_add;dtype=bf16;n=0"
    yield "pa", b"xgk1;op=paged_attention;q=bf16[64,32,128];kv=bf16[512,16,16,128];max_num_seqs=8;pages_per_seq=64;sm_scale=0.088388346"
    yield "pa_all", (b"xgk1;op=paged_attention;q=f16[8,4,64];kv=f8e4m3fn[16,16,4,64];max_num_seqs=2;pages_per_seq=4;"
                     b"sm_scale=0.125;sliding_window=128;soft_cap=50.0;mask_value=-10000.0;k_scale=0.5;v_scale=2.0")
    yield "pa_odd_kv_heads", b"xgk1;op=paged_attention;q=bf16[8,4,128];kv=bf16[16,16,3,128];max_num_seqs=2;pages_per_seq=4"
    yield "pa_max_seqs_i64_max", b"xgk1;op=paged_attention;q=bf16[8,4,128];kv=bf16[16,16,4,128];max_num_seqs=9223372036854775807;pages_per_seq=4"
    yield "pa_max_seqs_u64_max", b"xgk1;op=paged_attention;q=bf16[8,4,128];kv=bf16[16,16,4,128];max_num_seqs=18446744073709551615;pages_per_seq=4"
    yield "pa_window_huge", b"xgk1;op=paged_attention;q=bf16[8,4,128];kv=bf16[16,16,4,128];max_num_seqs=2;pages_per_seq=4;sliding_window=18446744073709551615"
    yield "pa_huge_q", b"xgk1;op=paged_attention;q=bf16[2147483647,4294967295,256];kv=bf16[1,1,2,256];max_num_seqs=1;pages_per_seq=1"
    yield "pa_negative_dim", b"xgk1;op=paged_attention;q=bf16[-8,4,128];kv=bf16[16,16,4,128];max_num_seqs=2;pages_per_seq=4"
    yield "json", b"{}"
    yield "empty", b""
    yield "wrong_version", b"xgk2;op=simple_add;dtype=f32;n=4"
    yield "repeated_key", b"xgk1;op=simple_add;n=1;n=2"
    yield "not_key_value", b"xgk1;op=x;junk"
    yield "non_utf8", b"xgk1;op=simple_add;dtype=\xff\xfe;n=4"
    yield "bad_number", b"xgk1;op=simple_add;dtype=f32;n=1e3"
    yield "big_number", b"xgk1;op=simple_add;dtype=f32;n=99999999999999999999999"
    yield "sm_scale_inf", b"xgk1;op=paged_attention;q=f32[8,4,64];kv=f32[16,16,4,64];max_num_seqs=2;pages_per_seq=4;sm_scale=1e300"


# --- capi_descriptors -------------------------------------------------------------------------

def desc(code: int, dims, fill=ZEROS, data="backed", rank=None, null_dims=False) -> bytes:
    """[dtype, rank, dims..., data mode]; rank None = len(dims) (0..8), else a rank byte code."""
    mode = {"backed": 0, "null": 1, "misaligned": 2}[data] | (fill << 2) | (0x10 if null_dims else 0)
    rank_byte = bytes([len(dims)]) if rank is None else rank
    return dtype(code) + rank_byte + b"".join(map(dim, dims)) + bytes([mode])


def c_attrs(sm_scale=0.125, window=None, soft_cap=None, mask=None, k=None, v=None) -> bytes:
    flags = bytes([0 if x is None else 1 for x in (window, soft_cap, mask, k, v)])
    return flags + struct.pack("<fqffff", sm_scale, window or 0, soft_cap or 0.0, mask or 0.0, k or 0.0, v or 0.0)


def capi(descs, attrs=None, stream=b"", flags=0, platform=0, device=0) -> bytes:
    return bytes([flags, platform, device]) + b"".join(descs) + (attrs or c_attrs()) + stream


def capi_descriptors():
    pa = [desc(BF16, [4, 2, 64], ONES), desc(BF16, [4, 4, 2, 64], ONES), desc(S32, [2], STREAM),
          desc(S32, [2, 2], STREAM), desc(S32, [3], STREAM), desc(S32, [1], STREAM), desc(BF16, [4, 2, 64])]
    meta = i32s(5, 3) + i32s(0, 1, 2, 3) + i32s(0, 3, 4) + i32s(2)
    yield "pa_valid", capi(pa, stream=meta)
    yield "pa_all_attrs", capi(pa, c_attrs(0.125, 3, 20.0, -1e4, 0.5, 2.0), stream=meta)
    yield "pa_fp8", capi([desc(F16, [4, 2, 128], ONES), desc(F8E4M3FN, [4, 4, 2, 128], ONES)] + pa[2:6] +
                         [desc(F16, [4, 2, 128])], stream=meta)
    add = [desc(F32, [3], STREAM), desc(F32, [3], STREAM), desc(F32, [3])] + pa[3:]
    yield "simple_add_valid", capi(add, stream=f32_bytes(1, 2, 3, 4, 5, 6))
    yield "simple_add_unknown_platform", capi(add, platform=0xC0)
    yield "rank_minus_one", capi([desc(F32, [1, 1, 1, 1], rank=bytes([0xF0]))] * 7)
    yield "rank_i64_min", capi([desc(F32, [1, 2, 3, 4], rank=bytes([0xF1]))] * 7)
    yield "rank_65", capi([desc(F32, [1, 2, 3, 4], rank=bytes([0xF3]))] * 7)
    yield "rank_64", capi([desc(F32, [1] * 64, rank=bytes([0xF4]))] * 7)
    yield "null_dims", capi([desc(F32, [3], null_dims=True)] * 3 + pa[3:])
    yield "null_data", capi([desc(F32, [3], data="null")] * 3 + pa[3:])
    yield "huge_dims", capi([desc(F32, [2**62, 2**62])] * 3 + pa[3:])
    yield "negative_dims", capi([desc(F32, [-1, 4])] * 7)
    huge_q = desc(BF16, [2**31 - 1, 2**32 - 1, 256])
    yield "pa_huge_q", capi([huge_q, desc(BF16, [1, 1, 2, 256]), desc(S32, [1]), desc(S32, [1, 1]), desc(S32, [2]),
                             desc(S32, [1]), huge_q])
    yield "pa_misaligned_meta", capi(pa[:2] + [desc(S32, [2], STREAM, data="misaligned")] + pa[3:], stream=meta)
    yield "null_tensors_err_len_1", capi(pa, flags=1 | (1 << 4))
    yield "null_attrs_bytes_err_16", capi(pa, flags=2 | 4 | (3 << 4), stream=meta)
    yield "null_err", capi(pa, flags=8)
    yield "attr_flags_negative", capi(pa, bytes([0xFF, 0x80, 3, 1, 1]) + struct.pack("<fqffff", 1.0, -5, 0, 0, 1, 1))


def main():
    for target, gen in (("ffi_call_frame", ffi_call_frame), ("legacy_opaque", legacy_opaque),
                        ("capi_descriptors", capi_descriptors)):
        out = ROOT / target
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        count = 0
        for name, data in gen():
            (out / name).write_bytes(data)
            count += 1
        print(f"{target}: {count} seeds in {out}")


if __name__ == "__main__":
    main()
