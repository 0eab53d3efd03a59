//! Arbitrary `XgkTensor` descriptors (dtype codes, ranks including negative and huge ones, dims
//! including negative and huge ones, NULL dims) and `XgkPagedAttentionAttrs` into the C API:
//! - `xgk_paged_attention_workspace_bytes` with a negative device (validation only: no data read,
//!   no GPU touched);
//! - `xgk_simple_add` and `xgk_paged_attention` with platform 0 (CPU) or an unknown platform
//!   (never 1: CUDA), data pointers at host buffers of exactly the declared size, or NULL when that
//!   size is absurd or the input asks for NULL (and NULL for a paged attention problem costing
//!   more than ~2^21 multiply-adds).
//!
//! A descriptor's dims array has `rank` entries when 0 <= rank <= 64, otherwise 4 entries (the
//! library must reject such a rank before reading dims). Also NULL `tensors`, `attrs`, `bytes` and
//! `err`, and error buffers of 0, 1, 16 or 256 bytes, allocated to their exact size.
//!
//! Asserts: no panic at all (libfuzzer-sys aborts on every panic, caught or not); return code 0,
//! 1 or 2, and never 2 on the CPU; on an error the message is NUL-terminated inside `err_len`,
//! non-empty when `err_len >= 2`, and UTF-8; on success of the workspace query with device < 0,
//! `*bytes == 0`.
//!
//! Input layout: flags, platform byte, device byte, 7 descriptors `[dtype, rank, dims..., data
//! mode]`, the attributes, then the data stream (see `fuzz/gen_corpus.py`).

#![no_main]

use std::ffi::c_char;

use libfuzzer_sys::fuzz_target;
use xla_gpu_kernels::host::capi::{XgkPagedAttentionAttrs, XgkTensor};
use xla_gpu_kernels::{xgk_paged_attention, xgk_paged_attention_workspace_bytes, xgk_simple_add};
use xla_gpu_kernels_fuzz::*;

/// Entries of a dims array for a rank the library must refuse (< 0 or > 64).
const SHORT_DIMS: usize = 4;
const MAX_WORK: i128 = 1 << 21;

struct Desc {
    dtype: i32,
    rank: i64,
    dims: Vec<i64>,
    mode: u8,
}

fn read_rank(r: &mut Reader) -> i64 {
    match r.u8() {
        c @ 0..=0xEF => (c % 9) as i64,
        0xF0 => -1,
        0xF1 => i64::MIN,
        0xF2 => i64::MAX,
        0xF3 => 65,
        0xF4 => 64,
        0xF5 => 1 << 32,
        0xF6 => 33,
        _ => r.i64(),
    }
}

fn read_desc(r: &mut Reader) -> Desc {
    let dtype = r.dtype();
    let rank = read_rank(r);
    let n = match rank {
        0 => 0,
        1..=64 => rank as usize,
        _ => SHORT_DIMS,
    };
    let dims = (0..n).map(|_| r.dim()).collect();
    Desc { dtype, rank, dims, mode: r.u8() }
}

fn read_attrs(r: &mut Reader) -> XgkPagedAttentionAttrs {
    let mut flag = || match r.u8() {
        0 => 0,
        1 | 2 => 1,
        b => b as i8 as i32,
    };
    let (hw, hs, hm, hk, hv) = (flag(), flag(), flag(), flag(), flag());
    XgkPagedAttentionAttrs {
        sm_scale: r.f32(),
        has_sliding_window: hw,
        sliding_window: r.i64(),
        has_soft_cap: hs,
        soft_cap: r.f32(),
        has_mask_value: hm,
        mask_value: r.f32(),
        has_k_scale: hk,
        k_scale: r.f32(),
        has_v_scale: hv,
        v_scale: r.f32(),
    }
}

fn work(d: &[Desc]) -> i128 {
    if d[0].rank != 3 || d[1].rank != 4 || d[3].rank != 2 {
        return 0;
    }
    let g = |x: &Desc, i: usize| (x.dims[i].max(0) as i128).min(1 << 40);
    let keys = (g(&d[3], 1) * g(&d[1], 1)).min(1 << 31);
    g(&d[0], 0).saturating_mul(g(&d[0], 1) + g(&d[1], 2)).saturating_mul(g(&d[0], 2)).saturating_mul(keys)
}

/// Checks a C API return code and its message.
fn check_rc(what: &str, rc: i32, err: Option<&HostBuffer>) {
    let shown =
        err.filter(|_| rc != 0).map(|e| String::from_utf8_lossy(e.bytes()).split('\0').next().map(String::from));
    trace(what, &(rc, shown));
    assert!((0..=2).contains(&rc), "{what}: return code {rc}");
    // 2 (failed) comes from CUDA, a missing driver or a caught panic: none is possible on the CPU.
    assert_ne!(rc, 2, "{what}: return code 2 on the CPU");
    let Some(err) = err else { return };
    let bytes = err.bytes();
    if rc == 0 || bytes.is_empty() {
        return;
    }
    let nul = bytes.iter().position(|&b| b == 0).unwrap_or_else(|| panic!("{what}: message not NUL-terminated"));
    let msg = std::str::from_utf8(&bytes[..nul]).unwrap_or_else(|_| panic!("{what}: message is not UTF-8"));
    if bytes.len() >= 2 {
        check_message(what, msg);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let flags = r.u8();
    let platform = match r.u8() {
        0..=0xBF => 0, // CPU
        0xC0 => 2,     // unknown platforms: 2 and negative ones; never 1 (CUDA)
        b => (b as i8) as i32,
    };
    let device = -1 - (r.u8() % 4) as i32;
    let descs: Vec<Desc> = (0..7).map(|_| read_desc(&mut r)).collect();
    let attrs = read_attrs(&mut r);

    let too_costly = work(&descs) > MAX_WORK;
    let mut stream = Reader::new(r.rest());
    let mut total = 0usize;
    let mut buffers: Vec<Option<HostBuffer>> = descs
        .iter()
        .map(|d| {
            let n = if (1..=64).contains(&d.rank) || d.rank <= 0 { declared_elements(d.rank, &d.dims) } else { None };
            match n.and_then(|n| n.checked_mul(elem_bytes(d.dtype))) {
                Some(b)
                    if d.mode & 3 != 1 && !too_costly && b <= MAX_BUFFER_BYTES && total + b <= 4 * MAX_BUFFER_BYTES =>
                {
                    total += b;
                    let mut buf = HostBuffer::new(b, (d.mode & 3 == 2) as usize);
                    fill(buf.bytes_mut(), (d.mode >> 2) & 3, &mut stream);
                    Some(buf)
                }
                _ => None,
            }
        })
        .collect();
    let tensors: Vec<XgkTensor> = descs
        .iter()
        .zip(buffers.iter_mut())
        .map(|(d, b)| XgkTensor {
            data: b.as_mut().map_or(std::ptr::null_mut(), |b| b.ptr()),
            dtype: d.dtype,
            rank: d.rank,
            dims: if d.mode & 0x10 != 0 { std::ptr::null() } else { d.dims.as_ptr() },
        })
        .collect();

    let err_len = [256usize, 1, 0, 16][((flags >> 4) & 3) as usize];
    let mut err = (flags & 8 == 0).then(|| HostBuffer::new(err_len, 0));
    let err_ptr = err.as_mut().map_or(std::ptr::null_mut(), |e| e.ptr() as *mut c_char);
    let tensors_ptr = if flags & 1 != 0 { std::ptr::null() } else { tensors.as_ptr() };
    let attrs_ptr = if flags & 2 != 0 { std::ptr::null() } else { &attrs as *const _ };
    let mut bytes = u64::MAX;
    let bytes_ptr = if flags & 4 != 0 { std::ptr::null_mut() } else { &mut bytes as *mut u64 };

    let rc =
        unsafe { xgk_paged_attention_workspace_bytes(device, tensors_ptr, attrs_ptr, bytes_ptr, err_ptr, err_len) };
    check_rc("xgk_paged_attention_workspace_bytes", rc, err.as_ref());
    if rc == 0 {
        assert_eq!(bytes, 0, "workspace on the CPU");
    }

    let rc = unsafe { xgk_simple_add(platform, std::ptr::null_mut(), tensors_ptr, err_ptr, err_len) };
    check_rc("xgk_simple_add", rc, err.as_ref());

    let rc = unsafe {
        xgk_paged_attention(
            platform,
            std::ptr::null_mut(),
            tensors_ptr,
            attrs_ptr,
            std::ptr::null_mut(),
            0,
            err_ptr,
            err_len,
        )
    };
    check_rc("xgk_paged_attention", rc, err.as_ref());
});
