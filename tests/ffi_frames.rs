//! The exported handlers on synthesized XLA call frames (no XLA, no GPU): the metadata probe,
//! dtype dispatch, attribute decoding and error messages, and the legacy opaque/status path.

mod common;

use std::ffi::c_void;

use common::*;
use rand::prelude::*;
use xla_gpu_kernels::host::xla::ffi::testing::{probe_frame, take_error, FrameBuilder};
use xla_gpu_kernels::host::DType;
use xla_gpu_kernels::*;

fn ptr(v: &mut [u8]) -> *mut c_void {
    v.as_mut_ptr() as *mut c_void
}

#[test]
fn metadata_probe_reports_api_version_0_1_and_touches_nothing_else() {
    for handler in
        [xla_gpu_simple_add_host, xla_gpu_simple_add_cuda, xla_gpu_paged_attention_host, xla_gpu_paged_attention_cuda]
    {
        // api is NULL during the probe on XLA <= jax 0.8.
        let (mut frame, _ext, md) = probe_frame(std::ptr::null());
        let err = unsafe { handler(&mut *frame) };
        assert!(err.is_null());
        assert_eq!((md.api_version.major_version, md.api_version.minor_version), (0, 1));
        assert_eq!(md.api_version.struct_size, 24);
    }
    // The CUDA handlers are capture-safe (no allocation, no host reads, launches fixed by the
    // static shapes): XLA may record them into command buffers. Host handlers declare nothing.
    for (handler, traits) in [
        (xla_gpu_simple_add_host as unsafe extern "C" fn(_) -> _, 0),
        (xla_gpu_paged_attention_host, 0),
        (xla_gpu_simple_add_cuda, 1),
        (xla_gpu_paged_attention_cuda, 1),
    ] {
        let (mut frame, _ext, md) = probe_frame(std::ptr::null());
        assert!(unsafe { handler(&mut *frame) }.is_null());
        assert_eq!(md.traits, traits);
    }
}

#[test]
fn simple_add_host_handler_adds_every_dtype() {
    let mut rng = seeded_rng();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for n in [0usize, 1, 7, 1000, 4099] {
            let a_vals: Vec<f64> = (0..n).map(|_| rng.gen_range(-100.0..100.0)).collect();
            let b_vals: Vec<f64> = (0..n).map(|_| rng.gen_range(-100.0..100.0)).collect();
            let (mut a, mut b) = (encode(dtype, &a_vals), encode(dtype, &b_vals));
            let mut out = vec![0xCDu8; a.len()];
            let dims = [n as i64];
            let mut fb = FrameBuilder::new().arg(dtype, &dims, ptr(&mut a)).arg(dtype, &dims, ptr(&mut b)).ret(
                dtype,
                &dims,
                ptr(&mut out),
            );
            let err = unsafe { take_error(xla_gpu_simple_add_host(fb.frame())) };
            assert_eq!(err, None);
            for i in 0..n {
                // Exact: the sum of the rounded inputs, rounded once.
                let want = round_to(dtype, decode(dtype, &a, i) + decode(dtype, &b, i));
                assert_eq!(decode(dtype, &out, i), want, "{dtype} n={n} i={i}");
            }
        }
    }
}

#[test]
fn simple_add_reports_precise_errors() {
    let (mut a, mut b, mut out) = (vec![0u8; 16], vec![0u8; 16], vec![0u8; 16]);
    let cases: Vec<(FrameBuilder, &str)> = vec![
        (
            FrameBuilder::new().arg(DType::F32, &[4], ptr(&mut a)).arg(DType::BF16, &[8], ptr(&mut b)).ret(
                DType::F32,
                &[4],
                ptr(&mut out),
            ),
            "simple_add: dtype mismatch: a is f32 but b is bf16",
        ),
        (
            FrameBuilder::new().arg(DType::F32, &[4], ptr(&mut a)).arg(DType::F32, &[2, 2], ptr(&mut b)).ret(
                DType::F32,
                &[4],
                ptr(&mut out),
            ),
            "simple_add: shape mismatch: a is f32[4] but b is f32[2,2]",
        ),
        (
            FrameBuilder::new().arg(DType::S32, &[4], ptr(&mut a)).arg(DType::S32, &[4], ptr(&mut b)).ret(
                DType::S32,
                &[4],
                ptr(&mut out),
            ),
            "simple_add: unsupported dtype s32; supported: f32, f16, bf16",
        ),
        (
            FrameBuilder::new().arg(DType::F32, &[4], ptr(&mut a)).ret(DType::F32, &[4], ptr(&mut out)),
            "simple_add: expected 2 operands and 1 result(s), got 1 and 1",
        ),
        (
            FrameBuilder::new()
                .arg(DType::F32, &[4], ptr(&mut a))
                .arg(DType::F32, &[4], ptr(&mut b))
                .ret(DType::F32, &[4], ptr(&mut out))
                .f64_attr("alpha", 2.0),
            "simple_add: unknown attribute 'alpha'",
        ),
    ];
    for (mut fb, want) in cases {
        let (code, msg) = unsafe { take_error(xla_gpu_simple_add_host(fb.frame())) }.expect("an error");
        assert_eq!(code, 3, "INVALID_ARGUMENT for {msg}");
        assert!(msg.starts_with(want), "got {msg:?}, want {want:?}");
    }
}

#[test]
fn cuda_handler_without_a_stream_fails_cleanly() {
    // The synthesized API table has no Stream_Get: the CUDA handler must return an error (never
    // crash), whether or not this machine has a GPU.
    let (mut a, mut b, mut out) = (vec![0u8; 16], vec![0u8; 16], vec![0u8; 16]);
    let mut fb = FrameBuilder::new().arg(DType::F32, &[4], ptr(&mut a)).arg(DType::F32, &[4], ptr(&mut b)).ret(
        DType::F32,
        &[4],
        ptr(&mut out),
    );
    let (_, msg) = unsafe { take_error(xla_gpu_simple_add_cuda(fb.frame())) }.expect("an error");
    assert!(msg.contains("XLA_FFI_Stream_Get is missing"), "{msg}");
}

fn pa_frame(case: &mut Case, out: &mut [u8]) -> FrameBuilder {
    let (qd, kvd) = (case.q_dims(), case.kv_dims());
    let seqs = [case.max_num_seqs as i64];
    let table = [case.max_num_seqs as i64, case.pages_per_seq as i64];
    let cu = [case.max_num_seqs as i64 + 1];
    let p = |v: &mut Vec<i32>| v.as_mut_ptr() as *mut c_void;
    let mut num_seqs = vec![case.num_seqs];
    let fb = FrameBuilder::new()
        .arg(case.q_dtype, &qd, ptr(&mut case.q))
        .arg(case.kv_dtype, &kvd, ptr(&mut case.kv))
        .arg(DType::S32, &seqs, p(&mut case.kv_lens))
        .arg(DType::S32, &table, p(&mut case.page_indices))
        .arg(DType::S32, &cu, p(&mut case.cu_q_lens))
        .arg(DType::S32, &[1], p(&mut num_seqs))
        .ret(case.q_dtype, &qd, ptr(out))
        .ret(DType::U8, &[0], std::ptr::null_mut()); // the workspace (the Host handler needs none)
    std::mem::forget(num_seqs); // lives as long as the test
    fb
}

#[test]
fn paged_attention_host_handler_decodes_attributes_of_any_width() {
    let mut rng = seeded_rng();
    let mut case = random_case(&mut rng, DType::BF16, DType::F8E4M3FN, 128, 2, 2, 8, &[(4, 30), (1, 17)], 3);
    case.sliding_window = Some(9);
    case.sm_scale = 0.125;
    // A cap that bites (1-3x the logit spread): a cap the logits never reach would let a handler
    // that drops the attribute pass.
    let cap = biting_cap(&case, &mut rng);
    case.soft_cap = Some(cap);
    let want = case.oracle();
    let mut out = vec![0xFFu8; case.out_bytes()]; // NaN: an unwritten element fails is_finite
                                                  // JAX sends Python floats as F64 and ints as S64; np.float32 as F32.
    let mut fb = pa_frame(&mut case, &mut out)
        .f64_attr("sm_scale", 0.125)
        .i64_attr("sliding_window", 9)
        .f32_attr("soft_cap", cap)
        .f64_attr("k_scale", case.k_scale.unwrap() as f64)
        .f32_attr("v_scale", case.v_scale.unwrap());
    let err = unsafe { take_error(xla_gpu_paged_attention_host(fb.frame())) };
    assert_eq!(err, None);
    assert_close(&case, &out, &want, "host handler");
}

#[test]
fn paged_attention_rejects_bad_attributes_and_shapes() {
    let mut rng = seeded_rng();
    let mut case = random_case(&mut rng, DType::F16, DType::F16, 64, 1, 4, 4, &[(2, 9)], 0);
    let mut out = vec![0u8; case.out_bytes()];
    let checks: Vec<(FrameBuilder, &str)> = vec![
        (pa_frame(&mut case, &mut out).i64_attr("sliding_window", 0), "sliding_window must be > 0, got 0"),
        (pa_frame(&mut case, &mut out).f64_attr("soft_cap", 0.0), "soft_cap must be finite and != 0"),
        (pa_frame(&mut case, &mut out).f64_attr("sm_scal", 1.0), "paged_attention: unknown attribute 'sm_scal'"),
        (
            pa_frame(&mut case, &mut out).f64_attr("sliding_window", 3.5),
            "attribute 'sliding_window' must be an integer, got f64",
        ),
    ];
    for (mut fb, want) in checks {
        let (code, msg) = unsafe { take_error(xla_gpu_paged_attention_host(fb.frame())) }.expect("an error");
        assert_eq!(code, 3);
        assert!(msg.starts_with(want), "got {msg:?}, want {want:?}");
    }
    let mut bad_q = vec![0u8; 64];
    let mut fb = FrameBuilder::new().arg(DType::S32, &[4, 2, 2], ptr(&mut bad_q));
    let (_, msg) = unsafe { take_error(xla_gpu_paged_attention_host(fb.frame())) }.unwrap();
    assert!(msg.contains("expected 6 operands and 2 result(s)"), "{msg}");
    // The second result must be the u8[N] workspace.
    let mut ws = vec![0u8; 16];
    let mut fb = pa_frame(&mut case, &mut out);
    fb = fb.ret(DType::U8, &[16], ptr(&mut ws));
    let (_, msg) = unsafe { take_error(xla_gpu_paged_attention_host(fb.frame())) }.unwrap();
    assert!(msg.contains("expected 6 operands and 2 result(s), got 6 and 3"), "{msg}");
}

#[test]
fn paged_attention_workspace_result_must_be_u8_vector() {
    let mut rng = seeded_rng();
    let mut case = random_case(&mut rng, DType::F16, DType::F16, 64, 1, 4, 4, &[(2, 9)], 0);
    let (qd, kvd) = (case.q_dims(), case.kv_dims());
    let mut out = vec![0u8; case.out_bytes()];
    let mut ws = vec![0u8; 64];
    for (dtype, dims) in [(DType::F32, vec![16i64]), (DType::U8, vec![4, 16])] {
        let mut num_seqs = vec![case.num_seqs];
        let mut fb = FrameBuilder::new()
            .arg(case.q_dtype, &qd, ptr(&mut case.q))
            .arg(case.kv_dtype, &kvd, ptr(&mut case.kv))
            .arg(DType::S32, &[case.max_num_seqs as i64], case.kv_lens.as_mut_ptr() as *mut c_void)
            .arg(
                DType::S32,
                &[case.max_num_seqs as i64, case.pages_per_seq as i64],
                case.page_indices.as_mut_ptr() as *mut c_void,
            )
            .arg(DType::S32, &[case.max_num_seqs as i64 + 1], case.cu_q_lens.as_mut_ptr() as *mut c_void)
            .arg(DType::S32, &[1], num_seqs.as_mut_ptr() as *mut c_void)
            .ret(case.q_dtype, &qd, ptr(&mut out))
            .ret(dtype, &dims, ptr(&mut ws));
        let (code, msg) = unsafe { take_error(xla_gpu_paged_attention_host(fb.frame())) }.expect("an error");
        assert_eq!(code, 3);
        assert!(msg.contains("result 1 must be the u8[N] workspace"), "{msg}");
    }
}

/// The message of a failed `XlaCustomCallStatus` (libstdc++ `std::optional<std::string>`), or
/// None when the status was left untouched.
fn status_message(status: &[u64; 5]) -> Option<String> {
    let base = status.as_ptr() as *const u8;
    unsafe {
        if *base.add(32) != 1 {
            return None;
        }
        let msg = std::slice::from_raw_parts(*(base as *const *const u8), *(base.add(8) as *const usize));
        Some(String::from_utf8_lossy(msg).into_owned())
    }
}

#[test]
fn legacy_entry_points_report_malformed_opaques_through_the_status() {
    // No launch happens: the opaque is rejected first, so this needs no GPU.
    let mut buffers = [std::ptr::null_mut::<c_void>(); 7];
    for (opaque, want) in [
        (&b"{}"[..], "opaque must start with 'xgk1;'"),
        (b"xgk1;op=simple_add;dtype=f32", "opaque field 'n' is missing"),
        (b"xgk1;op=simple_add;dtype=s32;n=4", "unsupported dtype s32"),
        (b"xgk1;op=paged_attention;dtype=f32", "opaque is for op 'paged_attention', not 'simple_add'"),
    ] {
        let mut status = [0u64; 5];
        unsafe {
            XlaGpuSimpleAddStatus(
                std::ptr::null_mut(),
                buffers.as_mut_ptr(),
                opaque.as_ptr() as _,
                opaque.len(),
                status.as_mut_ptr() as _,
            );
        }
        let msg = status_message(&status)
            .unwrap_or_else(|| panic!("status not failed for {:?}", String::from_utf8_lossy(opaque)));
        assert!(msg.contains(want), "{msg}");
    }
    let mut status = [0u64; 5];
    let opaque = b"xgk1;op=paged_attention;q=bf16[8,4,128];kv=bf16[16,16,3,128];max_num_seqs=2;pages_per_seq=4";
    unsafe {
        XlaGpuPagedAttention(
            std::ptr::null_mut(),
            buffers.as_mut_ptr(),
            opaque.as_ptr() as _,
            opaque.len(),
            status.as_mut_ptr() as _,
        );
    }
    assert!(status_message(&status).expect("status failed").contains("must be even"));
}

/// Faults stay errors: the CUDA handlers called where no launch can happen (CI: no driver at all;
/// a GPU machine: no current context for the null stream) return an `XLA_FFI_Error` naming the
/// cause, and the process goes on: the next call works.
#[test]
fn cuda_handlers_without_driver_or_context_return_errors() {
    let mut rng = seeded_rng();
    let mut case = random_case(&mut rng, DType::BF16, DType::BF16, 64, 1, 2, 4, &[(2, 9)], 0);
    let mut out = vec![0u8; case.out_bytes()];
    for _ in 0..3 {
        let mut fb = pa_frame(&mut case, &mut out).stream(std::ptr::null_mut());
        let (code, msg) = unsafe { take_error(xla_gpu_paged_attention_cuda(fb.frame())) }.expect("an error");
        assert_ne!(code, 0);
        assert!(
            msg.contains("CUDA driver (libcuda.so) could not be loaded") || msg.contains("cuStreamGetCtx"),
            "{msg}"
        );
        let mut a = vec![0u8; 16];
        let mut fb = FrameBuilder::new()
            .stream(std::ptr::null_mut())
            .arg(DType::F32, &[4], ptr(&mut a))
            .arg(DType::F32, &[4], ptr(&mut a))
            .ret(DType::F32, &[4], ptr(&mut a));
        let (_, msg) = unsafe { take_error(xla_gpu_simple_add_cuda(fb.frame())) }.expect("an error");
        assert!(msg.contains("libcuda.so") || msg.contains("cuStreamGetCtx"), "{msg}");
    }
    // The process keeps working: the Host handler still computes.
    let want = case.oracle();
    let sm_scale = case.sm_scale;
    let mut fb = pa_frame(&mut case, &mut out).f32_attr("sm_scale", sm_scale);
    assert_eq!(unsafe { take_error(xla_gpu_paged_attention_host(fb.frame())) }, None);
    assert_close(&case, &out, &want, "host call after CUDA faults");
}
