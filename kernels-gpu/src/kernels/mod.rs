//! The kernels. Each `#[kernel]` is exported from the PTX under its own name; the host looks
//! kernels up by the names the kernel ids spell (`host/src/ops/paged_attention/kernel_id.rs`).
//!
//! - [`decode`]: the decode kernels (a few query rows per sequence over long contexts): the
//!   general one ([`decode::general`]), tensor-core rows ([`decode::mma`]), the pipelined ones
//!   ([`decode::pipelined`], in the head-rows or [`decode::key_rows`] layout), and how their
//!   warps and splits merge into the output ([`decode::merge`], the merge kernels with it);
//! - [`prefill`]: the query-tile kernels: [`prefill::tiled`] (sm_80 `mma.sync` tiles, and the
//!   `wgmma` tiles) and [`prefill::hopper`] (warp-specialized, TMA and `wgmma`: Hopper's prefill),
//!   with the tile item's rows, stores and P V product in [`prefill::item`];
//! - [`mix`]: a mixed batch's decode and prefill work in one launch;
//! - [`wgmma_selftest`] and [`hgmma_queue_probe`] (sm_90a): the warpgroup MMA primitives checked
//!   against the CPU (`tests/gpu/runtime.rs`), and how many of them a warpgroup issues before the issue
//!   blocks (`benches/hgmma_queue.rs`);
//! - [`kv_operand`]: how 16-bit and fp8 KV enter the tensor cores, shared by the pipelined decode,
//!   the Hopper prefill and the mix;
//! - the shared parts of attention (softmax, masks, the device planner) live in
//!   [`crate::attention`].

mod block_slot;
pub mod decode;
pub mod hgmma_queue_probe;
pub mod kv_operand;
pub mod mix;
pub mod prefill;
pub mod simple_add;
pub mod wgmma_selftest;

/// Copies `bytes` bytes in the widest chunks their count allows (16, 8, 4, 2 or 1 bytes); the
/// global-memory side (`src` when `GLOBAL_IS_SRC`, else `dst`) is accessed aligned, the other side
/// (a local array, kept in registers) unaligned.
///
/// # Safety
/// `src` is readable and `dst` writable for `bytes` bytes, and the global side is aligned to the
/// chunk `bytes` selects (16, 8, 4, 2 or 1 bytes).
#[inline(always)]
unsafe fn copy_widest<const GLOBAL_IS_SRC: bool>(src: *const u8, dst: *mut u8, bytes: usize) {
    macro_rules! copy_as {
        ($w:ty) => {{
            let w = core::mem::size_of::<$w>();
            let mut i = 0;
            while i < bytes / w {
                let (s, d) = ((src as *const $w).add(i), (dst as *mut $w).add(i));
                if GLOBAL_IS_SRC {
                    core::ptr::write_unaligned(d, core::ptr::read(s));
                } else {
                    core::ptr::write(d, core::ptr::read_unaligned(s));
                }
                i += 1;
            }
        }};
    }
    if bytes.is_multiple_of(16) {
        copy_as!(u128)
    } else if bytes.is_multiple_of(8) {
        copy_as!(u64)
    } else if bytes.is_multiple_of(4) {
        copy_as!(u32)
    } else if bytes.is_multiple_of(2) {
        copy_as!(u16)
    } else {
        copy_as!(u8)
    }
}

/// Loads `N` consecutive elements with the widest aligned vector loads their byte size allows.
///
/// # Safety
/// `src` must be valid for reading `N` elements and aligned to `min(16, N * size_of::<T>())`.
#[inline(always)]
pub(crate) unsafe fn load_vec<T: Copy, const N: usize>(src: *const T) -> [T; N] {
    let mut out = core::mem::MaybeUninit::<[T; N]>::uninit();
    copy_widest::<true>(src as *const u8, out.as_mut_ptr() as *mut u8, N * core::mem::size_of::<T>());
    out.assume_init()
}

/// Stores `N` consecutive elements with the widest aligned vector stores their size allows.
///
/// # Safety
/// `dst` must be valid for writing `N` elements and aligned like [`load_vec`]'s `src`.
#[inline(always)]
pub(crate) unsafe fn store_vec<T: Copy, const N: usize>(dst: *mut T, value: [T; N]) {
    copy_widest::<false>(&value as *const [T; N] as *const u8, dst as *mut u8, N * core::mem::size_of::<T>());
}

/// Calls `f(0), f(1), ..., f(N-1)` with literal indices (N <= 32: O's 32 n-tiles at head_dim 256).
///
/// rustc has no unroll pragma, and LLVM gives up unrolling large loop bodies; a register array
/// indexed by a run-time loop counter then moves to local memory. Indexing per-lane arrays only
/// inside `unroll` keeps them in registers (ptxas reports a 0-byte stack frame).
#[inline(always)]
pub(crate) fn unroll<const N: usize>(mut f: impl FnMut(usize)) {
    const { assert!(N <= 32, "unroll supports at most 32 iterations") };
    macro_rules! steps {
        ($($i:literal)*) => {$( if $i < N { f($i) } )*};
    }
    steps!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
}
