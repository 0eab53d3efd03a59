//! The tensor memory accelerator (TMA, sm_90): bulk tensor copies from global to shared memory,
//! described by a *tensor map* (a 128-byte descriptor of a global tensor: base, sizes, strides,
//! the box one copy moves and the shared-memory swizzle), through inline PTX.
//!
//! One instruction, issued by one thread, moves a whole box: a paged K/V tile needs one copy per
//! (page, 64-dim column block) instead of sixteen 16-byte `cp.async` per thread, so the thread
//! that issues them needs few registers and no address arithmetic per byte. The copy writes the
//! box in the map's swizzle (the 128-byte one is the layout `wgmma` reads, [`crate::wgmma`]) and
//! completes bytes on an mbarrier ([`crate::barrier::arrive_expect_tx`] announces them): waiters
//! of the phase see the data (the async proxy wrote it; `wgmma` reads it through the same proxy).
//! Boxes partly or wholly outside the tensor are filled with zeros, and still count their full
//! size in bytes.
//!
//! The other way, [`store_3d`] writes a box from shared memory to the tensor (elements outside it
//! are not written), tracked per thread in bulk groups ([`bulk_commit_group`]): the shared source
//! may be reused once [`bulk_wait_group_read`] returns, the global writes are done once
//! [`bulk_wait_group`] returns.
//!
//! The map is a kernel parameter: the host encodes it (`cuTensorMapEncodeTiled`) and passes it by
//! value ([`TensorMapImage`]); the copies read it where it lies, in the kernel's parameter space
//! ([`param_address!`], CUDA's `__grid_constant__` maps). Parameters do not change while the grid
//! runs, so no block writes a map and no proxy fence orders one: a map written to global memory
//! by one block needed a release fence there and an acquire in every copier, on the path to
//! every block's first tiles (benchmarks/NOTES.md "v40").

/// Bytes of a tensor map (`CUtensorMap`), which must be 64-byte aligned where the copies read it.
pub const MAP_BYTES: usize = 128;

/// A tensor map as the host encoded it, passed by value as a kernel parameter. A map must be
/// 64-byte aligned where the copies read it: rustc declares no kernel parameter aligned past 16,
/// so the root build.rs declares each parameter that [`param_address!`] names `.align 64`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMapImage {
    pub words: [u64; MAP_BYTES / 8],
}

/// The generic address of the kernel parameter named `$symbol` (a string literal: LLVM names an
/// entry's parameters `<entry>_param_<index>` in the PTX), for a [`TensorMapImage`] passed by
/// value: what [`load_3d`] and [`store_3d`] take as `map` (`mov` of the parameter's address,
/// `cvta.param`). Rust cannot take a kernel parameter's address without a copy to local memory,
/// which the tensor memory accelerator cannot read; the entry's inline PTX names it instead. The
/// root build.rs finds each parameter so named (the `mov.u64` of a `_param_` symbol: LLVM's own
/// code reads parameters with `ld.param`), declares it `.align 64` (as CUDA's `CUtensorMap`), and
/// fails the build where it is not a 128-byte parameter of that entry. On the host, 0.
///
/// # Safety
/// Only in the body of the entry whose parameter it names (sm_90a image).
macro_rules! param_address {
    ($symbol:expr) => {{
        #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
        let address: u64 = {
            let a: u64;
            core::arch::asm!(
                concat!("mov.u64 {a}, ", $symbol, ";\ncvta.param.u64 {a}, {a};"),
                a = out(reg64) a,
                options(nostack, nomem, pure)
            );
            a
        };
        #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
        let address: u64 = 0;
        address
    }};
}
pub(crate) use param_address;

/// `prefetch.tensormap [map]`: starts fetching the tensor map at generic address `map` into the
/// tensor memory accelerator's cache, so that the first copy through it does not wait for it.
///
/// # Safety
/// `map` as [`load_3d`] takes it (sm_90a image).
#[inline(always)]
pub unsafe fn prefetch_map(map: u64) {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    core::arch::asm!("prefetch.tensormap [{map}];", map = in(reg64) map, options(nostack));
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    {
        let _ = map;
        crate::gpu_only!("tma::prefetch_map")
    }
}

/// `fence.proxy.async.global`: this thread's generic-proxy view of global memory (what it has
/// acquired from other blocks and grids: a plan, the inputs behind it) ordered before its later
/// bulk copies (the async proxy) from global memory. Where a kernel learns that its inputs are
/// ready from a flag rather than from its grid dependency wait.
///
/// # Safety
/// sm_90 (the sm_90a image).
#[inline(always)]
pub unsafe fn fence_proxy_async_global() {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    core::arch::asm!("fence.proxy.async.global;", options(nostack));
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    crate::gpu_only!("tma::fence_proxy_async_global")
}

/// Copies the box at coordinates `(c0, c1, c2)` (innermost first, in elements) of the 3-D tensor
/// that `map` describes into shared memory at `dst`, in the map's swizzle, and completes its bytes
/// on the mbarrier at `bar`
/// (`cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes`).
/// Coordinates may lie outside the tensor (negative too): those elements are zeros.
///
/// # Safety
/// `map` the generic address of a tensor map that stays unchanged while the copy runs (a kernel
/// parameter, [`param_address!`]); `dst` a shared address aligned as the
/// map's swizzle needs (1024 bytes for the 128-byte one), with the box's bytes free until the
/// barrier's phase completes; `bar` an initialized mbarrier whose phase expects these bytes
/// ([`crate::barrier::arrive_expect_tx`]).
#[inline(always)]
pub unsafe fn load_3d(dst: u32, map: u64, c0: i32, c1: i32, c2: i32, bar: u32) {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    core::arch::asm!(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{dst}], [{map}, {{{c0}, {c1}, {c2}}}], [{bar}];",
        dst = in(reg32) dst, map = in(reg64) map, c0 = in(reg32) c0, c1 = in(reg32) c1, c2 = in(reg32) c2,
        bar = in(reg32) bar, options(nostack));
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    {
        let _ = (dst, map, c0, c1, c2, bar);
        crate::gpu_only!("tma::load_3d")
    }
}

/// Writes the box at coordinates `(c0, c1, c2)` of the tensor that `map` describes from shared
/// memory at `src`, laid out in the map's swizzle; elements outside the tensor are not written
/// (`cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group`). The copy joins this thread's
/// next bulk group ([`bulk_commit_group`]).
///
/// # Safety
/// `map` as for [`load_3d`]; `src` a shared address aligned as the
/// map's swizzle needs, holding the box, written before by this or other threads whose writes
/// were fenced to the async proxy (`fence.proxy.async.shared::cta`) and ordered before this call
/// (a barrier); the box's bytes stay unchanged until [`bulk_wait_group_read`] says they were read;
/// nothing else writes the box's elements of the tensor meanwhile.
#[inline(always)]
pub unsafe fn store_3d(map: u64, src: u32, c0: i32, c1: i32, c2: i32) {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    core::arch::asm!(
        "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [{map}, {{{c0}, {c1}, {c2}}}], [{src}];",
        map = in(reg64) map, c0 = in(reg32) c0, c1 = in(reg32) c1, c2 = in(reg32) c2, src = in(reg32) src,
        options(nostack));
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    {
        let _ = (map, src, c0, c1, c2);
        crate::gpu_only!("tma::store_3d")
    }
}

/// Closes this thread's bulk group: the [`store_3d`] copies issued since the last commit
/// (`cp.async.bulk.commit_group`).
///
/// # Safety
/// sm_90 (the sm_90a image).
#[inline(always)]
pub unsafe fn bulk_commit_group() {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    core::arch::asm!("cp.async.bulk.commit_group;", options(nostack));
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    crate::gpu_only!("tma::bulk_commit_group")
}

/// Waits until at most `PENDING` of this thread's bulk groups still read their shared sources
/// (`cp.async.bulk.wait_group.read`): the others' boxes may be overwritten.
///
/// # Safety
/// sm_90 (the sm_90a image).
#[inline(always)]
pub unsafe fn bulk_wait_group_read<const PENDING: u32>() {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    core::arch::asm!("cp.async.bulk.wait_group.read {n};", n = const PENDING, options(nostack));
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    crate::gpu_only!("tma::bulk_wait_group_read")
}

/// Waits until at most `PENDING` of this thread's bulk groups are incomplete
/// (`cp.async.bulk.wait_group`): the others' global writes are done.
///
/// # Safety
/// sm_90 (the sm_90a image).
#[inline(always)]
pub unsafe fn bulk_wait_group<const PENDING: u32>() {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    core::arch::asm!("cp.async.bulk.wait_group {n};", n = const PENDING, options(nostack));
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    crate::gpu_only!("tma::bulk_wait_group")
}
