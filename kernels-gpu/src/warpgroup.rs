//! Warpgroup register budgets (`setmaxnreg`, sm_90a), through inline PTX.
//!
//! A warp-specialized block gives its warpgroups different register budgets: a block launched
//! with `R` registers per thread (bounded by `.maxntid`, see `#[kernel(max_threads = N)]`) owns
//! a pool of `R * threads`; a producer warpgroup that only issues copies returns most of its
//! registers to the pool ([`release_registers`]) and the consumer warpgroups, which hold the
//! accumulators, take them ([`claim_registers`]). ptxas allocates the code after each call within
//! the new budget.

/// Lowers this warpgroup's registers per thread to `N` (a multiple of 8 in 24..=256).
///
/// # Safety
/// Every warp of the warpgroup must execute it (sm_90a image only), with no register holding a
/// live value beyond `N` (ptxas arranges that).
#[inline(always)]
pub unsafe fn release_registers<const N: u32>() {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    core::arch::asm!("setmaxnreg.dec.sync.aligned.u32 {n};", n = const N, options(nostack));
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    crate::gpu_only!("warpgroup::release_registers")
}

/// Raises this warpgroup's registers per thread to `N` (a multiple of 8 in 24..=256), waiting
/// until the block's pool has them.
///
/// # Safety
/// Every warp of the warpgroup must execute it (sm_90a image only); the pool must eventually hold
/// enough registers (other warpgroups release theirs), or the warpgroup hangs.
#[inline(always)]
pub unsafe fn claim_registers<const N: u32>() {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    core::arch::asm!("setmaxnreg.inc.sync.aligned.u32 {n};", n = const N, options(nostack));
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    crate::gpu_only!("warpgroup::claim_registers")
}
