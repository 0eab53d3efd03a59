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

/// The shared-state-space address (what `cp.async`, `ldmatrix` and `ld.shared` take) of a generic
/// pointer into shared memory (`__cvta_generic_to_shared`).
///
/// # Safety
/// `ptr` must point into this block's shared memory.
#[inline(always)]
pub unsafe fn shared_address<T>(ptr: *const T) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let addr: u64;
        core::arch::asm!("cvta.to.shared.u64 {}, {};", out(reg64) addr, in(reg64) ptr, options(pure, nomem, nostack));
        addr as u32
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = ptr;
        crate::gpu_only!("shared_address")
    }
}

/// What a 128-byte-swizzled tile's start in shared memory must be a multiple of: the swizzle
/// permutes 16-byte chunks by address bits 7-9, so `wgmma` descriptors and the bulk tensor copies
/// assume its 8-row, 1024-byte atom starts on such a boundary. Dynamic shared memory is only
/// 16-byte aligned: a kernel with swizzled tiles asks for this many bytes more and starts its
/// tiles at [`align_swizzle_128b`].
pub const SWIZZLE_128B_ALIGN: u32 = 1024;

/// `address` (shared state space) rounded up to [`SWIZZLE_128B_ALIGN`].
#[inline(always)]
pub const fn align_swizzle_128b(address: u32) -> u32 {
    (address + (SWIZZLE_128B_ALIGN - 1)) & !(SWIZZLE_128B_ALIGN - 1)
}

/// Reads 16 bytes at a shared-state-space address (`ld.shared.v4.b32`): what a generic pointer
/// cannot promise, a single vector load from an address that [`crate::mma::stmatrix_x4`] or
/// another asm write filled.
///
/// # Safety
/// `addr` must be a 16-byte aligned address inside this block's shared memory, written before
/// (and made visible by a barrier where other threads wrote it).
#[inline(always)]
pub unsafe fn load_v4(addr: u32) -> [u32; 4] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (a, b, c, d): (u32, u32, u32, u32);
        // `readonly`, not `nomem`: it must stay after the writes and barriers that publish it.
        core::arch::asm!(
            "ld.shared.v4.b32 {{{}, {}, {}, {}}}, [{}];",
            out(reg32) a, out(reg32) b, out(reg32) c, out(reg32) d, in(reg32) addr,
            options(readonly, nostack),
        );
        [a, b, c, d]
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = addr;
        crate::gpu_only!("shared::load_v4")
    }
}

/// Writes 16 bytes at a shared-state-space address (`st.shared.v4.b32`).
///
/// # Safety
/// `addr` must be a 16-byte aligned address inside this block's shared memory that no other
/// thread reads or writes meanwhile (barriers order the others).
#[inline(always)]
pub unsafe fn store_v4(addr: u32, v: [u32; 4]) {
    #[cfg(target_arch = "nvptx64")]
    {
        core::arch::asm!(
            "st.shared.v4.b32 [{}], {{{}, {}, {}, {}}};",
            in(reg32) addr, in(reg32) v[0], in(reg32) v[1], in(reg32) v[2], in(reg32) v[3],
            options(nostack),
        );
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (addr, v);
        crate::gpu_only!("shared::store_v4")
    }
}
