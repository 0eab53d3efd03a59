//! Device crate of xla-gpu-kernels: every GPU kernel, written in `#![no_std]` Rust.
//!
//! The root `build.rs` compiles this crate for `nvptx64-nvidia-cuda` (`-Zbuild-std=core`, our own
//! bitcode link step) and embeds the PTX in the shared library. The API below mirrors Rust-CUDA's
//! `cuda_std` (`thread`, `warp`, `shared`, `#[kernel]`) so that a later move to `cuda_builder` is
//! mechanical. The crate also compiles for the host: device-only functions then panic, and the
//! target-independent parts ([`num`], [`attention`]) are shared with the CPU implementation.
#![no_std]
#![feature(f16, stmt_expr_attributes)]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(
        abi_gpu_kernel,
        asm_experimental_arch,
        stdarch_nvptx,
        gpu_intrinsics,
        gpu_launch_sized_workgroup_mem,
        core_intrinsics
    )
)]
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]

pub use kernels_gpu_macros::kernel;

pub mod attention;
pub mod barrier;
pub mod cluster;
pub mod copy;
pub mod fp8;
pub mod gpu_scope;
pub mod grid_dependency;
pub mod kernels;
pub mod math;
pub mod mma;
pub mod num;
pub mod pipeline;
pub mod shared;
pub mod thread;
pub mod tma;
pub mod warp;
pub mod warpgroup;
pub mod wgmma;

/// A device-side panic (index out of bounds, explicit `panic!`) aborts the kernel with `trap`,
/// which surfaces on the host as `CUDA_ERROR_LAUNCH_FAILED` instead of undefined behaviour.
#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: `trap` only ends this kernel.
    unsafe { core::arch::nvptx::trap() }
}

/// Marks a function that only exists on the GPU. On the host it panics, like cuda_std's
/// `#[gpu_only]`, so host builds type-check the kernels without running them.
macro_rules! gpu_only {
    ($name:expr) => {
        panic!("{} is a device-only function (nvptx64)", $name)
    };
}
pub(crate) use gpu_only;
