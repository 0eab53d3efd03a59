//! Typed XLA FFI call frames built from the fuzz input, handed to the exported Host handlers
//! `xla_gpu_simple_add_host` and `xla_gpu_paged_attention_host` (execute stage, other stages, the
//! metadata probe).
//!
//! Everything stays within the declared struct sizes, as a runtime could send it: any number of
//! args/rets (of any type code, `XLA_FFI_Buffer.struct_size`, dtype code, rank, dims, NULL dims)
//! and attributes (any name bytes; SCALAR of any dtype, ARRAY, STRING, DICTIONARY, unknown kinds).
//! Data pointers point at host buffers of exactly the declared size, or are NULL when that size is
//! absurd (> 1 MiB) or the input asks for NULL; a paged attention problem that would cost more
//! than ~2^21 multiply-adds gets NULL data too, so a valid problem stays fast on the CPU.
//!
//! Asserts: no panic at all (libfuzzer-sys aborts on every panic, also one the handlers would catch
//! and report as "internal error (panic)": a caught panic is still a bug), the
//! probe answers API 0.1 and touches nothing else, other stages do nothing, every error carries a
//! non-empty message and INVALID_ARGUMENT (INTERNAL only for an unsupported frame size), and a
//! successful f32 simple_add wrote `a + b`.
//!
//! Input layout: handler byte, frame flags, #args, #rets, #attrs, [stage], then per buffer
//! `[entry flags, dtype, rank, dims..., data mode]`, per attribute `[name, kind, value...]`, then
//! the data stream that fills buffers (see `fuzz/src/lib.rs` and `fuzz/gen_corpus.py`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use xla_gpu_kernels::host::xla::ffi::testing::{probe_frame, take_error, FrameBuilder, RawBuffer};
use xla_gpu_kernels::host::xla::ffi::{CallFrame, ExtensionBase, FfiError, ARG_BUFFER, STAGE_EXECUTE};
use xla_gpu_kernels::{xla_gpu_paged_attention_host, xla_gpu_simple_add_host};
use xla_gpu_kernels_fuzz::*;

type Handler = unsafe extern "C" fn(*mut CallFrame) -> *mut FfiError;

const NAMES: [&str; 10] =
    ["sm_scale", "sliding_window", "soft_cap", "mask_value", "k_scale", "v_scale", "alpha", "", "sm_scal", "SM_SCALE"];

/// Most multiply-adds a paged attention problem may cost before its data pointers are NULLed.
const MAX_WORK: i128 = 1 << 21;

struct Entry {
    kind: i32,
    struct_size: usize,
    dtype: i32,
    rank: i64,
    dims: Vec<i64>,
    null_dims: bool,
    data_mode: u8,
}

fn read_entry(r: &mut Reader) -> Entry {
    let flags = r.u8();
    let kind = if flags & 0x80 != 0 { (flags & 7) as i32 } else { ARG_BUFFER };
    let struct_size = if flags & 0x40 != 0 {
        40
    } else if flags & 0x20 != 0 {
        56
    } else {
        48
    };
    let dtype = r.dtype();
    let mut rank = r.u8() as i8 as i64;
    if rank > 32 {
        rank %= 33;
    }
    let dims = (0..rank.max(0)).map(|_| r.dim()).collect();
    Entry { kind, struct_size, dtype, rank, dims, null_dims: flags & 0x10 != 0, data_mode: r.u8() }
}

/// Upper bound of the CPU work of a paged attention call on these entries (0 when they cannot be
/// a valid problem, which the handler rejects without computing).
fn paged_attention_work(args: &[Entry]) -> i128 {
    if args.len() < 4 || args[0].dims.len() != 3 || args[1].dims.len() != 4 || args[3].dims.len() != 2 {
        return 0;
    }
    let d = |e: &Entry, i: usize| (e.dims[i].max(0) as i128).min(1 << 40);
    let (rows, heads, hd) = (d(&args[0], 0), d(&args[0], 1), d(&args[0], 2));
    let keys = d(&args[3], 1) * d(&args[1], 1);
    rows.saturating_mul(heads + d(&args[1], 2)).saturating_mul(hd).saturating_mul(keys.min(1 << 31))
}

fn run(data: &[u8]) {
    let mut r = Reader::new(data);
    let handler_byte = r.u8();
    let flags = r.u8();
    let (nargs, nrets, nattrs) = (r.u8() % 9, r.u8() % 4, r.u8() % 8);
    let stage = if flags & 0x40 != 0 { (r.u8() % 5) as i32 } else { STAGE_EXECUTE };
    let handlers: Vec<(&str, Handler)> = {
        let sa: (&str, Handler) = ("simple_add", xla_gpu_simple_add_host);
        let pa: (&str, Handler) = ("paged_attention", xla_gpu_paged_attention_host);
        match handler_byte % 3 {
            0 => vec![sa],
            1 => vec![pa],
            _ => vec![sa, pa],
        }
    };

    if flags & 1 != 0 {
        // The metadata probe: api may be NULL, the metadata pointer too.
        for (name, h) in &handlers {
            let fb = FrameBuilder::new();
            let api = if flags & 2 != 0 { std::ptr::null() } else { &*fb.api as *const _ };
            let (mut frame, mut ext, md) = probe_frame(api);
            if flags & 4 != 0 {
                ext.metadata = std::ptr::null_mut();
            }
            let err = unsafe { h(&mut *frame) };
            trace(name, &("probe", err, md.api_version.major_version, md.api_version.minor_version));
            assert!(err.is_null(), "{name}: the probe returned an error");
            if flags & 4 == 0 {
                assert_eq!((md.api_version.major_version, md.api_version.minor_version), (0, 1));
            }
        }
        return;
    }

    let args: Vec<Entry> = (0..nargs).map(|_| read_entry(&mut r)).collect();
    let rets: Vec<Entry> = (0..nrets).map(|_| read_entry(&mut r)).collect();

    let mut fb = FrameBuilder::new();
    for _ in 0..nattrs {
        let n = r.u8();
        let name: Vec<u8> = if n < 0xF0 {
            NAMES[n as usize % NAMES.len()].as_bytes().to_vec()
        } else {
            let len = (r.u8() % 24) as usize;
            r.take(len).to_vec()
        };
        fb = match r.u8() % 5 {
            0 => {
                let dtype = r.dtype();
                fb.raw_scalar(&name, dtype, r.bytes())
            }
            1 => {
                let dtype = r.dtype();
                let len = (r.u8() % 8) as usize * elem_bytes(dtype);
                fb.raw_array(&name, dtype, elem_bytes(dtype), r.take(len))
            }
            2 => {
                let len = (r.u8() % 32) as usize;
                fb.raw_string(&name, r.take(len))
            }
            3 => fb.raw_dictionary(&name),
            _ => {
                let mut kind = r.u8() as i32;
                if (1..=4).contains(&kind) {
                    kind += 4;
                }
                fb.raw_kind(&name, kind)
            }
        };
    }

    let too_costly = handlers.iter().any(|(n, _)| *n == "paged_attention") && paged_attention_work(&args) > MAX_WORK;
    let mut stream = Reader::new(r.rest());
    let mut total = 0usize;
    let mut buffers: Vec<Option<HostBuffer>> = vec![];
    for e in args.iter().chain(rets.iter()) {
        let bytes = declared_elements(e.rank, &e.dims).and_then(|n| n.checked_mul(elem_bytes(e.dtype)));
        let backed = match bytes {
            Some(b)
                if e.data_mode & 3 != 1
                    && !too_costly
                    && b <= MAX_BUFFER_BYTES
                    && total + b <= 4 * MAX_BUFFER_BYTES =>
            {
                total += b;
                let mut buf = HostBuffer::new(b, (e.data_mode & 3 == 2) as usize);
                fill(buf.bytes_mut(), e.data_mode >> 2, &mut stream);
                Some(buf)
            }
            _ => None,
        };
        buffers.push(backed);
    }
    for (i, e) in args.iter().chain(rets.iter()).enumerate() {
        let data = buffers[i].as_mut().map_or(std::ptr::null_mut(), |b| b.ptr());
        let raw = RawBuffer {
            struct_size: e.struct_size,
            dtype_code: e.dtype,
            data,
            rank: e.rank,
            dims: if e.null_dims { None } else { Some(&e.dims) },
        };
        fb = if i < args.len() { fb.raw_arg(e.kind, raw) } else { fb.raw_ret(e.kind, raw) };
    }

    fb.stage = stage;
    if flags & 0x80 != 0 {
        fb.api.struct_size = 88; // the smallest table holding Error_Create and Stream_Get
    }
    let mut other_ext = ExtensionBase { struct_size: 24, extension_type: 2, next: std::ptr::null_mut() };
    for (name, h) in &handlers {
        let frame = fb.frame();
        unsafe {
            if flags & 8 != 0 {
                (*frame).extension_start = &mut other_ext; // not the metadata extension: ignored
            }
            if flags & 0x10 != 0 {
                (*frame).struct_size = 160;
            } else if flags & 0x20 != 0 {
                (*frame).struct_size = 176;
            }
        }
        let err = unsafe { take_error(h(frame)) };
        trace(name, &err);
        if stage != STAGE_EXECUTE && flags & 0x10 == 0 {
            assert!(err.is_none(), "{name}: stage {stage} must do nothing, got {err:?}");
            continue;
        }
        match err {
            Some((code, msg)) => {
                check_message(name, &msg);
                let frame_size = msg.starts_with("unsupported XLA_FFI_CallFrame size");
                assert!(code == 3 || (code == 13 && frame_size), "{name}: error code {code} for {msg:?}");
            }
            None => {
                assert!(flags & 0x10 == 0, "{name}: accepted a frame of size 160");
                if *name == "simple_add" && handlers.len() == 1 {
                    check_f32_sum(&args, &buffers);
                }
            }
        }
    }
}

/// After a successful simple_add on f32: out[i] == a[i] + b[i] bit for bit (NaN for NaN).
fn check_f32_sum(args: &[Entry], buffers: &[Option<HostBuffer>]) {
    if args[0].dtype != 11 {
        return;
    }
    let (Some(a), Some(b), Some(out)) = (&buffers[0], &buffers[1], &buffers[2]) else { return };
    let f = |buf: &HostBuffer, i: usize| f32::from_le_bytes(buf.bytes()[4 * i..4 * i + 4].try_into().unwrap());
    for i in 0..out.bytes().len() / 4 {
        let (want, got) = (f(a, i) + f(b, i), f(out, i));
        assert!(want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()), "element {i}: {got} != {want}");
    }
}

fuzz_target!(|data: &[u8]| run(data));
