//! Warpgroup matrix multiply-accumulate (`wgmma.mma_async`, sm_90a) and its shared-memory
//! operand layout, through inline PTX: the Hopper tensor-core path for the prefill kernels.
//!
//! A warpgroup (four consecutive warps, 128 threads) issues each `wgmma` together. Operands in
//! shared memory are named by 64-bit matrix descriptors ([`descriptor`]); the layout used here is
//! the 128-byte swizzle: a tile is stored as rows of 128 bytes (64 16-bit elements), the 16-byte
//! chunk `c` of row `r` at chunk position `c ^ (r % 8)` ([`swizzled_128b_offset`]), every 8-row
//! atom (1024 bytes) 1024-byte aligned. Wider tiles are several such 128-byte-column blocks.
//! Accumulators (f32) are in registers, per warp `w` of the group rows `16w..16w+16`, in the
//! `mma.m16n8` C layout repeated over the 8-column blocks (`g = lane / 4`, `c = lane % 4`):
//! `acc[4j]`, `acc[4j+1]` = (row `16w+g`, cols `8j+2c`, `8j+2c+1`), `acc[4j+2]`, `acc[4j+3]` = the
//! same columns of row `16w+g+8`. An A operand in registers has the `mma.m16n8k16` A layout
//! ([`crate::mma`]) for the warp's 16 rows.
//!
//! Ordering: shared memory written by threads (generic proxy) must be published to the tensor
//! cores (async proxy) with [`fence_proxy_async_shared`] and a block barrier before a `wgmma`
//! reads it; registers feeding a `wgmma` are published with [`fence`]; results may be read only
//! after [`commit_group`] and [`wait_group`], then [`keep_accumulator`] stops the compiler from
//! moving reads of the accumulators above the wait.
//!
//! The instructions exist only in the sm_90a image (`cfg(xgk_sm90)`); elsewhere these functions
//! are never called (the kernels using them are compiled for that image only) and panic on the
//! host like every device function.

use crate::mma::MmaElement;

/// Swizzle mode of a shared-memory matrix descriptor (bits 62-63).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Swizzle {
    /// No swizzle ("interleaved" 8x16-byte core matrices).
    None = 0,
    /// 128-byte swizzle: 16-byte chunk `c` of row `r` at `c ^ (r % 8)` within 128-byte rows.
    Bytes128 = 1,
    /// 64-byte swizzle.
    Bytes64 = 2,
    /// 32-byte swizzle.
    Bytes32 = 3,
}

/// A wgmma shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address
/// (bits 0-13, in 16-byte units, of the 18-bit shared address), leading-dimension byte offset (bits
/// 16-29, 16-byte units), stride-dimension byte offset (bits 32-45), base offset 0, swizzle mode
/// (bits 62-63).
///
/// For a K-major operand with 128-byte swizzle the stride offset is the distance between 8-row
/// groups (1024 bytes for 128-byte rows) and the leading offset is unused; k-steps inside a
/// 64-element block advance the start address by 32 bytes. For an MN-major operand (read with the
/// transpose flag) the stride offset is the distance between 8-row groups along K and the leading
/// offset the distance between 64-element blocks along M or N.
pub const fn descriptor(address: u32, leading_byte_offset: u32, stride_byte_offset: u32, swizzle: Swizzle) -> u64 {
    ((address as u64 & 0x3_ffff) >> 4)
        | (((leading_byte_offset as u64 >> 4) & 0x3fff) << 16)
        | (((stride_byte_offset as u64 >> 4) & 0x3fff) << 32)
        | ((swizzle as u64) << 62)
}

/// The descriptor of the operand `bytes` further into shared memory than `desc`'s: its address
/// field, in 16-byte units, plus `bytes / 16`, on the low 32 bits alone (the 14-bit field cannot
/// carry out for an address inside the 228 KiB of shared memory), so a kernel computes one base
/// descriptor per stage and adds constants per k-step.
#[inline(always)]
pub const fn advance(desc: u64, bytes: u32) -> u64 {
    (desc & !0xffff_ffff) | ((desc as u32).wrapping_add(bytes >> 4)) as u64
}

/// `desc` broadcast from lane 0: ptxas then knows its value is the same in every lane (a
/// shuffle from a constant lane) and keeps what is derived from it (the per-k-step [`advance`]s)
/// in uniform registers, where a `wgmma` reads its descriptors, instead of computing each in
/// vector registers and moving both halves across (`R2UR`) before every instruction.
///
/// Every lane of the warp must execute the same call, with the same `desc`.
#[inline(always)]
pub fn warp_uniform(desc: u64) -> u64 {
    // The high half (the offsets and the swizzle) is the same constant in every kernel.
    (desc & !0xffff_ffff) | crate::warp::warp_shuffle_idx_u32(desc as u32, 0) as u64
}

/// Byte offset of 16-byte chunk `chunk` (0..8) of row `row` in a tile of 128-byte rows stored with
/// the 128-byte swizzle (the tile's base 1024-byte aligned).
pub const fn swizzled_128b_offset(row: u32, chunk: u32) -> u32 {
    row * 128 + ((chunk ^ (row & 7)) << 4)
}

/// `wgmma.fence.sync.aligned`: orders this warpgroup's register accesses (A fragments,
/// accumulators) before the `wgmma` instructions that follow.
///
/// # Safety
/// Every thread of the warpgroup must execute it (sm_90a).
#[inline(always)]
pub unsafe fn fence() {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    core::arch::asm!("wgmma.fence.sync.aligned;", options(nostack));
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    crate::gpu_only!("wgmma::fence")
}

/// `wgmma.commit_group.sync.aligned`: closes the group of the `wgmma` instructions issued since
/// the last commit.
///
/// # Safety
/// Every thread of the warpgroup must execute it (sm_90a).
#[inline(always)]
pub unsafe fn commit_group() {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    core::arch::asm!("wgmma.commit_group.sync.aligned;", options(nostack));
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    crate::gpu_only!("wgmma::commit_group")
}

/// `wgmma.wait_group.sync.aligned N`: waits until at most `N` committed groups are pending; with
/// `N = 0` every issued `wgmma` has finished and its accumulators may be read.
///
/// # Safety
/// Every thread of the warpgroup must execute it (sm_90a).
#[inline(always)]
pub unsafe fn wait_group<const N: u32>() {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    core::arch::asm!("wgmma.wait_group.sync.aligned {};", const N, options(nostack));
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    crate::gpu_only!("wgmma::wait_group")
}

/// `fence.proxy.async.shared::cta`: makes this thread's earlier shared-memory writes visible to
/// the async proxy (the tensor cores' operand reads). Follow it with a block barrier before the
/// `wgmma` that reads the data.
///
/// # Safety
/// sm_90 (the sm_90a image).
#[inline(always)]
pub unsafe fn fence_proxy_async_shared() {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    core::arch::asm!("fence.proxy.async.shared::cta;", options(nostack));
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    crate::gpu_only!("wgmma::fence_proxy_async_shared")
}

/// Pins the A-operand registers of a register-sourced `wgmma` (`mma_*_rs`) after the
/// [`wait_group`] that retires it: without this the compiler sees them dead once the instruction
/// is issued and may reuse them for the next operand while the tensor cores still read them
/// (ptxas then serializes every wgmma of the kernel).
#[inline(always)]
pub fn keep_fragments<const K: usize>(frags: &mut [[u32; 4]; K]) {
    #[cfg(target_arch = "nvptx64")]
    for frag in frags.iter_mut() {
        for x in frag.iter_mut() {
            // SAFETY: an empty instruction.
            unsafe { core::arch::asm!("// keep {0}", inout(reg32) * x, options(nostack, nomem)) };
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    let _ = frags;
}

/// Returns `desc` through an empty asm that the compiler must run where it stands: descriptors
/// derived from it (per k-step [`advance`]s) are then computed where they are used instead of
/// being hoisted out of a loop as invariants and held in registers (or spilled) across it: a
/// few integer adds per tile against the eight 64-bit values a k-loop would otherwise keep live.
#[inline(always)]
#[allow(unused_mut)] // mutated by the asm on the GPU only
pub fn recompute_here(desc: u64) -> u64 {
    let mut d = desc;
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: an empty instruction (not `pure`: it is neither hoisted nor merged).
    unsafe {
        core::arch::asm!("// here {0}", inout(reg64) d, options(nostack, nomem))
    };
    d
}

/// Pins accumulator registers after [`wait_group`]: an empty asm that claims to rewrite them, so
/// the compiler reads them only after this point (CUTLASS's `warpgroup_fence_operand`).
#[inline(always)]
pub fn keep_accumulator<const R: usize>(acc: &mut [f32; R]) {
    #[cfg(target_arch = "nvptx64")]
    for x in acc.iter_mut() {
        // SAFETY: an empty instruction.
        unsafe { core::arch::asm!("// keep {0}", inout(reg32) * x, options(nostack, nomem)) };
    }
    #[cfg(not(target_arch = "nvptx64"))]
    let _ = acc;
}

/// Issues one `wgmma.mma_async` for q's element type (`Q::IS_BF16`: bf16, else f16): the
/// accumulators `acc[i]` for the listed `i` are its `d` registers, in order; `operands` is the
/// template text after them (the A operand, B's descriptor, the scale-d predicate `p` set from
/// `scale_d`, the scale and transpose immediates), and the named operands follow.
#[cfg(all(target_arch = "nvptx64", xgk_sm90))]
macro_rules! mma_async {
    (@issue $ty:literal, $shape:literal, $acc:ident[$first:literal $(, $i:literal)*], $operands:literal;
        $($named:tt)*) => {
        core::arch::asm!(
            concat!(
                "{{\n.reg .pred p;\nsetp.ne.b32 p, {scale_d}, 0;\n",
                "wgmma.mma_async.sync.aligned.", $shape, ".f32.", $ty, ".", $ty, " {{",
                "{", $first, "}", $(", {", $i, "}",)*
                "}}, ", $operands, ";\n}}"
            ),
            inout(reg32) $acc[$first], $(inout(reg32) $acc[$i],)*
            $($named)*
            options(nostack),
        )
    };
    ($shape:literal, $acc:ident[$($i:literal),*], $operands:literal; $($named:tt)*) => {
        if Q::IS_BF16 {
            mma_async!(@issue "bf16", $shape, $acc[$($i),*], $operands; $($named)*)
        } else {
            mma_async!(@issue "f16", $shape, $acc[$($i),*], $operands; $($named)*)
        }
    };
}

/// `acc (+)= A · B` for a 64x64 tile over 16 of K, both operands in shared memory
/// (`wgmma.mma_async.sync.aligned.m64n64k16.f32.{bf16,f16}`): `a` and `b` are descriptors of A
/// (64 x 16, K-major) and B (16 x 64: K-major with `TRANS_B = 0`, MN-major with 1). Asynchronous:
/// see the module docs for the fences around it.
///
/// # Safety
/// Every thread of the warpgroup must execute it with the same descriptors, after [`fence`], the
/// operands written and published (module docs).
#[inline(always)]
pub unsafe fn mma_m64n64k16_ss<Q: MmaElement, const TRANS_B: u32>(
    acc: &mut [f32; 32],
    a: u64,
    b: u64,
    accumulate: bool,
) {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    mma_async!("m64n64k16", acc[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31], "{a}, {b}, p, 1, 1, 0, {tb}";
        a = in(reg64) a, b = in(reg64) b, scale_d = in(reg32) accumulate as u32, tb = const TRANS_B,);
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    {
        let _ = (acc, a, b, accumulate);
        crate::gpu_only!("wgmma::mma_m64n64k16_ss")
    }
}

/// `acc (+)= A · B` for a 64x64 tile over 16 of K, A from registers (the warp's 16 rows in the
/// `mma.m16n8k16` A layout), B (16 x 64) in shared memory, K-major with `TRANS_B = 0`, MN-major
/// with 1 (`wgmma.mma_async.sync.aligned.m64n64k16.f32.{bf16,f16}`). Asynchronous: see the
/// module docs.
///
/// # Safety
/// As [`mma_m64n64k16_ss`].
#[inline(always)]
pub unsafe fn mma_m64n64k16_rs<Q: MmaElement, const TRANS_B: u32>(
    acc: &mut [f32; 32],
    a: [u32; 4],
    b: u64,
    accumulate: bool,
) {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    mma_async!("m64n64k16", acc[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31], "{{{a0}, {a1}, {a2}, {a3}}}, {b}, p, 1, 1, {tb}";
        a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3], b = in(reg64) b,
        scale_d = in(reg32) accumulate as u32, tb = const TRANS_B,);
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    {
        let _ = (acc, a, b, accumulate);
        crate::gpu_only!("wgmma::mma_m64n64k16_rs")
    }
}

/// `acc (+)= A · B` for a 64x128 tile over 16 of K, A from registers (the warp's 16 rows in the
/// `mma.m16n8k16` A layout), B (16 x 128) in shared memory, K-major with `TRANS_B = 0`, MN-major
/// with 1 (`wgmma.mma_async.sync.aligned.m64n128k16.f32.{bf16,f16}`). Asynchronous: see the
/// module docs.
///
/// # Safety
/// As [`mma_m64n64k16_ss`].
#[inline(always)]
pub unsafe fn mma_m64n128k16_rs<Q: MmaElement, const TRANS_B: u32>(
    acc: &mut [f32; 64],
    a: [u32; 4],
    b: u64,
    accumulate: bool,
) {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    mma_async!("m64n128k16", acc[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63], "{{{a0}, {a1}, {a2}, {a3}}}, {b}, p, 1, 1, {tb}";
        a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3], b = in(reg64) b,
        scale_d = in(reg32) accumulate as u32, tb = const TRANS_B,);
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    {
        let _ = (acc, a, b, accumulate);
        crate::gpu_only!("wgmma::mma_m64n128k16_rs")
    }
}

/// `acc (+)= A · B` for a 64x128 tile over 16 of K, both operands in shared memory
/// (`wgmma.mma_async.sync.aligned.m64n128k16.f32.{bf16,f16}`): `a` and `b` are descriptors of A
/// (64 x 16, K-major) and B (16 x 128: K-major with `TRANS_B = 0`, MN-major with 1). Asynchronous:
/// see the module docs.
///
/// # Safety
/// As [`mma_m64n64k16_ss`].
#[inline(always)]
pub unsafe fn mma_m64n128k16_ss<Q: MmaElement, const TRANS_B: u32>(
    acc: &mut [f32; 64],
    a: u64,
    b: u64,
    accumulate: bool,
) {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    mma_async!("m64n128k16", acc[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63], "{a}, {b}, p, 1, 1, 0, {tb}";
        a = in(reg64) a, b = in(reg64) b, scale_d = in(reg32) accumulate as u32, tb = const TRANS_B,);
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    {
        let _ = (acc, a, b, accumulate);
        crate::gpu_only!("wgmma::mma_m64n128k16_ss")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_fields_land_in_their_bits() {
        let d = descriptor(0x2_0400, 8192, 1024, Swizzle::Bytes128);
        assert_eq!(d & 0x3fff, 0x2_0400 >> 4, "start address, 16-byte units");
        assert_eq!((d >> 16) & 0x3fff, 8192 >> 4, "leading byte offset");
        assert_eq!((d >> 32) & 0x3fff, 1024 >> 4, "stride byte offset");
        assert_eq!((d >> 49) & 0x7, 0, "base offset");
        assert_eq!(d >> 62, 1, "128-byte swizzle");
        assert_eq!(descriptor(0x2_0420, 0, 0, Swizzle::None) - descriptor(0x2_0400, 0, 0, Swizzle::None), 2);
        assert_eq!(advance(d, 0x1_0420), descriptor(0x3_0820, 8192, 1024, Swizzle::Bytes128));
    }

    #[test]
    fn swizzle_spreads_a_column_of_chunks_over_all_bank_groups() {
        for chunk in 0..8 {
            let mut slots: [u32; 8] = core::array::from_fn(|row| (swizzled_128b_offset(row as u32, chunk) % 128) / 16);
            slots.sort_unstable();
            assert_eq!(slots, [0, 1, 2, 3, 4, 5, 6, 7], "chunk {chunk}");
        }
        // A row keeps its 128 bytes; the next 8-row atom starts 1024 bytes on.
        assert_eq!(swizzled_128b_offset(3, 5), 3 * 128 + ((5 ^ 3) << 4));
        assert_eq!(swizzled_128b_offset(8, 0), 1024);
    }
}
