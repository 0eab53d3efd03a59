//! Regression tests of what the fuzz targets (`fuzz/`, `scripts/fuzz.sh`) found: each input here
//! crashed, panicked or was accepted by a decoder before the fix, and is now rejected with an error
//! naming the problem. The fuzz seed reproducing each one is named in its test.

use std::ffi::{c_char, c_void, CStr};

use xla_gpu_kernels::host::capi::{XgkPagedAttentionAttrs, XgkTensor};
use xla_gpu_kernels::host::dtype::TensorRef;
use xla_gpu_kernels::host::ops::paged_attention::{Attributes, PagedAttention};
use xla_gpu_kernels::host::ops::simple_add::SimpleAdd;
use xla_gpu_kernels::host::xla::ffi::testing::{take_error, FrameBuilder, RawBuffer};
use xla_gpu_kernels::host::xla::ffi::ARG_BUFFER;
use xla_gpu_kernels::host::xla::handlers::{paged_attention_from_opaque, simple_add_from_opaque};
use xla_gpu_kernels::host::DType;
use xla_gpu_kernels::*;

fn opaque_err(opaque: &str) -> String {
    paged_attention_from_opaque(opaque.as_bytes()).unwrap_err().to_string()
}

/// legacy_opaque `pa_max_seqs_i64_max`: `max_num_seqs + 1` overflowed i64 (a panic with overflow
/// checks); `pa_max_seqs_u64_max`: u64 values wrapped to negative i64 and were reported as "-1".
#[test]
fn legacy_opaque_counts_must_fit_u32() {
    let base = "xgk1;op=paged_attention;q=bf16[8,4,128];kv=bf16[16,16,4,128]";
    for (fields, want) in [
        (
            "max_num_seqs=9223372036854775807;pages_per_seq=4",
            "paged_attention: opaque field 'max_num_seqs' = 9223372036854775807 is out of range",
        ),
        (
            "max_num_seqs=18446744073709551615;pages_per_seq=4",
            "paged_attention: opaque field 'max_num_seqs' = 18446744073709551615 is out of range",
        ),
        ("max_num_seqs=2;pages_per_seq=4294967296", "opaque field 'pages_per_seq' = 4294967296 is out of range"),
        (
            "max_num_seqs=2;pages_per_seq=4;sliding_window=18446744073709551615",
            "sliding_window 18446744073709551615 is too large",
        ),
    ] {
        let msg = opaque_err(&format!("{base};{fields}"));
        assert!(msg.contains(want), "{fields}: {msg}");
    }
    assert!(paged_attention_from_opaque(format!("{base};max_num_seqs=2;pages_per_seq=4").as_bytes()).is_ok());
}

fn t(dtype: DType, dims: &[i64]) -> TensorRef<'_> {
    TensorRef { data: std::ptr::null_mut(), dtype, dims }
}

fn pa_check(q: &[i64], kv: &[i64], kv_dtype: DType, seqs: i64, pages_per_seq: i64) -> String {
    PagedAttention::from_tensors(
        &t(DType::F32, q),
        &t(kv_dtype, kv),
        &t(DType::S32, &[seqs]),
        &t(DType::S32, &[seqs, pages_per_seq]),
        &t(DType::S32, &[seqs + 1]),
        &t(DType::S32, &[1]),
        &t(DType::F32, q),
        Attributes::default(),
    )
    .unwrap_err()
    .to_string()
}

/// ffi_call_frame `pa_huge_heads` / capi_descriptors `pa_huge_q`: q's element count was not
/// bounded, so `element_counts` overflowed (a panic with overflow checks, wrapped sizes without);
/// `pa_huge_table`: the same for page_indices; kv_pages was bounded in elements, not bytes.
#[test]
fn static_shapes_are_bounded_in_bytes() {
    let q = [(1 << 31) - 1, u32::MAX as i64, 256];
    assert!(pa_check(&q, &[1, 1, 2, 256], DType::F32, 1, 1).starts_with("q is too large"));
    let msg = pa_check(&[1, 2, 64], &[1, 1, 2, 64], DType::F32, u32::MAX as i64, u32::MAX as i64);
    assert!(msg.starts_with("page_indices is too large"), "{msg}");
    // ~2^61 f32 elements: fewer than the 2^62 elements once allowed, but ~2^63 bytes.
    let msg = pa_check(&[1, 2, 128], &[u32::MAX as i64, 1 << 21, 2, 128], DType::F32, 1, 1);
    assert!(msg.starts_with("kv_pages is too large"), "{msg}");
    // simple_add: the byte count of 2^61 f32 elements overflows isize.
    let dims = [1i64 << 61];
    let err = SimpleAdd::from_tensors(&t(DType::F32, &dims), &t(DType::F32, &dims), &t(DType::F32, &dims)).unwrap_err();
    assert_eq!(err.to_string(), "simple_add: f32[2305843009213693952] is too large");
    let err = simple_add_from_opaque(b"xgk1;op=simple_add;dtype=f32;n=4611686018427387904").unwrap_err();
    assert!(err.to_string().contains("is too large"), "{err}");
}

fn ptr(v: &mut [u64]) -> *mut c_void {
    v.as_mut_ptr() as *mut c_void
}

/// ffi_call_frame `pa_null_q`, capi_descriptors `null_data`: the Host handlers made slices from a
/// NULL data pointer (undefined behaviour: a crash); `pa_misaligned_meta`: an int32 slice from a
/// misaligned pointer (an abort with debug assertions).
#[test]
fn host_handlers_reject_null_and_misaligned_data() {
    let (mut a, mut out) = (vec![0u64; 2], vec![0u64; 2]);
    let mut fb = FrameBuilder::new()
        .arg(DType::F32, &[4], ptr(&mut a))
        .arg(DType::F32, &[4], std::ptr::null_mut())
        .ret(DType::F32, &[4], ptr(&mut out));
    let (code, msg) = unsafe { take_error(xla_gpu_simple_add_host(fb.frame())) }.expect("an error");
    assert_eq!((code, msg.as_str()), (3, "simple_add: b is a NULL pointer but its shape needs 16 bytes"));

    // A valid paged attention problem (2 sequences, page size 4) with one bad buffer at a time.
    let mut q = vec![0u64; 4 * 2 * 64 / 4];
    let mut kv = vec![0u64; 4 * 4 * 2 * 64 / 4];
    let mut o = vec![0u64; q.len()];
    let mut meta = vec![0u64; 8]; // kv_lens at +0 (and +1 byte: misaligned), the rest after it
    let meta_p = meta.as_mut_ptr() as *mut u8;
    for (bad_q, misaligned, want) in [
        (true, false, "paged_attention: q is a NULL pointer but its shape needs 1024 bytes"),
        (false, true, "paged_attention: kv_lens data pointer"),
    ] {
        let kv_lens = if misaligned { unsafe { meta_p.add(1) } } else { meta_p } as *mut c_void;
        let rest = unsafe { meta_p.add(16) } as *mut c_void;
        let mut fb = FrameBuilder::new()
            .arg(DType::BF16, &[4, 2, 64], if bad_q { std::ptr::null_mut() } else { ptr(&mut q) })
            .arg(DType::BF16, &[4, 4, 2, 64], ptr(&mut kv))
            .arg(DType::S32, &[2], kv_lens)
            .arg(DType::S32, &[2, 2], rest)
            .arg(DType::S32, &[3], rest)
            .arg(DType::S32, &[1], rest)
            .ret(DType::BF16, &[4, 2, 64], ptr(&mut o))
            .ret(DType::U8, &[0], std::ptr::null_mut());
        let (code, msg) = unsafe { take_error(xla_gpu_paged_attention_host(fb.frame())) }.expect("an error");
        assert_eq!(code, 3);
        assert!(msg.starts_with(want), "{msg}");
        if misaligned {
            assert!(msg.ends_with("is not 4-byte aligned"), "{msg}");
        }
    }
}

/// ffi_call_frame `pa_negative_rank`: a negative rank was read as a scalar; NULL dims with a
/// positive rank made a slice from NULL.
#[test]
fn ffi_buffers_with_negative_rank_or_null_dims_are_errors() {
    let mut data = vec![0u64; 2];
    for (rank, dims, want) in
        [(-1i64, Some(&[][..]), "argument 0: negative rank -1"), (1, None, "argument 0: rank 1 with NULL dims")]
    {
        let raw = RawBuffer { struct_size: 48, dtype_code: 11, data: ptr(&mut data), rank, dims };
        let mut fb = FrameBuilder::new().raw_arg(ARG_BUFFER, raw).raw_arg(ARG_BUFFER, raw).raw_ret(ARG_BUFFER, raw);
        let (code, msg) = unsafe { take_error(xla_gpu_simple_add_host(fb.frame())) }.expect("an error");
        assert_eq!((code, msg.as_str()), (3, want));
    }
}

fn c_msg(err: &[c_char]) -> String {
    unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned()
}

/// capi_descriptors `null_tensors_err_len_1`: `xgk_simple_add` made a slice from NULL `tensors`;
/// `rank_65`: a rank above the dims array read past it (AddressSanitizer: heap-buffer-overflow);
/// `rank_minus_one`: a negative rank was read as a scalar; `null_dims`: NULL dims as a scalar.
#[test]
fn c_api_rejects_bad_descriptors_before_reading_dims() {
    let mut err = [0 as c_char; 256];
    let rc = unsafe { xgk_simple_add(0, std::ptr::null_mut(), std::ptr::null(), err.as_mut_ptr(), err.len()) };
    assert_eq!((rc, c_msg(&err).as_str()), (1, "simple_add: tensors must not be null"));

    let dims = [4i64];
    let mut buf = vec![0u64; 2];
    let ok = XgkTensor { data: ptr(&mut buf), dtype: 11, rank: 1, dims: dims.as_ptr() };
    for (bad, want) in [
        (XgkTensor { rank: 65, ..ok }, "simple_add: b has rank 65; expected 0..=64"),
        (XgkTensor { rank: -1, ..ok }, "simple_add: b has rank -1; expected 0..=64"),
        (XgkTensor { rank: i64::MAX, ..ok }, "simple_add: b has rank 9223372036854775807; expected 0..=64"),
        (XgkTensor { dims: std::ptr::null(), ..ok }, "simple_add: b has rank 1 but NULL dims"),
        (
            XgkTensor { data: std::ptr::null_mut(), ..ok },
            "simple_add: b is a NULL pointer but its shape needs 16 bytes",
        ),
    ] {
        let tensors = [ok, bad, ok];
        let rc = unsafe { xgk_simple_add(0, std::ptr::null_mut(), tensors.as_ptr(), err.as_mut_ptr(), err.len()) };
        assert_eq!((rc, c_msg(&err).as_str()), (1, want));
    }

    // Validation only (device -1): the same checks name the paged attention tensor.
    let tensors = [XgkTensor { rank: 65, ..ok }; 7];
    let attrs = XgkPagedAttentionAttrs { sm_scale: 1.0, ..Default::default() };
    let mut bytes = 0u64;
    let rc = unsafe {
        xgk_paged_attention_workspace_bytes(-1, tensors.as_ptr(), &attrs, &mut bytes, err.as_mut_ptr(), err.len())
    };
    assert_eq!((rc, c_msg(&err).as_str()), (1, "paged_attention: q has rank 65; expected 0..=64"));
}

/// Not a crash: an unknown attribute of an op without attributes listed "known: " with nothing.
#[test]
fn unknown_attribute_of_an_op_without_attributes() {
    let mut a = vec![0u64; 2];
    let mut fb = FrameBuilder::new()
        .arg(DType::F32, &[4], ptr(&mut a))
        .arg(DType::F32, &[4], ptr(&mut a))
        .ret(DType::F32, &[4], ptr(&mut a))
        .f32_attr("alpha", 1.0);
    let (_, msg) = unsafe { take_error(xla_gpu_simple_add_host(fb.frame())) }.expect("an error");
    assert_eq!(msg, "simple_add: unknown attribute 'alpha'; known: none");
}
