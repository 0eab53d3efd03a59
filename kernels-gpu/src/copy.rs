//! Asynchronous global → shared copies (`cp.async`, sm_80+), through inline PTX.
//!
//! A thread issues copies, closes them into a *group* with [`commit_group`], and later waits until
//! at most `N` of its groups are still in flight ([`wait_group`]). The wait covers only the calling
//! thread's own copies: other threads' data becomes visible after a block barrier
//! ([`crate::thread::sync_threads`]) that every copying thread reaches after its wait. This is the
//! building block of multi-stage shared-memory pipelines (copies of tile `i + stages - 1` are in
//! flight while tile `i` is computed).

/// L2 cache hints for [`cp_async_16`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyHint {
    /// Prefetch the surrounding 256 bytes into L2 (`.L2::256B`).
    pub prefetch_256: bool,
}

/// Copies 16 bytes from global `src` to the shared-memory address `dst` (cached in L2 only), or
/// writes 16 zero bytes when `valid` is false (then nothing is read and `src` may be any address),
/// with the given L2 hints.
///
/// # Safety
/// `dst` must be a 16-byte aligned shared-memory address (see [`crate::shared::shared_address`])
/// inside the block's allocation; when `valid`, `src` must be a 16-byte aligned global address
/// valid for 16 bytes. Nothing may read `dst` before the copy's group is waited for.
#[inline(always)]
pub unsafe fn cp_async_16(dst: u32, src: *const u8, valid: bool, hint: CopyHint) {
    #[cfg(target_arch = "nvptx64")]
    {
        let valid = valid as u32;
        // The `ignore-src` predicate (PTX 7.5) rather than a source size of 0 or 16: ptxas then
        // predicates the copy on the comparison itself, where a size in a register took two
        // selects and a comparison per copy pass (SASS, benchmarks/NOTES.md "v12").
        // No `nomem`: the compiler must keep them ordered with the waits and barriers around them.
        macro_rules! copy {
            ($suffix:literal) => {
                core::arch::asm!(concat!("{{\n.reg .pred ignore;\nsetp.eq.u32 ignore, {valid}, 0;\n",
                    "cp.async.cg.shared.global", $suffix, " [{dst}], [{src}], 16, ignore;\n}}"),
                    dst = in(reg32) dst, src = in(reg64) src, valid = in(reg32) valid, options(nostack))
            };
        }
        if hint.prefetch_256 {
            copy!(".L2::256B")
        } else {
            copy!("")
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (dst, src, valid, hint);
        crate::gpu_only!("cp_async_16")
    }
}

/// Closes the copies this thread issued since the last commit into one group (an empty group when
/// there were none, which keeps group counting uniform across loop iterations).
///
/// # Safety
/// Always safe to execute; `unsafe` because it orders memory the compiler cannot see.
#[inline(always)]
pub unsafe fn commit_group() {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!("cp.async.commit_group;", options(nostack));
    #[cfg(not(target_arch = "nvptx64"))]
    crate::gpu_only!("commit_group")
}

/// Waits until at most `PENDING` of this thread's committed groups are still in flight.
///
/// # Safety
/// As [`commit_group`].
#[inline(always)]
pub unsafe fn wait_group<const PENDING: u32>() {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!("cp.async.wait_group {n};", n = const PENDING, options(nostack));
    #[cfg(not(target_arch = "nvptx64"))]
    crate::gpu_only!("wait_group")
}

/// [`wait_group`] with a count known only at run time (a uniform branch over the immediates);
/// counts above 6 wait for every group, which is always safe.
///
/// # Safety
/// As [`commit_group`].
#[inline(always)]
pub unsafe fn wait_group_dyn(pending: u32) {
    match pending {
        0 => wait_group::<0>(),
        1 => wait_group::<1>(),
        2 => wait_group::<2>(),
        3 => wait_group::<3>(),
        4 => wait_group::<4>(),
        5 => wait_group::<5>(),
        6 => wait_group::<6>(),
        _ => wait_all(),
    }
}

/// Waits for every copy this thread issued.
///
/// # Safety
/// As [`commit_group`].
#[inline(always)]
pub unsafe fn wait_all() {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!("cp.async.wait_all;", options(nostack));
    #[cfg(not(target_arch = "nvptx64"))]
    crate::gpu_only!("wait_all")
}
