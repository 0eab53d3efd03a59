//! Memory order between the blocks of one grid, at GPU scope, through inline PTX: the fence that
//! publishes a block's global writes before it signals another block (and orders the signal's
//! reading before the loads it guards), and loads that see what other blocks wrote.
//!
//! `core::sync::atomic` lowers every ordering to a relaxed `atom` on nvptx (LLVM drops AcqRel and
//! SeqCst; ../shared/reference/toolchain.md), so the order is built the way the PTX memory model
//! spells it: writer `stores; bar.sync; fence; relaxed atomic`, reader `relaxed atomic; fence;
//! bar.sync; relaxed loads` (the pattern of CUTLASS's semaphore). Relaxed loads at GPU scope are
//! strong: they never return a line an SM's L1 kept from before the other block's writes, which a
//! weak load may.

/// `fence.acq_rel.gpu`: this thread's memory operations before it (and those ordered before them,
/// a block's writes before a `bar.sync` included) are seen by the GPU before its operations after
/// it; and operations after it follow whatever it observed before.
///
/// # Safety
/// None beyond being called from device code; `unsafe` for the inline assembly.
#[inline(always)]
pub unsafe fn fence_acq_rel() {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!("fence.acq_rel.gpu;", options(nostack));
    #[cfg(not(target_arch = "nvptx64"))]
    crate::gpu_only!("gpu_scope::fence_acq_rel")
}

/// Loads an f32 with `ld.relaxed.gpu` (strong at GPU scope: it sees another block's write once
/// that write is ordered before it).
///
/// # Safety
/// `src` must be a global address valid for 4 aligned bytes.
#[inline(always)]
pub unsafe fn load_relaxed_f32(src: *const f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let v: f32;
        core::arch::asm!("ld.relaxed.gpu.global.f32 {v}, [{a}];", v = out(reg32) v, a = in(reg64) src,
            options(readonly, nostack));
        v
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = src;
        crate::gpu_only!("gpu_scope::load_relaxed_f32")
    }
}

/// Loads a u64 with `ld.relaxed.gpu`: a flag that another block publishes (after a fence, as the
/// module docs' writer does), polled by [`wait_until_u64`].
///
/// # Safety
/// `src` must be a global address valid for 8 aligned bytes.
#[inline(always)]
unsafe fn load_relaxed_u64(src: *const u64) -> u64 {
    #[cfg(target_arch = "nvptx64")]
    {
        let v: u64;
        // Not `readonly`: a poll loop's loads must not be merged into one.
        core::arch::asm!("ld.relaxed.gpu.global.u64 {v}, [{a}];", v = out(reg64) v, a = in(reg64) src,
            options(nostack));
        v
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = src;
        crate::gpu_only!("gpu_scope::load_relaxed_u64")
    }
}

/// Publishes the 8-byte flag at `dst` with `value` as the module docs' writer does: a GPU-scope
/// fence (this thread's writes before it, and those a block barrier or a grid dependency wait
/// ordered before them), then a relaxed atomic store. Read with [`wait_for_u64`].
///
/// # Safety
/// `dst` must be a global address valid for 8 aligned bytes.
#[inline(always)]
pub unsafe fn publish_u64(dst: *mut u64, value: u64) {
    fence_acq_rel();
    core::sync::atomic::AtomicU64::from_ptr(dst).store(value, core::sync::atomic::Ordering::Relaxed);
}

/// Polls the 8-byte word at `src` until `done` accepts it, and returns it: the module docs'
/// reader, relaxed loads and one fence after the last (an acquire: this thread's later loads see
/// what the publisher's fence ordered before its store or atomic). Not an `ld.acquire` per poll:
/// pollers resident beside streaming blocks slowed them up to 1.8x with those
/// (benchmarks/NOTES.md "v27.2").
///
/// # Safety
/// `src` must be a global address valid for 8 aligned bytes, and some thread must store a word
/// `done` accepts there (or the loop never ends).
#[inline(always)]
pub unsafe fn wait_until_u64(src: *const u64, done: impl Fn(u64) -> bool) -> u64 {
    loop {
        let word = load_relaxed_u64(src);
        if done(word) {
            fence_acq_rel();
            return word;
        }
    }
}

/// [`wait_until_u64`] for the word `value` ([`publish_u64`]'s).
///
/// # Safety
/// As [`wait_until_u64`].
#[inline(always)]
pub unsafe fn wait_for_u64(src: *const u64, value: u64) {
    wait_until_u64(src, |word| word == value);
}
