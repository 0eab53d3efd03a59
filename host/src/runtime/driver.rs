//! The CUDA driver as the runtime meets it: loading libcuda and checking its entry points once
//! ([`ensure_driver`]), the context of a stream XLA hands us, the device of a buffer, whether a
//! stream is being captured, and a context made current for a scope.

use std::ffi::c_void;
use std::sync::OnceLock;

use cudarc::driver::result as cu;
use cudarc::driver::sys::{self, CUcontext, CUstream};

use crate::error::{Error, Result};

/// Every driver entry point the library calls (through cudarc, which looks each up on first use
/// and panics when one is missing): checked once, up front, so an older or partial driver is a
/// clear error rather than a caught panic in the middle of a launch.
const REQUIRED_ENTRY_POINTS: [&str; 23] = [
    "cuInit",
    "cuGetErrorString",
    "cuGetErrorName",
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuCtxGetCurrent",
    "cuCtxGetDevice",
    "cuCtxGetId",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuStreamGetCtx",
    "cuPointerGetAttribute",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuFuncSetAttribute",
    "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    "cuOccupancyMaxActiveClusters",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuDriverGetVersion",
];

/// Why the driver cannot be used (kept for the process: the answer does not change).
#[derive(Clone, Debug)]
enum DriverProblem {
    /// No libcuda at all.
    Absent,
    /// libcuda without an entry point we need, or `cuInit` failed.
    Unusable(String),
}

/// Loads libcuda, checks its entry points and calls `cuInit`, once per process.
pub fn ensure_driver() -> Result<()> {
    static INIT: OnceLock<std::result::Result<(), DriverProblem>> = OnceLock::new();
    let outcome = INIT.get_or_init(|| {
        // SAFETY: only probes whether the library can be opened.
        if !unsafe { sys::is_culib_present() } {
            return Err(DriverProblem::Absent);
        }
        // SAFETY: the library is present (checked above); `get` only looks symbols up.
        let lib = unsafe { sys::culib() };
        if let Some(missing) =
            REQUIRED_ENTRY_POINTS.iter().find(|name| unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_err())
        {
            return Err(DriverProblem::Unusable(format!(
                "libcuda has no entry point {missing} (a driver older than CUDA 12.0?)"
            )));
        }
        cu::init().map_err(|e| DriverProblem::Unusable(Error::cuda("cuInit", e).to_string()))
    });
    match outcome {
        Ok(()) => Ok(()),
        Err(DriverProblem::Absent) => Err(Error::NoDriver),
        Err(DriverProblem::Unusable(msg)) => Err(Error::Driver(msg.clone())),
    }
}

/// The context that owns `stream` (the current context for the legacy NULL stream).
///
/// # Safety
/// As [`KernelModule::for_stream`](super::KernelModule::for_stream).
pub(super) unsafe fn stream_context(stream: CUstream) -> Result<CUcontext> {
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; the stream is live (caller's contract).
    unsafe { sys::cuStreamGetCtx(stream, &mut ctx) }.result().map_err(|e| Error::cuda("cuStreamGetCtx", e))?;
    if ctx.is_null() {
        return Err(Error::invalid("the stream has no CUDA context"));
    }
    Ok(ctx)
}

/// The ordinal of the CUDA device whose memory holds `data` (`cuPointerGetAttribute`); an error
/// for a host pointer or one the driver does not know.
///
/// # Safety
/// The driver only looks the address up; any value is safe to pass.
pub(super) unsafe fn device_holding(data: *const c_void) -> Result<i32> {
    let mut ordinal: i32 = -1;
    // SAFETY: out-pointer to a local of the attribute's type (int).
    unsafe {
        sys::cuPointerGetAttribute(
            (&mut ordinal as *mut i32).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            data as sys::CUdeviceptr,
        )
    }
    .result()
    .map_err(|e| Error::cuda("cuPointerGetAttribute (the device of a buffer on the legacy default stream)", e))?;
    if ordinal < 0 {
        return Err(Error::invalid("a buffer on the legacy default stream is not in any CUDA device's memory"));
    }
    Ok(ordinal)
}

/// Whether `stream` is being captured into a CUDA graph (`cuStreamIsCapturing`: active, or a
/// capture already invalidated, which fails at its end whatever is enqueued). Work enqueued under
/// capture is paid for in host time once, at the capture, and in device time at every replay.
///
/// # Safety
/// As [`KernelModule::for_stream`](super::KernelModule::for_stream).
pub unsafe fn stream_is_capturing(stream: CUstream) -> Result<bool> {
    // SAFETY: the stream is live (caller's contract).
    let status = unsafe { cu::stream::is_capturing(stream) }.map_err(|e| Error::cuda("cuStreamIsCapturing", e))?;
    Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// Makes a context current for a scope, restoring the previous one on drop.
pub(super) struct ContextGuard {
    pushed: bool,
}

impl ContextGuard {
    pub(super) fn push(ctx: CUcontext) -> Result<Self> {
        let current = cu::ctx::get_current().map_err(|e| Error::cuda("cuCtxGetCurrent", e))?;
        if current == Some(ctx) {
            return Ok(ContextGuard { pushed: false });
        }
        // SAFETY: ctx is a live context obtained from the driver.
        unsafe { sys::cuCtxPushCurrent_v2(ctx) }.result().map_err(|e| Error::cuda("cuCtxPushCurrent", e))?;
        Ok(ContextGuard { pushed: true })
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        if self.pushed {
            let mut popped = std::ptr::null_mut();
            // SAFETY: pops the context pushed in `push`.
            let _ = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
        }
    }
}
