//! The converters (fp8 KV only): the producer warpgroup's warps 2 and 3 widen each staged fp8 K
//! and V tile into the K and V rings the consumers read, as f16 operands in the 128-byte swizzle
//! the bulk copies of 16-bit KV write. Every fp8 value is an f16: the widening is exact (one
//! `cvt.rn.f16x2.e4m3x2` or `.e5m2x2` per pair of bytes, on the conversion pipe: a byte permute
//! for E5M2 ran on the ALU pipe beside the consumers' max trees and masks, 5 % slower), and the
//! scales apply in f32 in the consumers.
//!
//! Per tile, K one tile ahead of V (the consumers read K of tile i before V of tile i - 1): wait
//! for the staging stage's bytes and for the operand stage to be empty, widen the tile (each
//! converter the same 16 dims of every 8th key at D 128, 16th at D 64: 16 raw bytes to 32 of f16),
//! copy K's presence words along, make the writes visible to the tensor cores (the async proxy),
//! then arrive on the operand stage's full barrier and the staging stage's empty one.

use super::layout::SharedLayout;
use super::producer::item_keys;
use super::trace;
use super::{converter_loads_ahead, ws_keys, CONVERTERS};
use crate::attention::planner::TiledPointers;
use crate::attention::RpaParams;
use crate::kernels::kv_operand::StagedKv;
use crate::kernels::prefill::item::ItemRows;
use crate::kernels::unroll;
use crate::math::opaque_u32;
use crate::shared::{load_v4, store_v4};
use crate::wgmma::{self, swizzled_128b_offset};

/// Widens one staged tile (`staged`, key `k` at `k * D` bytes) into the operand tile at `tile`
/// (64-dim column blocks of `keys` 128-byte rows, swizzled); `converter`: 0..[`CONVERTERS`].
///
/// Converter `t` takes the 16-byte chunk `t % (D / 16)` (dims `16 (t % (D / 16))` ..) of key
/// `t / (D / 16)` (at D 128, rows swapped in pairs for the upper 64 dims, below) and of every
/// `CONVERTERS / (D / 16)`-th key after it, a multiple of 8 keys apart, so the swizzle (key % 8)
/// stays too: each step moves the source by `16 CONVERTERS` bytes and the destination by
/// `CONVERTERS / (D / 16)` rows, no index arithmetic.
///
/// `AHEAD` chunks ([`converter_loads_ahead`]) are in flight while one is widened: a shared-memory
/// load takes longer than the ~20 instructions that widen and store a chunk, and with one load
/// ahead the converters waited on each (v35), with two at head_dim 128 still (v42.6). The loop body
/// is that many chunks, each buffer refilled in place; not unrolled further: unrolled, ptxas kept
/// every chunk's addresses and spilled the producer's registers.
///
/// # Safety
/// `staged` holds a staged tile whose bytes have landed (its full barrier waited for) and `tile`
/// an operand stage this thread's converters own (its empty barrier waited for), both in this
/// block's shared memory.
#[inline(always)]
unsafe fn widen_tile<KV: StagedKv, const D: usize, const AHEAD: usize>(staged: u32, tile: u32, converter: u32) {
    let keys = ws_keys(D as u32);
    let row_chunks = D as u32 / 16;
    const { assert!(CONVERTERS.is_multiple_of(8 * 8), "key steps of whole swizzle atoms at D <= 128") };
    // Every converter's chunks of a tile (keys D / 16 / CONVERTERS: 16 at D 128, 8 at D 64) come
    // in whole loop bodies.
    const { assert!((ws_keys(D as u32) * D as u32 / 16 / CONVERTERS).is_multiple_of(AHEAD as u32)) };
    // At D 128 a key row is two column blocks of 64 dims, a multiple of 128 bytes apart: lanes
    // that widen dims 0-63 and 64-127 of the same key would store to the same banks (the 8 lanes
    // of a 16-byte store's phase: half of them twice, 2x the wavefronts, ncu). Pairs of rows
    // swap their upper halves instead, so a phase's lanes take dims 0-63 of key 2m and 64-127 of
    // key 2m + 1, whose swizzles (key % 8) differ in their last bit: 8 distinct 16-byte banks.
    let chunk = converter % row_chunks;
    let key = (converter / row_chunks) ^ (chunk / 4);
    // Dims 16 chunk .. + 16: column block chunk / 4, its 16-byte chunks 2 (chunk % 4) and + 1.
    let first = 2 * (chunk % 4);
    let mut to = tile + (chunk / 4) * keys * 128 + swizzled_128b_offset(key, first);
    let second = swizzled_128b_offset(key, first + 1) as i32 - swizzled_128b_offset(key, first) as i32;
    let to_step = (CONVERTERS / row_chunks) * 128;
    let step = 16 * CONVERTERS;
    let mut from = staged + key * D as u32 + 16 * chunk;
    let end = staged + opaque_u32(keys * D as u32);
    // (Loads past the tile's end, on the last steps, read its last chunk again, unused.)
    let last = end - 16;
    let mut raw = [[0u32; 4]; AHEAD];
    unroll::<AHEAD>(|j| raw[j] = load_v4((from + j as u32 * step).min(last)));
    while from < end {
        unroll::<AHEAD>(|j| {
            let chunk = raw[j];
            raw[j] = load_v4((from + (j + AHEAD) as u32 * step).min(last));
            // Each word's four bytes as two f16 pairs (dims in order: the K operand's widening).
            let wide = chunk.map(KV::k_operand);
            let at = to + j as u32 * to_step;
            store_v4(at, [wide[0][0], wide[0][1], wide[1][0], wide[1][1]]);
            store_v4(at.wrapping_add_signed(second), [wide[2][0], wide[2][1], wide[3][0], wide[3][1]]);
        });
        from += AHEAD as u32 * step;
        to += AHEAD as u32 * to_step;
    }
}

/// One tile's hand-over (tile counter `n`) from the K staging ring to the K ring, with the
/// tile's presence words (`VALUES` false), or from the V staging ring to the V ring.
///
/// # Safety
/// Every converter calls it for the same tiles in the same order, the producer filling the
/// staging rings for them; the rings are initialized ([`super::rpa_tiled_ws`]); in a trace build,
/// `plan` and `plan_capacity` as [`trace::mark_tile`] takes them.
#[inline(always)]
unsafe fn convert_tile<KV: StagedKv, const D: usize, const PW: usize, const VALUES: bool>(
    smem: SharedLayout,
    n: u32,
    converter: u32,
    (plan, plan_capacity): (*const u32, u32),
) {
    let (staging, operands) = if VALUES { (smem.v8_ring(), smem.v_ring()) } else { (smem.k8_ring(), smem.k_ring()) };
    let (s8, s) = (staging.stage(n), operands.stage(n));
    staging.wait(s8);
    operands.acquire(s);
    // `converter_loads_ahead` as a const argument (one branch, folded): the two depths it names.
    const { assert!(matches!(converter_loads_ahead(D as u32), 2 | 4), "a depth widen is instantiated for") };
    let widen = |staged: u32, tile: u32| {
        if converter_loads_ahead(D as u32) == 4 {
            widen_tile::<KV, D, 4>(staged, tile, converter)
        } else {
            widen_tile::<KV, D, 2>(staged, tile, converter)
        }
    };
    if VALUES {
        widen(smem.v8(s8.index), smem.v(s.index));
    } else {
        widen(smem.k8(s8.index), smem.k(s.index));
        if converter == 0 {
            let (from, to) = (smem.staged_presence(s8.index), smem.presence(s.index));
            unroll::<PW>(|w| *to.add(w) = *from.add(w));
        }
    }
    // The tensor cores read the stage through the async proxy.
    wgmma::fence_proxy_async_shared();
    operands.commit(s);
    staging.release(s8);
    if trace::ENABLED && !VALUES && converter == 0 {
        trace::mark_tile(plan, plan_capacity, 0, n, trace::TileEvent::KConverted);
    }
}

/// A converter's part of one item (`converter` 0..[`CONVERTERS`]): every K and V tile of the item,
/// in the order the consumers read them (K of tile i, then V of tile i - 1). `tiles`: the block's
/// tile counter (every role counts the same tiles).
///
/// # Safety
/// The producer's warps fill the staging rings for the same items and tiles; every converter
/// calls it for every item.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn convert_item<Q, KV: StagedKv, const D: usize, const PW: usize>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    smem: SharedLayout,
    converter: u32,
    tiles: &mut u32,
    seq: u32,
    r0: u32,
    rc: u32,
) {
    let (lo, hi) = item_keys(&ItemRows::load(ptr, p, seq, r0, rc));
    let keys = ws_keys(D as u32);
    let num_tiles = (hi - lo).div_ceil(keys);
    let first_tile = *tiles;
    *tiles += num_tiles;
    // The tile trace's words (`trace::mark_tile`; unused outside a trace build).
    let traced = (ptr.plan, p.plan_capacity);
    for i in 0..=num_tiles {
        if i < num_tiles {
            convert_tile::<KV, D, PW, false>(smem, first_tile + i, converter, traced);
        }
        if i > 0 {
            convert_tile::<KV, D, PW, true>(smem, first_tile + i - 1, converter, traced);
        }
    }
}
