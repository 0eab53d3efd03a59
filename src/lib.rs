//! xla-gpu-kernels: GPU kernels written in pure Rust, compiled to PTX by cargo (`build.rs`), and
//! exported from one shared library as XLA custom calls.
//!
//! This crate is the top of the stack: it embeds the kernels (PTX and cubins), owns the one
//! [`KERNELS`] module store,
//! and exports the C symbols XLA (and the Python package) resolve. All logic lives below it:
//! `kernels-gpu` (device code) → `xla-gpu-kernels-host` (runtime, ops, ABI) → here.
//!
//! Exported symbols:
//! | symbol | ABI | registration |
//! |---|---|---|
//! | `xla_gpu_simple_add_cuda`, `xla_gpu_simple_add_host` | typed XLA FFI (HLO api_version 4) | `register_ffi_target(..., api_version=1)` |
//! | `xla_gpu_paged_attention_cuda`, `xla_gpu_paged_attention_host` | typed XLA FFI | same |
//! | `XlaGpuSimpleAdd` | legacy, HLO api_version 1 (no status) | `register_ffi_target(..., api_version=0)` / torch_xla |
//! | `XlaGpuSimpleAddStatus`, `XlaGpuPagedAttention` | legacy, HLO api_version 2 (status) | same |
//! | `xgk_simple_add`, `xgk_paged_attention`, `xgk_paged_attention_workspace_bytes`, `xgk_launch_count`, `xgk_version` | plain C (torch ops' fallback and the JAX front end via ctypes) | — |
//! | `xgk_torch_register` | plain C: registers the torch ops' kernels through libtorch's stable C ABI | called by `xla_gpu_kernels.torch` |

use std::ffi::{c_char, c_void};

use host::capi::{XgkPagedAttentionAttrs, XgkTensor};
use host::runtime::{KernelImages, KernelModule};
use host::xla::ffi::{CallFrame, FfiError};
use host::xla::handlers;
pub use xla_gpu_kernels_host as host;

/// The kernels' PTX images, most specific first (built by `build.rs` from `kernels-gpu`, one per
/// architecture of `XGK_CUDA_ARCHS`; default sm_90a, then the portable sm_80), NUL-terminated and
/// laid out one kernel after another for loading kernel by kernel.
pub static PTX_IMAGES: &[host::runtime::PtxImage] = include!(concat!(env!("OUT_DIR"), "/ptx_images.rs"));

/// The kernels' native code: one cubin per architecture of `XGK_CUBIN_ARCHS` (default sm_90a,
/// sm_89, sm_86, sm_80), compiled from the PTX by the pinned ptxas at build time.
pub static CUBIN_IMAGES: &[host::runtime::CubinImage] = include!(concat!(env!("OUT_DIR"), "/cubin_images.rs"));

/// The process-wide module store: per CUDA context, the most specific code that runs on its
/// device (a cubin, else PTX).
pub static KERNELS: KernelModule = KernelModule::new(KernelImages { ptx: PTX_IMAGES, cubins: CUBIN_IMAGES });

/// Library version and kernel images, e.g. `xla-gpu-kernels 0.2.0 (cubin sm_90a, sm_89, sm_86,
/// sm_80 by ptxas V13.0.88; ptx sm_90a, sm_80)`.
#[unsafe(no_mangle)]
pub extern "C" fn xgk_version() -> *const c_char {
    concat!(
        "xla-gpu-kernels ",
        env!("CARGO_PKG_VERSION"),
        " (cubin ",
        env!("XGK_CUBIN_ARCH_LIST"),
        " by ptxas ",
        env!("XGK_CUBIN_PTXAS"),
        "; ptx ",
        env!("XGK_PTX_ARCHS"),
        ")\0"
    )
    .as_ptr() as *const c_char
}

/// Typed FFI handler: `xla_gpu_simple_add` on CUDA.
///
/// # Safety
/// Called by XLA with its call frame.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xla_gpu_simple_add_cuda(frame: *mut CallFrame) -> *mut FfiError {
    handlers::simple_add_cuda(&KERNELS, frame)
}

/// Typed FFI handler: `xla_gpu_simple_add` on Host (CPU).
///
/// # Safety
/// Called by XLA with its call frame.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xla_gpu_simple_add_host(frame: *mut CallFrame) -> *mut FfiError {
    handlers::simple_add_host(frame)
}

/// Typed FFI handler: `xla_gpu_paged_attention` on CUDA.
///
/// # Safety
/// Called by XLA with its call frame.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xla_gpu_paged_attention_cuda(frame: *mut CallFrame) -> *mut FfiError {
    handlers::paged_attention_cuda(&KERNELS, frame)
}

/// Typed FFI handler: `xla_gpu_paged_attention` on Host (CPU).
///
/// # Safety
/// Called by XLA with its call frame.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xla_gpu_paged_attention_host(frame: *mut CallFrame) -> *mut FfiError {
    handlers::paged_attention_host(frame)
}

/// Legacy GPU custom call, HLO api_version 1 (ORIGINAL): buffers `[a, b, out]`, opaque
/// `xgk1;op=simple_add;dtype=<f32|f16|bf16>;n=<count>`. Errors cannot be reported through this ABI:
/// they are printed to stderr and nothing is launched.
///
/// # Safety
/// Called by XLA with a stream, the buffer table and the opaque.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn XlaGpuSimpleAdd(
    stream: *mut c_void,
    buffers: *mut *mut c_void,
    opaque: *const c_char,
    opaque_len: usize,
) {
    handlers::simple_add_legacy(&KERNELS, stream as _, buffers, opaque, opaque_len, std::ptr::null_mut())
}

/// Legacy GPU custom call, HLO api_version 2 (STATUS_RETURNING) variant of [`XlaGpuSimpleAdd`]:
/// errors fail the XLA execution with our message.
///
/// # Safety
/// Called by XLA with a stream, the buffer table, the opaque and a status.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn XlaGpuSimpleAddStatus(
    stream: *mut c_void,
    buffers: *mut *mut c_void,
    opaque: *const c_char,
    opaque_len: usize,
    status: *mut c_void,
) {
    handlers::simple_add_legacy(&KERNELS, stream as _, buffers, opaque, opaque_len, status)
}

/// Legacy GPU custom call (api_version 2) for ragged paged attention: buffers `[q, kv_pages,
/// kv_lens, page_indices, cu_q_lens, num_seqs, out]`; the opaque carries shapes and attributes
/// (`host::xla::legacy` documents the format).
///
/// # Safety
/// Called by XLA with a stream, the buffer table, the opaque and a status.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn XlaGpuPagedAttention(
    stream: *mut c_void,
    buffers: *mut *mut c_void,
    opaque: *const c_char,
    opaque_len: usize,
    status: *mut c_void,
) {
    handlers::paged_attention_legacy(&KERNELS, stream as _, buffers, opaque, opaque_len, status)
}

/// C API: `out = a + b`; `platform` 0 = CPU pointers, 1 = CUDA pointers on `stream`.
/// Returns 0, or 1 (invalid argument) / 2 (other failure) with a NUL-terminated message in `err`.
///
/// # Safety
/// See `host::capi::simple_add`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xgk_simple_add(
    platform: i32,
    stream: *mut c_void,
    tensors: *const XgkTensor,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    host::capi::simple_add(&KERNELS, platform, stream as _, tensors, err, err_len)
}

/// C API: ragged paged attention; tensors `[q, kv_pages, kv_lens, page_indices, cu_q_lens,
/// num_seqs, out]`; `workspace` a device buffer of `workspace_bytes` bytes (see
/// `xgk_paged_attention_workspace_bytes`), or `workspace_bytes` = `SIZE_MAX` for driver-pool
/// scratch per call. Returns 0, or 1 (invalid
/// argument) / 2 (other failure) with a message in `err`.
///
/// # Safety
/// See `host::capi::paged_attention`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn xgk_paged_attention(
    platform: i32,
    stream: *mut c_void,
    tensors: *const XgkTensor,
    attrs: *const XgkPagedAttentionAttrs,
    workspace: *mut c_void,
    workspace_bytes: usize,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    host::capi::paged_attention(
        &KERNELS,
        platform,
        stream as _,
        tensors,
        attrs,
        workspace,
        workspace_bytes,
        err,
        err_len,
    )
}

/// C API: the workspace bytes a paged attention call of these shapes needs on CUDA device
/// `device` (-1: CPU, none), written to `*bytes`. Data pointers of `tensors` are not read.
///
/// # Safety
/// See `host::capi::paged_attention_workspace_bytes`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xgk_paged_attention_workspace_bytes(
    device: i32,
    tensors: *const XgkTensor,
    attrs: *const XgkPagedAttentionAttrs,
    bytes: *mut u64,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    host::capi::paged_attention_workspace_bytes(&KERNELS, device, tensors, attrs, bytes, err, err_len)
}

/// Registers the kernels of `torch.ops.xla_gpu.{simple_add, paged_attention}` (CPU, and CUDA when
/// torch has it) with the libtorch loaded from the folder `torch_lib_dir`, through its stable C
/// ABI; the schemas must be defined first. Writes the keys registered to `*keys` (1 = CPU,
/// 2 = CUDA). Returns 0, or 2 with the message in `err` (libtorch without the stable ABI).
///
/// # Safety
/// See `host::capi::torch_register`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xgk_torch_register(
    torch_lib_dir: *const c_char,
    keys: *mut u32,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    host::capi::torch_register(&KERNELS, torch_lib_dir, keys, err, err_len)
}

/// Kernels enqueued by the library so far in this process (a diagnostic: calls replayed from a
/// CUDA graph or an XLA command buffer launch nothing through the library).
#[unsafe(no_mangle)]
pub extern "C" fn xgk_launch_count() -> u64 {
    host::runtime::launch_count()
}

/// Re-reads the launch settings from the environment (`XGK_RPA_KERNEL`, `XGK_RPA_COPY_HINT`),
/// which are otherwise read once per process. Returns 0, or 1 with the message in `err` when a
/// value is invalid.
///
/// # Safety
/// `err` is null or writable for `err_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xgk_reload_settings(err: *mut c_char, err_len: usize) -> i32 {
    host::capi::reload_settings(err, err_len)
}
