//! Shared memory (cuda_std's `shared` module).

/// Pointer to the block's dynamic shared memory, sized by the launch
/// (`cuLaunchKernel`'s `sharedMemBytes`); cuda_std's `dynamic_shared_mem`.
///
/// Every call in a kernel returns the same address whatever `T` is.
///
/// # Safety
/// The caller may only access the first `sharedMemBytes` bytes, must respect `T`'s alignment
/// (at most 16 bytes is guaranteed) and must synchronize the block between writes and reads
/// of other threads.
#[inline(always)]
pub unsafe fn dynamic_shared_mem<T>() -> *mut T {
    #[cfg(target_arch = "nvptx64")]
    {
        core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<T>()
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::gpu_only!("dynamic_shared_mem")
}
