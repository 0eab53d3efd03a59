//! A plain C API per op, for callers that are not XLA (the `torch.library` CUDA and CPU
//! implementations call these through ctypes). Same validation as the custom calls.

use std::ffi::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use cudarc::driver::sys::CUstream;

use crate::dtype::{DType, TensorRef};
use crate::error::{Error, Result};
use crate::ops::paged_attention::{self, Attributes, DeviceBuffers, PagedAttention, Workspace};
use crate::ops::simple_add::SimpleAdd;
use crate::runtime::KernelModule;
use crate::xla::handlers::{run_paged_attention_cpu, run_simple_add_cpu};

/// A tensor as C callers describe it (dtype numbered like `XLA_FFI_DataType`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct XgkTensor {
    pub data: *mut c_void,
    pub dtype: i32,
    pub rank: i64,
    pub dims: *const i64,
}

/// Optional scalars of paged attention; `has_*` = 0 means "not given".
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct XgkPagedAttentionAttrs {
    pub sm_scale: f32,
    pub has_sliding_window: i32,
    pub sliding_window: i64,
    pub has_soft_cap: i32,
    pub soft_cap: f32,
    pub has_mask_value: i32,
    pub mask_value: f32,
    pub has_k_scale: i32,
    pub k_scale: f32,
    pub has_v_scale: i32,
    pub v_scale: f32,
}

/// Where the buffers live.
pub const PLATFORM_CPU: i32 = 0;
pub const PLATFORM_CUDA: i32 = 1;

/// Largest rank a descriptor may declare: `dims` is read only for ranks in `0..=MAX_RANK`.
pub const MAX_RANK: i64 = 64;

/// Reads a descriptor; `name` is the tensor's name in errors. A rank outside `0..=MAX_RANK`, or
/// NULL `dims` with a rank > 0, is an error (checked before `dims` is read).
///
/// # Safety
/// A non-null `t.dims` must point at `t.rank` readable `i64`s that stay valid for `'a`.
unsafe fn tensor<'a>(op: &str, name: &str, t: &XgkTensor) -> Result<TensorRef<'a>> {
    if !(0..=MAX_RANK).contains(&t.rank) {
        return Err(Error::invalid(format!("{op}: {name} has rank {}; expected 0..={MAX_RANK}", t.rank)));
    }
    let dims = if t.rank == 0 {
        &[][..]
    } else if t.dims.is_null() {
        return Err(Error::invalid(format!("{op}: {name} has rank {} but NULL dims", t.rank)));
    } else {
        std::slice::from_raw_parts(t.dims, t.rank as usize)
    };
    Ok(TensorRef { data: t.data, dtype: DType::from_xla(t.dtype), dims })
}

/// Names of the paged attention descriptors, in order.
const PAGED_ATTENTION_TENSORS: [&str; 7] = ["q", "kv_pages", "kv_lens", "page_indices", "cu_q_lens", "num_seqs", "out"];

/// Return code of a rejected input (shape, dtype, attribute).
pub const STATUS_INVALID_ARGUMENT: i32 = 1;
/// Return code of any other failure (CUDA error, no driver, internal).
pub const STATUS_FAILED: i32 = 2;

/// Runs `body`, catching panics; on error writes the message (NUL-terminated, truncated) into
/// `err` and returns [`STATUS_INVALID_ARGUMENT`] or [`STATUS_FAILED`], else 0.
///
/// # Safety
/// A non-null `err` must point at `err_len` writable bytes.
unsafe fn c_call(err: *mut c_char, err_len: usize, body: impl FnOnce() -> Result<()>) -> i32 {
    let outcome =
        catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|p| Err(Error::Panic(crate::xla::ffi::panic_message(&*p))));
    match outcome {
        Ok(()) => 0,
        Err(e) => {
            let code = if matches!(e, Error::InvalidArgument(_)) { STATUS_INVALID_ARGUMENT } else { STATUS_FAILED };
            if !err.is_null() && err_len > 0 {
                let msg = e.to_string();
                let n = msg.len().min(err_len - 1);
                std::ptr::copy_nonoverlapping(msg.as_ptr(), err as *mut u8, n);
                *err.add(n) = 0;
            }
            code
        }
    }
}

/// `out = a + b` on CPU or on `stream` (the legacy default stream, NULL: that of the device
/// holding `out`). `tensors` = `[a, b, out]`.
///
/// # Safety
/// `tensors` points at 3 descriptors whose data match their dtype and dims on `platform`;
/// `err` is null or writable for `err_len` bytes.
pub unsafe fn simple_add(
    kernels: &KernelModule,
    platform: i32,
    stream: CUstream,
    tensors: *const XgkTensor,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    c_call(err, err_len, || {
        if tensors.is_null() {
            return Err(Error::invalid("simple_add: tensors must not be null"));
        }
        let t = std::slice::from_raw_parts(tensors, 3);
        let op = "simple_add";
        let (a, b, out) = (tensor(op, "a", &t[0])?, tensor(op, "b", &t[1])?, tensor(op, "out", &t[2])?);
        let op = SimpleAdd::from_tensors(&a, &b, &out)?;
        match platform {
            PLATFORM_CUDA => op.launch_cuda(kernels, stream, a.data, b.data, out.data),
            PLATFORM_CPU => run_simple_add_cpu(op, a.data, b.data, out.data),
            other => Err(Error::invalid(format!("unknown platform {other}"))),
        }
    })
}

/// Validates the 7 paged attention descriptors and attributes into the op (data not read).
///
/// # Safety
/// `tensors` points at 7 descriptors with readable dims; `attrs` is readable.
unsafe fn paged_attention_op<'a>(
    tensors: *const XgkTensor,
    attrs: *const XgkPagedAttentionAttrs,
) -> Result<(PagedAttention, Vec<TensorRef<'a>>)> {
    if tensors.is_null() || attrs.is_null() {
        return Err(Error::invalid("paged_attention: tensors and attrs must not be null"));
    }
    let t: Vec<TensorRef> = std::slice::from_raw_parts(tensors, 7)
        .iter()
        .zip(PAGED_ATTENTION_TENSORS)
        .map(|(x, name)| tensor("paged_attention", name, x))
        .collect::<Result<_>>()?;
    let a = &*attrs;
    let attrs = Attributes {
        sm_scale: a.sm_scale,
        sliding_window: (a.has_sliding_window != 0)
            .then(|| Attributes::sliding_window_from_i64(a.sliding_window))
            .transpose()?,
        soft_cap: (a.has_soft_cap != 0).then_some(a.soft_cap),
        mask_value: (a.has_mask_value != 0).then_some(a.mask_value),
        k_scale: (a.has_k_scale != 0).then_some(a.k_scale),
        v_scale: (a.has_v_scale != 0).then_some(a.v_scale),
    };
    let op = PagedAttention::from_tensors(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], attrs)?;
    Ok((op, t))
}

/// Ragged paged attention on CPU or on `stream` (the legacy default stream, NULL: that of the
/// device holding `out`). `tensors` = `[q, kv_pages, kv_lens,
/// page_indices, cu_q_lens, num_seqs, out]`. `workspace`: a device buffer of `workspace_bytes`
/// bytes, sized by [`paged_attention_workspace_bytes`] (null with 0 bytes when that is 0), or
/// `workspace_bytes` = [`ALLOCATE_WORKSPACE`] to take temporary memory from the driver's pool per
/// call (not safe to record into a CUDA graph that is nested in another).
///
/// # Safety
/// As [`simple_add`], with 7 descriptors and `attrs` readable; a non-null `workspace` is a device
/// allocation of at least `workspace_bytes` bytes in the stream's context.
#[allow(clippy::too_many_arguments)]
pub unsafe fn paged_attention(
    kernels: &KernelModule,
    platform: i32,
    stream: CUstream,
    tensors: *const XgkTensor,
    attrs: *const XgkPagedAttentionAttrs,
    workspace: *mut c_void,
    workspace_bytes: usize,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    c_call(err, err_len, || {
        let (op, t) = paged_attention_op(tensors, attrs)?;
        let ptrs = [t[0].data, t[1].data, t[2].data, t[3].data, t[4].data, t[5].data, t[6].data];
        match platform {
            PLATFORM_CUDA => paged_attention::launch_cuda(
                kernels,
                stream,
                &op,
                DeviceBuffers::from_ordered(
                    ptrs,
                    if workspace_bytes == ALLOCATE_WORKSPACE {
                        Workspace::Allocate
                    } else {
                        Workspace::Given { ptr: workspace as u64, bytes: workspace_bytes }
                    },
                ),
            ),
            PLATFORM_CPU => run_paged_attention_cpu(&op, ptrs),
            other => Err(Error::invalid(format!("unknown platform {other}"))),
        }
    })
}

/// `workspace_bytes` value asking [`paged_attention`] to allocate its temporary memory itself.
pub const ALLOCATE_WORKSPACE: usize = usize::MAX;

/// Writes to `*bytes` the workspace a paged attention call of these shapes needs on CUDA device
/// `device` (an ordinal; -1: the CPU, which needs none). Descriptors' data may be null.
///
/// # Safety
/// As [`paged_attention`] for `tensors` and `attrs`; `bytes` is writable.
pub unsafe fn paged_attention_workspace_bytes(
    kernels: &KernelModule,
    device: i32,
    tensors: *const XgkTensor,
    attrs: *const XgkPagedAttentionAttrs,
    bytes: *mut u64,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    c_call(err, err_len, || {
        let (op, _) = paged_attention_op(tensors, attrs)?;
        let n = if device < 0 { 0 } else { paged_attention::workspace_bytes(kernels, device, &op)? };
        if bytes.is_null() {
            return Err(Error::invalid("bytes must not be null"));
        }
        *bytes = n as u64;
        Ok(())
    })
}

/// Re-reads the launch settings from the environment (see
/// [`paged_attention::reload_settings`]).
///
/// # Safety
/// `err` is null or writable for `err_len` bytes.
pub unsafe fn reload_settings(err: *mut c_char, err_len: usize) -> i32 {
    c_call(err, err_len, || paged_attention::reload_settings().map(|_| ()))
}

/// Bit of [`torch_register`]'s `keys` for the CPU kernels.
pub const TORCH_KEY_CPU: u32 = 1;
/// Bit of [`torch_register`]'s `keys` for the CUDA kernels.
pub const TORCH_KEY_CUDA: u32 = 2;

/// Registers the torch ops' kernels with the libtorch loaded from `torch_lib_dir` (see
/// [`crate::torch::register`]); writes the dispatch keys registered to `*keys`
/// ([`TORCH_KEY_CPU`] | [`TORCH_KEY_CUDA`]).
///
/// # Safety
/// `torch_lib_dir` is a NUL-terminated path; `keys` is writable; `err` as in [`simple_add`].
pub unsafe fn torch_register(
    kernels: &'static KernelModule,
    torch_lib_dir: *const c_char,
    keys: *mut u32,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    c_call(err, err_len, || {
        if torch_lib_dir.is_null() || keys.is_null() {
            return Err(Error::invalid("torch_register: torch_lib_dir and keys must not be null"));
        }
        let dir = std::ffi::CStr::from_ptr(torch_lib_dir).to_string_lossy().into_owned();
        let registered = crate::torch::register(kernels, std::path::Path::new(&dir))?;
        *keys = registered
            .iter()
            .map(|k| match *k {
                "CPU" => TORCH_KEY_CPU,
                _ => TORCH_KEY_CUDA,
            })
            .fold(0, |a, b| a | b);
        Ok(())
    })
}
