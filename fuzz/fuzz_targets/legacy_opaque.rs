//! Arbitrary bytes as the opaque of the legacy custom calls: the parser (`Opaque::parse` and every
//! typed accessor), the simple_add and paged_attention opaque validation, and the exported status
//! symbols `XlaGpuSimpleAddStatus` / `XlaGpuPagedAttention` (with NULL buffers, so nothing is ever
//! launched: a valid opaque must then fail on "buffer 0 is null").
//!
//! Asserts: no panic at all (libfuzzer-sys aborts on every panic, also one the library would catch
//! and report), every error has a non-empty message, and the
//! status symbols always fail the status with such a message.

#![no_main]

use std::ffi::c_void;

use libfuzzer_sys::fuzz_target;
use xla_gpu_kernels::host::xla::handlers::{
    paged_attention_from_opaque, simple_add_from_opaque, PAGED_ATTENTION_OPAQUE_KEYS, SIMPLE_ADD_OPAQUE_KEYS,
};
use xla_gpu_kernels::host::xla::legacy::Opaque;
use xla_gpu_kernels::{XlaGpuPagedAttention, XlaGpuSimpleAddStatus};
use xla_gpu_kernels_fuzz::{check_message, trace};

fn check<T>(what: &str, r: Result<T, xla_gpu_kernels::host::Error>) {
    if let Err(e) = r {
        check_message(what, &e.to_string());
    }
}

/// The message an `XlaCustomCallStatus` (libstdc++ layout, see `legacy::set_status_failure`)
/// was failed with; frees a heap message.
fn take_status(status: &mut [u64; 5]) -> Option<String> {
    let base = status.as_mut_ptr() as *mut u8;
    unsafe {
        if *base.add(32) != 1 {
            return None;
        }
        let p = *(base as *const *mut u8);
        let len = *(base.add(8) as *const usize);
        let msg = String::from_utf8_lossy(std::slice::from_raw_parts(p, len)).into_owned();
        if p != base.add(16) {
            libc_free(p as *mut c_void);
        }
        Some(msg)
    }
}

extern "C" {
    #[link_name = "free"]
    fn libc_free(p: *mut c_void);
}

fuzz_target!(|data: &[u8]| {
    match Opaque::parse(data) {
        Ok(o) => {
            // Every key the validators read, the op selector, and the empty key.
            let keys = ["op", ""].into_iter().chain(SIMPLE_ADD_OPAQUE_KEYS).chain(PAGED_ATTENTION_OPAQUE_KEYS);
            for key in keys {
                check("u64", o.u64(key));
                check("u64_opt", o.u64_opt(key));
                check("f32_opt", o.f32_opt(key));
                check("dtype", o.dtype(key));
                check("shape", o.shape(key));
            }
            check("expect", o.expect("simple_add", &SIMPLE_ADD_OPAQUE_KEYS));
        }
        Err(e) => check_message("parse", &e.to_string()),
    }
    let sa = simple_add_from_opaque(data);
    trace("simple_add_from_opaque", &sa);
    check("simple_add_from_opaque", sa);
    let pa = paged_attention_from_opaque(data);
    trace("paged_attention_from_opaque", &pa.as_ref().map(|_| "ok"));
    check("paged_attention_from_opaque", pa);

    let mut buffers = [std::ptr::null_mut::<c_void>(); 7];
    for (name, symbol) in [
        ("XlaGpuSimpleAddStatus", XlaGpuSimpleAddStatus as unsafe extern "C" fn(_, _, _, _, _)),
        ("XlaGpuPagedAttention", XlaGpuPagedAttention),
    ] {
        let mut status = [0u64; 5];
        unsafe {
            symbol(
                std::ptr::null_mut(),
                buffers.as_mut_ptr(),
                data.as_ptr() as *const _,
                data.len(),
                status.as_mut_ptr() as *mut c_void,
            )
        };
        let msg = take_status(&mut status).unwrap_or_else(|| panic!("{name}: status not failed"));
        trace(name, &msg);
        let msg = msg.strip_prefix("xla-gpu-kernels: ").unwrap_or_else(|| panic!("{name}: message {msg:?}"));
        check_message(name, msg);
    }
});
