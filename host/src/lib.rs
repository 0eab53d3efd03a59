//! Host side of xla-gpu-kernels, in layers (dependencies point down the list):
//! - [`runtime`]: CUDA driver access through `cudarc` (dynamically loaded), PTX modules loaded once
//!   per CUDA context, launches on a foreign `CUstream`;
//! - [`ops`]: each op's validation (static shapes, dtypes, attributes), its CUDA launch and its
//!   CPU implementation;
//! - [`xla`]: the XLA custom-call ABIs (typed FFI structs and handlers, legacy opaque and status);
//! - [`torch`]: the torch ops' kernels, registered with torch's dispatcher through libtorch's
//!   stable C ABI;
//! - [`capi`]: a plain C entry point per op for callers that are not XLA (the torch ops' Python
//!   fallback, the JAX front end's queries) and the torch registration.
//!
//! The exported symbols themselves live in the root crate, which owns the embedded PTX.

pub mod capi;
pub mod dtype;
pub mod error;
pub mod ops;
pub mod runtime;
pub mod torch;
pub mod xla;

pub use dtype::DType;
pub use error::{Error, Result};
