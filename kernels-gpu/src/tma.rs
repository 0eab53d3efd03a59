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
//! The map lives in global memory: the host encodes it (`cuTensorMapEncodeTiled`) and a kernel
//! that runs before the user writes it there ([`write_map`]), publishing it to the tensor-map
//! proxy ([`release_map_writes`]); the user acquires it ([`acquire_map`]) before its first copy.

/// Bytes of a tensor map (`CUtensorMap`), which must be 64-byte aligned in global memory.
pub const MAP_BYTES: usize = 128;

/// A tensor map as the host encoded it, passed by value as a kernel parameter.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMapImage {
    pub words: [u64; MAP_BYTES / 8],
}

/// Writes `image` to `dst` (global memory, 64-byte aligned) with generic stores; the writer then
/// publishes its maps' writes to the tensor-map proxy with one [`release_map_writes`] (a fence
/// takes ~0.4 µs: one for all of a call's maps, benchmarks/NOTES.md "v39").
///
/// # Safety
/// `dst` must be a 64-byte aligned global allocation of [`MAP_BYTES`] bytes that nothing reads
/// while this runs; one thread calls it.
#[inline(always)]
pub unsafe fn write_map(dst: *mut u64, image: &TensorMapImage) {
    // Constant indices: a run-time index into the by-value parameter would copy it to local memory.
    crate::kernels::unroll::<{ MAP_BYTES / 8 }>(|i| *dst.add(i) = image.words[i]);
}

/// `fence.proxy.tensormap::generic.release.gpu`: this thread's earlier generic writes of tensor
/// maps become visible to the tensor-map proxy of threads that acquire them ([`acquire_map`]).
///
/// # Safety
/// sm_90 (the sm_90a image, PTX 8.3).
#[inline(always)]
pub unsafe fn release_map_writes() {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    core::arch::asm!("fence.proxy.tensormap::generic.release.gpu;", options(nostack));
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    crate::gpu_only!("tma::release_map_writes")
}

/// `fence.proxy.tensormap::generic.acquire.gpu [map], 128`: the tensor map at global address `map`,
/// written and released by another thread (another kernel before this one), is what this thread's
/// later copies through it read.
///
/// # Safety
/// `map` must point to a 64-byte aligned tensor map in global memory (sm_90a image).
#[inline(always)]
pub unsafe fn acquire_map(map: u64) {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    core::arch::asm!("fence.proxy.tensormap::generic.acquire.gpu [{map}], 128;", map = in(reg64) map,
        options(nostack));
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    {
        let _ = map;
        crate::gpu_only!("tma::acquire_map")
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
/// `map` as for [`acquire_map`] (acquired by this thread); `dst` a shared address aligned as the
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
/// `map` as for [`acquire_map`] (acquired by this thread); `src` a shared address aligned as the
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
