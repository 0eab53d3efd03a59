//! Thread and block indices (cuda_std's `thread` module), and the multiprocessor's cycle counter.

macro_rules! index_fn {
    ($($(#[$doc:meta])* $name:ident => $intrinsic:ident;)*) => {$(
        $(#[$doc])*
        #[inline(always)]
        pub fn $name() -> u32 {
            #[cfg(target_arch = "nvptx64")]
            // SAFETY: reading a special register has no preconditions.
            unsafe { core::arch::nvptx::$intrinsic() }
            #[cfg(not(target_arch = "nvptx64"))]
            crate::gpu_only!(stringify!($name))
        }
    )*};
}

index_fn! {
    /// `threadIdx.x`
    thread_idx_x => _thread_idx_x;
    /// `threadIdx.y`
    thread_idx_y => _thread_idx_y;
    /// `threadIdx.z`
    thread_idx_z => _thread_idx_z;
    /// `blockIdx.x`
    block_idx_x => _block_idx_x;
    /// `blockIdx.y`
    block_idx_y => _block_idx_y;
    /// `blockIdx.z`
    block_idx_z => _block_idx_z;
    /// `blockDim.x`
    block_dim_x => _block_dim_x;
    /// `blockDim.y`
    block_dim_y => _block_dim_y;
    /// `blockDim.z`
    block_dim_z => _block_dim_z;
    /// `gridDim.x`
    grid_dim_x => _grid_dim_x;
    /// `gridDim.y`
    grid_dim_y => _grid_dim_y;
    /// `gridDim.z`
    grid_dim_z => _grid_dim_z;
}

/// Global 1-D thread index: `blockIdx.x * blockDim.x + threadIdx.x`, as u64 so huge grids
/// cannot overflow.
#[inline(always)]
pub fn index_1d() -> u64 {
    block_idx_x() as u64 * block_dim_x() as u64 + thread_idx_x() as u64
}

/// Total threads in a 1-D grid (`gridDim.x * blockDim.x`).
#[inline(always)]
pub fn grid_size_1d() -> u64 {
    grid_dim_x() as u64 * block_dim_x() as u64
}

/// `__syncthreads()`: a barrier for every thread of the block.
///
/// Every thread of the block must reach the same call, or the block deadlocks.
#[inline(always)]
pub fn sync_threads() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: bar.sync 0 is well defined when all threads reach it (caller's contract above).
    unsafe {
        core::arch::nvptx::_syncthreads()
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::gpu_only!("sync_threads")
}

/// `%clock64`: the multiprocessor's cycle counter (comparable within a block). ptxas keeps its
/// reads in order with other volatile instructions (stores, barriers, `wgmma` issues and waits)
/// but moves arithmetic across them, so a read bounds where independent arithmetic ran only
/// roughly (benchmarks/NOTES.md "v42.1").
#[inline(always)]
pub fn clock64() -> u64 {
    #[cfg(target_arch = "nvptx64")]
    {
        let cycles: u64;
        // SAFETY: reading a special register has no preconditions.
        unsafe { core::arch::asm!("mov.u64 {}, %clock64;", out(reg64) cycles, options(nostack, nomem)) };
        cycles
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::gpu_only!("clock64")
}
