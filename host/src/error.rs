//! The one error type of the host crate.

use cudarc::driver::{result::DriverError, sys::CUresult};

/// Everything that can go wrong between XLA handing us buffers and the kernel being enqueued.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The inputs do not satisfy the op's contract (shape, dtype, attribute, opaque string).
    #[error("{0}")]
    InvalidArgument(String),
    /// No CUDA driver library could be loaded on this machine.
    #[error("the CUDA driver (libcuda.so) could not be loaded: no NVIDIA driver on this machine?")]
    NoDriver,
    /// The CUDA driver library loaded but cannot serve the library (an entry point is missing, or
    /// `cuInit` failed).
    #[error("the CUDA driver cannot be used: {0}")]
    Driver(String),
    /// A CUDA driver call failed.
    #[error("CUDA error in {call}: {code:?} ({message})")]
    Cuda { call: &'static str, code: CUresult, message: String },
    /// A libtorch entry point failed or could not be found (the torch kernels' registration).
    #[error("torch: {0}")]
    Torch(String),
    /// A Rust panic was caught at an exported boundary (a bug: please report it).
    #[error("internal error (panic): {0}")]
    Panic(String),
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// `Error::InvalidArgument` from anything printable.
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }

    /// Wraps a driver error with the name of the call that failed.
    pub fn cuda(call: &'static str, err: DriverError) -> Self {
        let message = err.error_string().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| "unknown".into());
        Error::Cuda { call, code: err.0, message }
    }
}

/// Shorthand: `Err(Error::InvalidArgument(format!(...)))`.
#[macro_export]
macro_rules! invalid {
    ($($arg:tt)*) => { return Err($crate::error::Error::InvalidArgument(format!($($arg)*))) };
}

/// `invalid!` unless the condition holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => { if !$cond { $crate::invalid!($($arg)*) } };
}
