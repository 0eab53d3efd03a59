//! Programmatic dependent launch (`griddepcontrol`, sm_90): lets a kernel's launch overlap the end
//! of the kernel before it on the stream.
//!
//! The host launches a kernel with the programmatic-stream-serialization attribute
//! (`host::runtime`); the driver may then start it once every block of the preceding kernel has
//! called [`launch_dependents`] or exited, instead of after that kernel has finished. The
//! dependent kernel must call [`wait_for_prerequisites`] before it touches memory the preceding
//! kernel reads or writes: it returns once that kernel has completed and its writes are visible.
//! One exception: a mixed batch's warp-specialized tile kernel does not wait for the decode kernel
//! before it (their rows are disjoint) but for words published under the call's tag (the decode
//! kernel's first block says the inputs are written, the tile kernel's block 0 publishes the
//! plan), and waits for the decode kernel only before it ends
//! (`prefill::hopper::scheduler::plan_or_wait`).
//!
//! Both are no-ops for a kernel launched without the attribute, and compile to nothing in images
//! built without `xgk_sm90` (the portable sm_80 image), so kernels call them unconditionally.

/// Blocks until every grid this one depends on programmatically has completed and its memory
/// operations are visible; returns at once when there is none. Call it before the first access to
/// memory shared with the preceding kernel (inputs it writes, outputs it may still read).
///
/// # Safety
/// None beyond being called from device code; `unsafe` for the inline assembly.
#[inline(always)]
pub unsafe fn wait_for_prerequisites() {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    // SAFETY: a synchronization instruction with no operands; sm_90+ (this image's target).
    unsafe {
        core::arch::asm!("griddepcontrol.wait;", options(nostack))
    };
}

/// Signals that the kernels launched programmatically after this one may start (once every block
/// of this grid has signalled or exited). They still wait for this grid's completion before
/// reading its results, so signalling early is safe; signalling before the last wave has started
/// lets the dependent's launch overlap this kernel's tail.
///
/// # Safety
/// None beyond being called from device code; `unsafe` for the inline assembly.
#[inline(always)]
pub unsafe fn launch_dependents() {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    // SAFETY: a scheduling hint with no operands; sm_90+ (this image's target).
    unsafe {
        core::arch::asm!("griddepcontrol.launch_dependents;", options(nostack, nomem))
    };
}
