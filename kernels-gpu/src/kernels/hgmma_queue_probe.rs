//! How many `wgmma`s a warpgroup may issue before the issue itself blocks (the tensor pipe's
//! queue), in the sm_90a image only: `benches/hgmma_queue.rs` launches it and prints the table.
//!
//! The warp-specialized prefill's consumers issue a tile's S and P V products (16 `m64n128k16`s
//! at head_dim 128) back to back inside their turn, and the turn's length decides how soon the
//! other consumer may issue; where the issue blocks shapes every schedule of those products
//! (benchmarks/NOTES.md "v42", "v43"). This kernel times, with `%clock64`, a warpgroup issuing
//! [`HGMMA_QUEUE_PROBE_MAX`] products in a row: when each product's issue returned, and when all
//! of them had completed, from the warpgroup's start. A clock read between the products keeps
//! them in flight together (ptxas does not serialize them for it; a store there would). With two
//! issuing warpgroups they start together, or (`staggered`) the second once the first's issue
//! has returned, as the consumers' turns order them.
//!
//! Launch: one block of 256 threads (two warpgroups), [`HGMMA_QUEUE_PROBE_SHARED_BYTES`] of
//! dynamic shared memory; `out` has room for 2 x [`HGMMA_QUEUE_PROBE_WORDS`] `u64`.

use super::unroll;
use crate::barrier::{self, ids};
use crate::kernel;
use crate::math::opaque_u32;
use crate::num::Bf16;
use crate::shared::{align_swizzle_128b, dynamic_shared_mem, shared_address, SWIZZLE_128B_ALIGN};
use crate::thread::{clock64, sync_threads, thread_idx_x};
use crate::wgmma::{
    commit_group, descriptor, fence, fence_proxy_async_shared, keep_accumulator, keep_fragments, mma_m64n128k16_rs,
    mma_m64n128k16_ss, wait_group, Swizzle,
};

/// A's tile in shared memory: 64 x 64 bf16 (one k-step's 16 columns are what a product reads).
const A_BYTES: u32 = 64 * 64 * 2;
/// B's tile, after A's: 128 x 64 bf16.
const B_BYTES: u32 = 128 * 64 * 2;

/// Dynamic shared memory of the probe: A and B, zeroed, plus 1 KiB to align them to the swizzle's
/// 1024 bytes.
pub const HGMMA_QUEUE_PROBE_SHARED_BYTES: u32 = A_BYTES + B_BYTES + SWIZZLE_128B_ALIGN;

/// The products a warpgroup issues in a row.
pub const HGMMA_QUEUE_PROBE_MAX: u32 = 16;

/// Words a warpgroup writes: the clock at its start, after each product's issue and once all are
/// done, then a word of the product.
pub const HGMMA_QUEUE_PROBE_WORDS: usize = HGMMA_QUEUE_PROBE_MAX as usize + 3;

/// [`HGMMA_QUEUE_PROBE_MAX`] `m64n128k16` products issued back to back (A from shared memory, or
/// from registers: the P V's form), one commit, then their completion awaited. Returns the clock
/// at the start, once each product's issue has returned, and once all are done, and a word of
/// the product. `arrive`: arrive on the second warpgroup's turn once the issue has returned.
///
/// # Safety
/// Every thread of the warpgroup calls it alike, `a` and `b` descriptors of zeroed, published
/// shared memory; with `arrive`, the other warpgroup syncs on [`ids::PROBE_TURN`].
#[inline(always)]
unsafe fn timed<const A_IN_REGISTERS: bool>(a: u64, b: u64, arrive: bool) -> [u64; HGMMA_QUEUE_PROBE_WORDS] {
    let mut times = [0u64; HGMMA_QUEUE_PROBE_WORDS];
    let mut acc = [0.0f32; 64];
    // A's registers written once, before the fence: ptxas serializes every `wgmma` of a kernel
    // in which a later one's A registers are written while one is in flight (NOTES "v5").
    let mut p = [[opaque_u32(0); 4]; 1];
    keep_fragments(&mut p);
    times[0] = clock64();
    keep_accumulator(&mut acc);
    fence();
    unroll::<{ HGMMA_QUEUE_PROBE_MAX as usize }>(|k| {
        if A_IN_REGISTERS {
            mma_m64n128k16_rs::<Bf16, 0>(&mut acc, p[0], b, k > 0);
        } else {
            mma_m64n128k16_ss::<Bf16, 0>(&mut acc, a, b, k > 0);
        }
        times[k + 1] = clock64();
    });
    commit_group();
    if arrive {
        barrier::arrive_named::<{ ids::PROBE_TURN.start }>(256);
    }
    wait_group::<0>();
    keep_accumulator(&mut acc);
    keep_fragments(&mut p);
    times[HGMMA_QUEUE_PROBE_WORDS - 2] = clock64();
    times[HGMMA_QUEUE_PROBE_WORDS - 1] = acc[0].to_bits() as u64;
    times
}

/// The probe (see the module docs): `issuers` warpgroups issuing (1 or 2), `staggered` (the
/// second after the first's issue has returned), `a_in_registers` (the P V's form, else both
/// operands in shared memory as S's). Warpgroup `w` writes its [`HGMMA_QUEUE_PROBE_WORDS`] at
/// `out + w * HGMMA_QUEUE_PROBE_WORDS`.
///
/// # Safety
/// `out` a device pointer with room for 2 x [`HGMMA_QUEUE_PROBE_WORDS`] `u64`; one block of 256
/// threads with [`HGMMA_QUEUE_PROBE_SHARED_BYTES`] of dynamic shared memory.
#[cfg(any(xgk_sm90, not(target_arch = "nvptx64")))]
#[kernel]
pub unsafe fn hgmma_queue_probe(out: *mut u64, issuers: u32, staggered: u32, a_in_registers: u32) {
    let tid = thread_idx_x();
    let group = tid / 128;
    let smem: *mut u8 = dynamic_shared_mem();
    let base = shared_address(smem);
    let pad = align_swizzle_128b(base) - base;
    let tile = smem.add(pad as usize);
    let mut i = tid;
    while i < (A_BYTES + B_BYTES) / 16 {
        *(tile.add(16 * i as usize) as *mut [u32; 4]) = [0; 4];
        i += 256;
    }
    fence_proxy_async_shared();
    sync_threads();
    if group >= issuers.min(2) {
        return;
    }
    let a = descriptor(shared_address(tile), 16, 8 * 128, Swizzle::Bytes128);
    let b = descriptor(shared_address(tile) + A_BYTES, 16, 8 * 128, Swizzle::Bytes128);
    // The second warpgroup's turn (staggered): once the first's issue has returned.
    let second_waits = staggered != 0 && issuers == 2;
    if second_waits && group == 1 {
        barrier::sync_named::<{ ids::PROBE_TURN.start }>(256);
    }
    let arrive = second_waits && group == 0;
    let times = if a_in_registers != 0 { timed::<true>(a, b, arrive) } else { timed::<false>(a, b, arrive) };
    if tid.is_multiple_of(128) {
        let at = out.add(HGMMA_QUEUE_PROBE_WORDS * group as usize);
        unroll::<HGMMA_QUEUE_PROBE_WORDS>(|w| *at.add(w) = times[w]);
    }
}
