//! Custom-call handlers: decode what XLA passes (call frame or buffers + opaque), validate it into
//! an op, then launch on XLA's stream (CUDA) or compute on the CPU (Host). The root crate's
//! exported symbols are one-line calls into these.

use std::ffi::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use cudarc::driver::sys::CUstream;

use super::ffi::{self, Call, FfiError};
use super::legacy::{self, Opaque};
use crate::dtype::{DType, TensorRef};
use crate::error::{Error, Result};
use crate::ops::paged_attention::{self, Attributes, DeviceBuffers, PagedAttention, Workspace};
use crate::ops::simple_add::SimpleAdd;
use crate::runtime::KernelModule;

/// Attribute names of `xla_gpu_paged_attention`.
pub const PAGED_ATTENTION_ATTRIBUTES: [&str; 6] =
    ["k_scale", "mask_value", "sliding_window", "sm_scale", "soft_cap", "v_scale"];

fn simple_add_from_call<'a>(call: &Call<'a>) -> Result<(SimpleAdd, [TensorRef<'a>; 3])> {
    call.expect_arity("simple_add", 2, 1)?;
    call.only_attributes("simple_add", &[])?;
    let (a, b, out) = (call.arg(0)?, call.arg(1)?, call.ret(0)?);
    Ok((SimpleAdd::from_tensors(&a, &b, &out)?, [a, b, out]))
}

/// Typed FFI handler body of `xla_gpu_simple_add` on CUDA.
///
/// # Safety
/// `frame` must come from XLA (see [`ffi::handle`]).
pub unsafe fn simple_add_cuda(kernels: &KernelModule, frame: *mut ffi::CallFrame) -> *mut FfiError {
    // Capture-safe: one launch sized from the static shape, no allocation, no host reads.
    ffi::handle_with_traits(frame, ffi::TRAIT_COMMAND_BUFFER_COMPATIBLE, |call| {
        let (op, [a, b, out]) = simple_add_from_call(call)?;
        let stream = call.stream()? as CUstream;
        op.launch_cuda(kernels, stream, a.data, b.data, out.data)
    })
}

/// Typed FFI handler body of `xla_gpu_simple_add` on Host (CPU).
///
/// # Safety
/// `frame` must come from XLA (see [`ffi::handle`]).
pub unsafe fn simple_add_host(frame: *mut ffi::CallFrame) -> *mut FfiError {
    ffi::handle(frame, |call| {
        let (op, [a, b, out]) = simple_add_from_call(call)?;
        run_simple_add_cpu(op, a.data, b.data, out.data)
    })
}

/// Runs the CPU simple_add over host pointers.
///
/// # Safety
/// `a`, `b` and `out` must be host allocations of `op.len` elements of `op.dtype`.
pub unsafe fn run_simple_add_cpu(op: SimpleAdd, a: *mut c_void, b: *mut c_void, out: *mut c_void) -> Result<()> {
    let bytes = op.len * op.dtype.size_bytes().unwrap(); // exact: SimpleAdd bounds the bytes
    let name = "simple_add";
    op.run_cpu(
        host_bytes(name, "a", a, bytes)?,
        host_bytes(name, "b", b, bytes)?,
        host_bytes_mut(name, "out", out, bytes)?,
    )
}

/// Validates a simple_add opaque (`xgk1;op=simple_add;dtype=..;n=..`) into the op.
pub fn simple_add_from_opaque(opaque: &[u8]) -> Result<SimpleAdd> {
    let o = Opaque::parse(opaque)?;
    o.expect("simple_add", &SIMPLE_ADD_OPAQUE_KEYS)?;
    let dtype = SimpleAdd::check_dtype(o.dtype("dtype")?)?;
    let len = usize::try_from(o.u64("n")?).map_err(|_| Error::invalid("n is too large"))?;
    SimpleAdd::new(dtype, len)
}

/// Legacy (api_version 1 and 2) body of `XlaGpuSimpleAdd`: buffers `[a, b, out]`.
///
/// # Safety
/// Arguments as XLA passes them to a legacy GPU custom call; `status` may be null (api_version 1).
pub unsafe fn simple_add_legacy(
    kernels: &KernelModule,
    stream: CUstream,
    buffers: *mut *mut c_void,
    opaque: *const c_char,
    opaque_len: usize,
    status: *mut c_void,
) {
    legacy_call(status, || {
        let op = simple_add_from_opaque(opaque_bytes(opaque, opaque_len))?;
        let [a, b, out] = legacy_buffers::<3>(buffers)?;
        op.launch_cuda(kernels, stream, a, b, out)
    })
}

/// Results of the typed `xla_gpu_paged_attention`: the output, then a `u8[N]` workspace that XLA
/// allocates with the other buffers (split-KV partials, the tiled kernel's plan), sized by
/// `xgk_paged_attention_workspace_bytes` from the static shapes. Taking it from XLA rather than
/// the driver keeps the call free of allocations, so it can be recorded into command buffers.
const PAGED_ATTENTION_RESULTS: usize = 2;

fn paged_attention_from_call<'a>(call: &Call<'a>) -> Result<(PagedAttention, [TensorRef<'a>; 7], Workspace)> {
    call.expect_arity("paged_attention", 6, PAGED_ATTENTION_RESULTS)?;
    call.only_attributes("paged_attention", &PAGED_ATTENTION_ATTRIBUTES)?;
    let attrs = Attributes {
        sm_scale: call.attr_f32("sm_scale")?.unwrap_or(1.0),
        sliding_window: call.attr_i64("sliding_window")?.map(Attributes::sliding_window_from_i64).transpose()?,
        soft_cap: call.attr_f32("soft_cap")?,
        mask_value: call.attr_f32("mask_value")?,
        k_scale: call.attr_f32("k_scale")?,
        v_scale: call.attr_f32("v_scale")?,
    };
    let t = [call.arg(0)?, call.arg(1)?, call.arg(2)?, call.arg(3)?, call.arg(4)?, call.arg(5)?, call.ret(0)?];
    let op = PagedAttention::from_tensors(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], attrs)?;
    let ws = call.ret(1)?;
    if ws.dtype != DType::U8 || ws.dims.len() != 1 || ws.dims[0] < 0 {
        return Err(Error::invalid(format!(
            "paged_attention: result 1 must be the u8[N] workspace, got {} with dims {:?}",
            ws.dtype, ws.dims
        )));
    }
    let workspace = Workspace::Given { ptr: ws.data as u64, bytes: ws.dims[0] as usize };
    Ok((op, t, workspace))
}

fn device_buffers(t: &[*mut c_void; 7], workspace: Workspace) -> DeviceBuffers {
    DeviceBuffers::from_ordered(*t, workspace)
}

/// Typed FFI handler body of `xla_gpu_paged_attention` on CUDA.
///
/// # Safety
/// `frame` must come from XLA (see [`ffi::handle`]).
pub unsafe fn paged_attention_cuda(kernels: &KernelModule, frame: *mut ffi::CallFrame) -> *mut FfiError {
    // Capture-safe: the launches depend on the static shapes and the stream's device only, the
    // temporary memory is XLA's workspace result, and nothing reads device data on the host.
    ffi::handle_with_traits(frame, ffi::TRAIT_COMMAND_BUFFER_COMPATIBLE, |call| {
        let (op, t, workspace) = paged_attention_from_call(call)?;
        let stream = call.stream()? as CUstream;
        paged_attention::launch_cuda(kernels, stream, &op, device_buffers(&t.map(|x| x.data), workspace))
    })
}

/// Typed FFI handler body of `xla_gpu_paged_attention` on Host (CPU).
///
/// # Safety
/// `frame` must come from XLA (see [`ffi::handle`]).
pub unsafe fn paged_attention_host(frame: *mut ffi::CallFrame) -> *mut FfiError {
    ffi::handle(frame, |call| {
        let (op, t, _workspace) = paged_attention_from_call(call)?;
        run_paged_attention_cpu(&op, t.map(|x| x.data))
    })
}

/// Runs the CPU implementation over host pointers of validated shapes.
///
/// # Safety
/// Every pointer must be a host allocation of the shape and dtype `op` was validated against.
pub unsafe fn run_paged_attention_cpu(op: &PagedAttention, t: [*mut c_void; 7]) -> Result<()> {
    // Exact: `PagedAttention::from_tensors` bounds every buffer's bytes.
    let (q_elems, kv_elems, table) = op.element_counts();
    let qb = q_elems * op.q_dtype.size_bytes().unwrap();
    let kvb = kv_elems * op.kv_dtype.size_bytes().unwrap();
    let seqs = op.max_num_seqs as usize;
    let name = "paged_attention";
    paged_attention::run_cpu(
        op,
        host_bytes(name, "q", t[0], qb)?,
        host_bytes(name, "kv_pages", t[1], kvb)?,
        host_i32(name, "kv_lens", t[2], seqs)?,
        host_i32(name, "page_indices", t[3], table)?,
        host_i32(name, "cu_q_lens", t[4], seqs + 1)?,
        host_i32(name, "num_seqs", t[5], 1)?,
        host_bytes_mut(name, "out", t[6], qb)?,
    )
}

/// Keys of the simple_add opaque.
pub const SIMPLE_ADD_OPAQUE_KEYS: [&str; 2] = ["dtype", "n"];

/// Keys of the paged attention opaque.
pub const PAGED_ATTENTION_OPAQUE_KEYS: [&str; 10] = [
    "q",
    "kv",
    "max_num_seqs",
    "pages_per_seq",
    "sm_scale",
    "sliding_window",
    "soft_cap",
    "mask_value",
    "k_scale",
    "v_scale",
];

/// Validates a paged attention opaque into the op (buffers carry no shapes in the legacy ABI).
pub fn paged_attention_from_opaque(opaque: &[u8]) -> Result<PagedAttention> {
    let o = Opaque::parse(opaque)?;
    o.expect("paged_attention", &PAGED_ATTENTION_OPAQUE_KEYS)?;
    let (q_dtype, q_dims) = o.shape("q")?;
    let (kv_dtype, kv_dims) = o.shape("kv")?;
    // Counts must fit the u32 the op holds them in (and `max_num_seqs + 1` must not overflow).
    let count = |key: &str| -> Result<i64> {
        let v = o.u64(key)?;
        u32::try_from(v)
            .map(i64::from)
            .map_err(|_| Error::invalid(format!("paged_attention: opaque field '{key}' = {v} is out of range")))
    };
    let max_num_seqs = count("max_num_seqs")?;
    let pages_per_seq = count("pages_per_seq")?;
    let attrs = Attributes {
        sm_scale: o.f32_opt("sm_scale")?.unwrap_or(1.0),
        sliding_window: o
            .u64_opt("sliding_window")?
            .map(|w| match i64::try_from(w) {
                Ok(w) => Attributes::sliding_window_from_i64(w),
                Err(_) => Err(Error::invalid(format!("sliding_window {w} is too large"))),
            })
            .transpose()?,
        soft_cap: o.f32_opt("soft_cap")?,
        mask_value: o.f32_opt("mask_value")?,
        k_scale: o.f32_opt("k_scale")?,
        v_scale: o.f32_opt("v_scale")?,
    };
    let null = std::ptr::null_mut();
    let t = |dtype, dims| TensorRef { data: null, dtype, dims };
    let seq_dims = [max_num_seqs];
    let table_dims = [max_num_seqs, pages_per_seq];
    let cu_dims = [max_num_seqs + 1];
    PagedAttention::from_tensors(
        &t(q_dtype, &q_dims),
        &t(kv_dtype, &kv_dims),
        &t(DType::S32, &seq_dims),
        &t(DType::S32, &table_dims),
        &t(DType::S32, &cu_dims),
        &t(DType::S32, &[1]),
        &t(q_dtype, &q_dims),
        attrs,
    )
}

/// Legacy (api_version 2) body of `XlaGpuPagedAttention`: buffers `[q, kv_pages, kv_lens,
/// page_indices, cu_q_lens, num_seqs, out]`.
///
/// # Safety
/// Arguments as XLA passes them to a legacy GPU custom call.
pub unsafe fn paged_attention_legacy(
    kernels: &KernelModule,
    stream: CUstream,
    buffers: *mut *mut c_void,
    opaque: *const c_char,
    opaque_len: usize,
    status: *mut c_void,
) {
    legacy_call(status, || {
        let op = paged_attention_from_opaque(opaque_bytes(opaque, opaque_len))?;
        let t = legacy_buffers::<7>(buffers)?;
        // Legacy calls are never recorded into command buffers: driver-pool scratch is safe here.
        paged_attention::launch_cuda(kernels, stream, &op, device_buffers(&t, Workspace::Allocate))
    })
}

/// Runs a legacy call body with panics caught; failures go to the status (or stderr without one).
///
/// # Safety
/// `status` must be null or the call's fresh `XlaCustomCallStatus*` from XLA.
unsafe fn legacy_call(status: *mut c_void, body: impl FnOnce() -> Result<()>) {
    let outcome = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|p| Err(Error::Panic(ffi::panic_message(&*p))));
    if let Err(e) = outcome {
        legacy::set_status_failure(status, &format!("xla-gpu-kernels: {e}"));
    }
}

/// A legacy call's opaque bytes (empty for a NULL or empty one).
///
/// # Safety
/// A non-null `opaque` must point at `len` bytes that stay valid for `'a`.
unsafe fn opaque_bytes<'a>(opaque: *const c_char, len: usize) -> &'a [u8] {
    if opaque.is_null() || len == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(opaque as *const u8, len)
    }
}

/// The first `N` pointers of a legacy call's buffer list; an error for a NULL list or entry.
///
/// # Safety
/// A non-null `buffers` must point at at least `N` readable pointers (XLA's operands then results).
unsafe fn legacy_buffers<const N: usize>(buffers: *mut *mut c_void) -> Result<[*mut c_void; N]> {
    if buffers.is_null() {
        return Err(Error::invalid("no buffers passed"));
    }
    let mut out = [std::ptr::null_mut(); N];
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = *buffers.add(i);
        if slot.is_null() {
            return Err(Error::invalid(format!("buffer {i} is null")));
        }
    }
    Ok(out)
}

/// Whether the host buffer `p` of `bytes` bytes is to be read (false: empty). An error naming the
/// buffer when `p` is NULL (or, for `align` > 1, misaligned) while `bytes` > 0: the slices made
/// from it would be undefined behaviour.
fn host_ptr(op: &str, name: &str, p: *mut c_void, bytes: usize, align: usize) -> Result<bool> {
    if bytes == 0 {
        return Ok(false);
    }
    if p.is_null() {
        return Err(Error::invalid(format!("{op}: {name} is a NULL pointer but its shape needs {bytes} bytes")));
    }
    if !crate::ops::aligned(p, align) {
        return Err(Error::invalid(format!("{op}: {name} data pointer {p:p} is not {align}-byte aligned")));
    }
    Ok(true)
}

/// Host buffer `p` of `len` bytes as a slice (empty for `len` 0); an error for a NULL `p`.
///
/// # Safety
/// A non-null `p` must point at `len` bytes that stay valid, and unwritten, for `'a`.
unsafe fn host_bytes<'a>(op: &str, name: &str, p: *mut c_void, len: usize) -> Result<&'a [u8]> {
    Ok(if host_ptr(op, name, p, len, 1)? { std::slice::from_raw_parts(p as *const u8, len) } else { &[] })
}

/// Host buffer `p` of `len` bytes as a mutable slice (empty for `len` 0); an error for a NULL `p`.
///
/// # Safety
/// A non-null `p` must point at `len` writable bytes that nothing else reads or writes for `'a`.
unsafe fn host_bytes_mut<'a>(op: &str, name: &str, p: *mut c_void, len: usize) -> Result<&'a mut [u8]> {
    Ok(if host_ptr(op, name, p, len, 1)? { std::slice::from_raw_parts_mut(p as *mut u8, len) } else { &mut [] })
}

/// Host buffer `p` of `len` i32s as a slice (empty for `len` 0); an error for a NULL or
/// misaligned `p`.
///
/// # Safety
/// A non-null `p` must point at `len` i32s that stay valid, and unwritten, for `'a`.
unsafe fn host_i32<'a>(op: &str, name: &str, p: *mut c_void, len: usize) -> Result<&'a [i32]> {
    Ok(if host_ptr(op, name, p, len * 4, 4)? { std::slice::from_raw_parts(p as *const i32, len) } else { &[] })
}
