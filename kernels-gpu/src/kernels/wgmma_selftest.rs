//! Self-test of the warpgroup MMA primitives ([`crate::wgmma`]), in the sm_90a image only: one
//! warpgroup multiplies small bf16 tiles with the operand layouts a Hopper prefill kernel uses and
//! writes the f32 products; `tests/gpu/runtime.rs` compares them with the CPU. The descriptors' byte
//! offsets come from the host, so one run can check the documented encoding and tell a wrong one
//! from a wrong layout.
//!
//! - `mode` 0, S = Q Kᵀ: `d[64][64] = a[64][64] · b[64][64]ᵀ`, both operands K-major (rows of 64
//!   K elements) in shared memory, 128-byte swizzle, four `m64n64k16` k-steps.
//! - `mode` 1, O = P V: `d[64][128] = a[64][64] · b[64][128]`, A from registers, B stored as it
//!   lies in memory (`[k][n]`: MN-major, read transposed) in two 64-column blocks, four
//!   `m64n128k16` k-steps.
//! - `mode` 2, the tiled kernel's S at head_dim 128: `d[64][64] = a[64][128] · b[64][128]ᵀ`, A from
//!   registers, B K-major in two 64-column blocks, eight `m64n64k16` k-steps.
//! - `mode` 3, its O += P V at head_dim 64: `d[64][64] = a[64][64] · b[64][64]`, A from registers,
//!   B MN-major (read transposed), four `m64n64k16` k-steps.
//!
//! Launch: one block of 128 threads, [`WGMMA_SELFTEST_SHARED_BYTES`] of dynamic shared memory.

use super::{load_vec, unroll};
use crate::kernel;
use crate::num::Bf16;
use crate::shared::{align_swizzle_128b, dynamic_shared_mem, shared_address, SWIZZLE_128B_ALIGN};
use crate::thread::{sync_threads, thread_idx_x};
use crate::warp::{lane_id, WARP_SIZE};
use crate::wgmma::{
    commit_group, descriptor, fence, fence_proxy_async_shared, keep_accumulator, mma_m64n128k16_rs, mma_m64n64k16_rs,
    mma_m64n64k16_ss, swizzled_128b_offset, wait_group, Swizzle,
};

/// Dynamic shared memory of the self-test: two 8 KiB operand tiles (mode 0) or one 16 KiB one
/// (mode 1), plus 1 KiB to align them to the swizzle's 1024 bytes.
pub const WGMMA_SELFTEST_SHARED_BYTES: u32 = 16 * 1024 + SWIZZLE_128B_ALIGN;

/// Copies `src` (`rows` x `cols` 16-bit elements, row-major, `cols` a multiple of 64) into shared
/// memory at `dst` as 128-byte-swizzled column blocks: block `kb` (columns `64kb..64kb+64`) at
/// `dst + kb * rows * 128`. The 128 threads share the 16-byte chunks.
///
/// # Safety
/// The block's 128 threads call it (`tid` their index); `cols` is a multiple of 64, `src` holds
/// `rows * cols` readable elements (16-byte aligned), `dst` is `rows * cols * 2` bytes of shared
/// memory aligned to the swizzle's 1024 bytes.
#[inline(always)]
unsafe fn stage_swizzled(src: *const u16, rows: u32, cols: u32, dst: *mut u8, tid: u32) {
    let chunks_per_row = cols / 8;
    let mut i = tid;
    while i < rows * chunks_per_row {
        let (row, chunk) = (i / chunks_per_row, i % chunks_per_row);
        let v: [u32; 4] = load_vec(src.add((row * cols + chunk * 8) as usize) as *const u32);
        let at = (chunk / 8) * rows * 128 + swizzled_128b_offset(row, chunk % 8);
        *(dst.add(at as usize) as *mut [u32; 4]) = v;
        i += 128;
    }
}

/// Two adjacent 16-bit elements of row-major `m` (`cols` wide) as one register, the first in the
/// low half.
///
/// # Safety
/// `m` holds elements `(row, col)` and `(row, col + 1)` of a row-major matrix `cols` wide.
#[inline(always)]
unsafe fn pair(m: *const u16, cols: u32, row: u32, col: u32) -> u32 {
    *m.add((row * cols + col) as usize) as u32 | ((*m.add((row * cols + col + 1) as usize) as u32) << 16)
}

/// The `mma.m16n8k16` A fragment of k-step `k` (columns `16k..16k+16`) of row-major `a` (`cols`
/// wide) for this lane's rows `row` and `row + 8` (`c = lane % 4`), straight from global memory.
///
/// # Safety
/// `a` holds rows up to `row + 8` and columns up to `16k + 16` of a row-major matrix `cols` wide.
#[inline(always)]
unsafe fn a_fragment(a: *const u16, cols: u32, row: u32, c: u32, k: u32) -> [u32; 4] {
    let col = 16 * k + 2 * c;
    [pair(a, cols, row, col), pair(a, cols, row + 8, col), pair(a, cols, row, col + 8), pair(a, cols, row + 8, col + 8)]
}

/// Writes this lane's accumulators of an `m64n(8 NT)` product (rows `row`, `row + 8`; the layout of
/// the [`crate::wgmma`] docs) into row-major `d`, `8 NT` columns wide.
///
/// # Safety
/// `d` has rows up to `row + 8` of a row-major matrix `8 NT` columns wide; `acc` holds `4 NT`
/// values.
#[inline(always)]
unsafe fn store_accumulators<const NT: usize>(acc: &[f32], d: *mut f32, row: u32, c: u32) {
    let cols = 8 * NT as u32;
    unroll::<NT>(|j| {
        let col = 8 * j as u32 + 2 * c;
        for (r, first) in [(row, 4 * j), (row + 8, 4 * j + 2)] {
            *d.add((r * cols + col) as usize) = acc[first];
            *d.add((r * cols + col + 1) as usize) = acc[first + 1];
        }
    });
}

/// The self-test kernel (see the module docs).
///
/// # Safety
/// `a` and `b` hold the operands of `mode` (module docs; at most 64 x 128 elements each), `d` room
/// for the 64 x 64 or 64 x 128 `f32` product, all device pointers; one block of 128 threads with
/// [`WGMMA_SELFTEST_SHARED_BYTES`] of dynamic shared memory.
#[cfg(any(xgk_sm90, not(target_arch = "nvptx64")))]
#[kernel]
#[allow(clippy::too_many_arguments)]
pub unsafe fn wgmma_selftest_bf16(
    a: *const u16,
    b: *const u16,
    d: *mut f32,
    mode: u32,
    a_leading: u32,
    a_stride: u32,
    b_leading: u32,
    b_stride: u32,
) {
    let tid = thread_idx_x();
    let (warp, lane) = (tid / WARP_SIZE, lane_id());
    let (g, c) = (lane / 4, lane % 4);
    let row = 16 * warp + g; // and row + 8
    let smem: *mut u8 = dynamic_shared_mem();
    let base = shared_address(smem);
    let pad = align_swizzle_128b(base) - base;
    let tile = smem.add(pad as usize);
    let tile_address = shared_address(tile);
    if mode == 0 {
        stage_swizzled(a, 64, 64, tile, tid);
        stage_swizzled(b, 64, 64, tile.add(8192), tid);
        fence_proxy_async_shared();
        sync_threads();
        let mut acc = [0.0f32; 32];
        keep_accumulator(&mut acc);
        fence();
        unroll::<4>(|k| {
            let step = k as u32 * 32; // 16 elements of K inside the 128-byte rows
            let da = descriptor(tile_address + step, a_leading, a_stride, Swizzle::Bytes128);
            let db = descriptor(tile_address + 8192 + step, b_leading, b_stride, Swizzle::Bytes128);
            mma_m64n64k16_ss::<Bf16, 0>(&mut acc, da, db, k > 0);
        });
        commit_group();
        wait_group::<0>();
        keep_accumulator(&mut acc);
        store_accumulators::<8>(&acc, d, row, c);
    } else if mode == 2 || mode == 3 {
        let k_steps = if mode == 2 { 8 } else { 4 };
        let a_cols = 16 * k_steps as u32;
        stage_swizzled(b, 64, if mode == 2 { 128 } else { 64 }, tile, tid);
        let mut frag = [[0u32; 4]; 8];
        unroll::<8>(|k| {
            if k < k_steps {
                frag[k] = a_fragment(a, a_cols, row, c, k as u32);
            }
        });
        fence_proxy_async_shared();
        sync_threads();
        let mut acc = [0.0f32; 32];
        keep_accumulator(&mut acc);
        fence();
        if mode == 2 {
            unroll::<8>(|k| {
                let at = tile_address + (k as u32 / 4) * 8192 + (k as u32 % 4) * 32;
                let db = descriptor(at, b_leading, b_stride, Swizzle::Bytes128);
                mma_m64n64k16_rs::<Bf16, 0>(&mut acc, frag[k], db, k > 0);
            });
        } else {
            unroll::<4>(|k| {
                let db = descriptor(tile_address + k as u32 * 16 * 128, b_leading, b_stride, Swizzle::Bytes128);
                mma_m64n64k16_rs::<Bf16, 1>(&mut acc, frag[k], db, k > 0);
            });
        }
        commit_group();
        wait_group::<0>();
        keep_accumulator(&mut acc);
        store_accumulators::<8>(&acc, d, row, c);
    } else {
        stage_swizzled(b, 64, 128, tile, tid);
        let mut frag = [[0u32; 4]; 4];
        unroll::<4>(|k| frag[k] = a_fragment(a, 64, row, c, k as u32));
        fence_proxy_async_shared();
        sync_threads();
        let mut acc = [0.0f32; 64];
        keep_accumulator(&mut acc);
        fence();
        unroll::<4>(|k| {
            let step = k as u32 * 16 * 128; // 16 rows of K
            let db = descriptor(tile_address + step, b_leading, b_stride, Swizzle::Bytes128);
            mma_m64n128k16_rs::<Bf16, 1>(&mut acc, frag[k], db, k > 0);
        });
        commit_group();
        wait_group::<0>();
        keep_accumulator(&mut acc);
        store_accumulators::<16>(&acc, d, row, c);
    }
}
