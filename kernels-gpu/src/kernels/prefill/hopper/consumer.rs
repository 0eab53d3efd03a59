//! The consumer warpgroups: per tile S = Q Kᵀ, mask and online softmax, O += P V (`wgmma`), in
//! FlashAttention 3's order, with the ping-pong between the consumers (two, or three at head_dim
//! 64 with 16-bit KV). With fp8 KV the
//! operands are f16: each warp first scales its 16 rows of a bf16 Q tile into f16's range
//! ([`q_to_f16_operand`]).

use super::epilogue::{store_rows_staged, store_rows_tma};
use super::layout::SharedLayout;
use super::producer::item_keys;
use super::trace::{self, Point, TileEvent};
use super::{ws_keys, ws_q_slots, CONSUMER_M, WARPGROUP};
use crate::attention::mask::mask_logits;
use crate::attention::planner::{TiledPointers, NO_SEQUENCE};
use crate::attention::softmax::{online_softmax_weights_f32, pack_weights, LogitScale};
use crate::attention::RpaParams;
use crate::barrier::{self, ids};
use crate::kernels::kv_operand::StagedKv;
use crate::kernels::prefill::item::{
    keep_o, pv_descriptor, store_rows, wgmma_pv_issue, wgmma_pv_issue_at, zero_item_rows, ItemRows,
};
use crate::kernels::unroll;
use crate::mma::MmaElement;
use crate::shared::{load_v4, store_v4};
use crate::thread::thread_idx_x;
use crate::warp::{lane_id, warp_max_f32, WARP_SIZE};
use crate::wgmma;

/// Rewrites warp `warp`'s 16 rows of a consumer's bf16 Q tile at `q_tile` (64-dim column blocks
/// of 64 128-byte rows; each row's 16-byte chunks stay where they are) as f16 times a power of
/// two, the warp's factor, chosen so that its largest |q| lands in `[2^14, 2^15)`: the tensor
/// cores' f16 operands for fp8 KV. Returns the factor (1 for an all-zero tile); the logits then
/// carry it, and the caller divides it out of their scale. The warp's rows are its S rows (the
/// A operand's rows 16w..16w+16), so each warp's scale is its own. The caller publishes the
/// writes to the tensor cores (a proxy fence and the warpgroup's barrier).
///
/// # Safety
/// `q_tile` is the consumer's Q tile in this block's shared memory, its bytes landed (the Q
/// slot's full barrier waited for), read and written by no other warp until the caller's barrier.
#[inline(always)]
unsafe fn q_to_f16_operand<const D: usize>(q_tile: u32, warp: u32) -> f32 {
    // Chunks of the warp's rows: 128 per column block (16 rows x 8), D / 16 per lane.
    let chunk_address = |j: u32| q_tile + (j / 128) * CONSUMER_M * 128 + warp * 16 * 128 + 16 * (j % 128);
    let halves = |w: u32| (f32::from_bits(w << 16), f32::from_bits(w & 0xffff_0000));
    let lane = lane_id();
    let mut largest = 0.0f32;
    unroll::<16>(|i| {
        if i >= D / 16 {
            return;
        }
        let v = load_v4(chunk_address(lane + 32 * i as u32));
        unroll::<4>(|r| {
            let (lo, hi) = halves(v[r]);
            largest = largest.max(lo.abs()).max(hi.abs());
        });
    });
    let largest = warp_max_f32(largest);
    // Unbiased exponent of the largest (zero: the factor is 1; the clamp keeps 2^shift normal).
    let exponent = ((largest.to_bits() >> 23) & 0xff) as i32 - 127;
    let shift = if largest == 0.0 { 0 } else { (14 - exponent).clamp(-126, 126) };
    let factor = f32::from_bits(((shift + 127) as u32) << 23);
    unroll::<16>(|i| {
        if i >= D / 16 {
            return;
        }
        let at = chunk_address(lane + 32 * i as u32);
        let v = load_v4(at);
        let mut out = [0u32; 4];
        unroll::<4>(|r| {
            let (lo, hi) = halves(v[r]);
            out[r] = f16::pack2(lo * factor, hi * factor);
        });
        store_v4(at, out);
    });
    factor
}

/// Pins S's registers (64 or 128 keys: 32 or 64 f32) around a `wgmma` that writes them.
#[inline(always)]
pub(super) fn keep_s<const KN: usize>(s: &mut [[f32; 4]; KN]) {
    const { assert!(KN == 8 || KN == 16, "64- or 128-key tiles") };
    // SAFETY (of the casts): [[f32; 4]; KN] is 4 KN contiguous f32.
    if KN == 16 {
        wgmma::keep_accumulator(unsafe { &mut *(s.as_mut_ptr() as *mut [f32; 64]) });
    } else {
        wgmma::keep_accumulator(unsafe { &mut *(s.as_mut_ptr() as *mut [f32; 32]) });
    }
}

/// A consumer's part of one item: its 64 M rows (`consumer` 0..C: M rows `64 consumer ..`),
/// every key tile of the item from the rings (a tile none of its rows sees is waited for and
/// released unread), then its rows of the output. `tiles`: the block's tile counter.
///
/// # Safety
/// Every thread of consumer `consumer`'s warpgroup calls it, in uniform control flow, for the
/// item the producer warps load next (sequence `seq`, rows `[r0, r0 + rc)`, KV head `g`: the
/// schedule's entry), with the block's rings initialized in `smem` and `tiles` / `items` in step
/// with the producer's counts; `o_map` acquired where Q and the output go by the maps; `ptr` and
/// `p` as [`rpa_tiled_ws`] takes them.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn consume_item<
    Q: MmaElement,
    KV: StagedKv,
    const D: usize,
    const KSTEPS: usize,
    const NTILES: usize,
    const KN: usize,
    const KSP: usize,
    const PW: usize,
    const C: u32,
>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    smem: SharedLayout,
    consumer: u32,
    o_map: u64,
    tiles: &mut u32,
    items: &mut u32,
    seq: u32,
    r0: u32,
    rc: u32,
    g: u32,
) {
    let group = p.num_q_heads / p.num_kv_heads;
    let ctid = thread_idx_x() - WARPGROUP; // 0..128 C over the consumers
    let wtid = ctid % WARPGROUP; // within this consumer
    if seq == NO_SEQUENCE {
        zero_item_rows::<Q, D>(ptr, p, r0, rc, g, ctid, C * WARPGROUP);
        return;
    }

    // The item-boundary trace's steps (`trace::now`: 0 outside a trace build).
    let entered = trace::now();
    let warp = wtid / WARP_SIZE;
    let item = ItemRows::load(ptr, p, seq, r0, rc);
    let (lo, hi) = item_keys(&item);
    let keys = ws_keys(D as u32);
    let num_tiles = (hi - lo).div_ceil(keys);

    // This consumer's rows, and the keys they visit (tiles outside are skipped unread).
    let c_base = consumer * CONSUMER_M;
    let (c_lo, c_hi, _, _) = item.m_rows_keys(c_base, CONSUMER_M, group);
    // Warp w owns M rows c_base + 16w .. + 16; this lane rows lane/4 and lane/4 + 8 of them.
    let (m_rows, rows) = item.warp_rows(c_base + warp * 16, group);
    let rows_ready = trace::now();

    // Q: this consumer's 64 M rows, loaded by the producer's Q loaders (`load_q_item`).
    let (q_ring, k_ring, v_ring) = (smem.q_ring(), smem.k_ring(), smem.v_ring());
    let q_stage = q_ring.stage(*items);
    *items += 1;
    let q_tile = smem.q(q_stage.index, consumer);
    q_ring.wait(q_stage);
    // The start trace's steps (`trace`; nothing outside a trace build): the block's first item,
    // consumer 0's thread 0.
    let traced = trace::ENABLED && *tiles == 0 && consumer == 0 && wtid == 0;
    if traced {
        trace::mark(ptr.plan, p.plan_capacity, Point::FirstQReady);
    }
    let q_desc = wgmma::descriptor(q_tile, 16, 8 * 128, wgmma::Swizzle::Bytes128);

    // fp8 KV: f16 operands, K's scale and q's factor on the logits (in f32).
    let logit = if KV::FP8 {
        let factor = if Q::IS_BF16 {
            let factor = q_to_f16_operand::<D>(q_tile, warp);
            // The rewritten tile before any warp's S product reads it (the async proxy).
            wgmma::fence_proxy_async_shared();
            // Each consumer its own id (a count of one warpgroup completes with any 4 warps), in
            // one instruction, as the epilogue's.
            barrier::sync_named_id(ids::WS_Q_CONVERT.start + consumer, WARPGROUP);
            factor
        } else {
            1.0
        };
        LogitScale::new(&RpaParams { sm_scale: p.sm_scale * p.k_scale / factor, ..*p }, true)
    } else {
        LogitScale::new(p, true)
    };
    let q_ready = trace::now();
    let mut o = [[0.0f32; 4]; NTILES];
    let mut m = [f32::NEG_INFINITY; 2];
    let mut l = [0.0f32; 2];
    // The tiles this consumer's rows see, `[ia, ib)` (contiguous: the rows' key ranges are
    // intervals that grow with the row); the others are waited for and released unread.
    let first_tile = *tiles;
    *tiles += num_tiles;
    // The tile trace (`trace::mark_tile`; nothing outside a trace build): each consumer's thread
    // 0, the block's first tiles.
    let mark_tile_at = #[inline(always)]
    |i: u32, event: TileEvent, cycles: u64| {
        if trace::ENABLED && wtid == 0 {
            trace::mark_tile_at(ptr.plan, p.plan_capacity, consumer, first_tile + i, event, cycles);
        }
    };
    let mark_tile = |i: u32, event: TileEvent| mark_tile_at(i, event, trace::now());
    let k_slot = |i: u32| k_ring.stage(first_tile + i);
    let v_slot = |i: u32| v_ring.stage(first_tile + i);
    let tile_base = |i: u32| lo + i * keys;
    let (ia, ib) = if c_lo < c_hi {
        let ia = (c_lo.max(lo) - lo) / keys;
        (ia, (c_hi - lo).div_ceil(keys).min(num_tiles).max(ia))
    } else {
        (0, 0)
    };
    let skip = #[inline(always)]
    |i: u32| {
        let (k, v) = (k_slot(i), v_slot(i));
        k_ring.wait(k);
        k_ring.release(k);
        v_ring.wait(v);
        v_ring.release(v);
    };
    // Ping-pong (`p.consumer_schedule` 1): the consumers take turns to issue their products, so
    // the tensor cores run one consumer's S and P V while the other computes its softmax, and
    // each one's S is not queued behind the other's. Consumer c's turn starts when it syncs on
    // named barrier 3 + c and ends when it arrives on the next one's in the round (c + 1 mod C);
    // the last consumer arrives once on consumer 0's at the block's start (`rpa_tiled_ws`),
    // consumer 0 syncs once more at its end. Every consumer takes a turn for every tile of every
    // item, its rows seeing it or not, so the turns pair up. (The branches fold to two for C 2.)
    let pingpong = p.consumer_schedule != 0;
    let turn_begin = #[inline(always)]
    || {
        if pingpong {
            if consumer == 0 {
                barrier::sync_named::<{ ids::WS_PINGPONG.start }>(2 * WARPGROUP)
            } else if C == 2 || consumer == 1 {
                barrier::sync_named::<{ ids::WS_PINGPONG.start + 1 }>(2 * WARPGROUP)
            } else {
                barrier::sync_named::<{ ids::WS_PINGPONG.start + 2 }>(2 * WARPGROUP)
            }
        }
    };
    let turn_end = #[inline(always)]
    || {
        if pingpong {
            if consumer == 0 {
                barrier::arrive_named::<{ ids::WS_PINGPONG.start + 1 }>(2 * WARPGROUP)
            } else if C == 2 || consumer == 2 {
                barrier::arrive_named::<{ ids::WS_PINGPONG.start }>(2 * WARPGROUP)
            } else {
                barrier::arrive_named::<{ ids::WS_PINGPONG.start + 2 }>(2 * WARPGROUP)
            }
        }
    };
    for i in 0..ia {
        skip(i);
        turn_begin();
        turn_end();
    }
    // S = Q Kᵀ of tile i issued (the tensor cores run it while the warps go on).
    let wait_k = #[inline(always)]
    |i: u32| {
        k_ring.wait(k_slot(i));
    };
    // S's operand descriptors for tile i, warp-uniform (a shuffle and a move to a uniform
    // register each): made before the turn, as V's ([`pv_descriptor`]), so that the turn starts
    // with the products (G5 1-2 % faster, G1 level: benchmarks/NOTES.md "v45").
    let s_descriptors = #[inline(always)]
    |i: u32| {
        // K-major A and B: k-steps of 16 dims are 32 bytes apart inside a 64-dim block.
        let k_desc =
            wgmma::warp_uniform(wgmma::descriptor(smem.k(k_slot(i).index), 16, 8 * 128, wgmma::Swizzle::Bytes128));
        (wgmma::warp_uniform(wgmma::recompute_here(q_desc)), k_desc)
    };
    let issue_s = #[inline(always)]
    |(q_desc, k_desc): (u64, u64), s: &mut [[f32; 4]; KN]| {
        keep_s(s);
        wgmma::fence();
        unroll::<KSTEPS>(|k| {
            let step = (k as u32 % 4) * 32;
            let kd = wgmma::advance(k_desc, (k as u32 / 4) * keys * 128 + step);
            let qd = wgmma::advance(q_desc, (k as u32 / 4) * CONSUMER_M * 128 + step);
            if KN == 16 {
                wgmma::mma_m64n128k16_ss::<KV::Operand<Q>, 0>(&mut *(s.as_mut_ptr() as *mut [f32; 64]), qd, kd, k > 0);
            } else {
                wgmma::mma_m64n64k16_ss::<KV::Operand<Q>, 0>(&mut *(s.as_mut_ptr() as *mut [f32; 32]), qd, kd, k > 0);
            }
        });
        wgmma::commit_group();
    };
    // The tile's presence bits, its logit transform, masks and softmax weights (f32, in `s`;
    // packed into P by the caller once no wgmma is in flight); returns the rescale O still needs.
    let softmax = #[inline(always)]
    |i: u32, s: &mut [[f32; 4]; KN], m: &mut [f32; 2], l: &mut [f32; 2]| {
        let presence = smem.presence(k_slot(i).index);
        let mut present = [0u32; PW];
        unroll::<PW>(|w| present[w] = *presence.add(w));
        // K is read: the producer may refill its stage.
        k_ring.release(k_slot(i));
        mask_logits(s, tile_base(i), present, &rows, &logit, p);
        online_softmax_weights_f32::<KN>(s, logit.exp_scale, m, l)
    };
    // The FA3 order: S of tile i is issued, then O += P V of tile i - 1 behind it; the softmax of
    // tile i runs while that P V does. Tile ia is peeled off the loop so that inside it every tile
    // issues both products unconditionally (with the P V behind a branch ptxas cannot tell which
    // group a `wait_group 1` retires and serializes every wgmma: benchmarks/NOTES.md "v5").
    let mut pa = [[0u32; 4]; KSP];
    // With one Q slot the next item's Q can load only once every consumer has released it: each
    // releases it as soon as its last S product has completed (no later reader: the output goes
    // straight to global memory), so the load runs under its last softmax, P V and stores (G6
    // 1 x 2k -1.2 %, 4 x 1k -2.8 %; fp8 at head_dim 128 level: benchmarks/NOTES.md "v46").
    let one_q_slot = ws_q_slots(D as u32, KV::FP8) == 1;
    if one_q_slot && ia == ib {
        q_ring.release(q_stage);
    }
    if ia < ib {
        let mut s = [[0.0f32; 4]; KN];
        wait_k(ia);
        if traced {
            trace::mark(ptr.plan, p.plan_capacity, Point::FirstKReady);
        }
        mark_tile_at(ia, TileEvent::ItemEntered, entered);
        mark_tile_at(ia, TileEvent::RowsReady, rows_ready);
        mark_tile_at(ia, TileEvent::QReady, q_ready);
        mark_tile(ia, TileEvent::KReady);
        let descriptors = s_descriptors(ia);
        turn_begin();
        mark_tile(ia, TileEvent::TurnBegun);
        issue_s(descriptors, &mut s);
        turn_end();
        mark_tile(ia, TileEvent::Issued);
        wgmma::wait_group::<0>();
        if traced {
            trace::mark(ptr.plan, p.plan_capacity, Point::FirstS);
        }
        keep_s(&mut s);
        if one_q_slot && ia + 1 == ib {
            q_ring.release(q_stage);
        }
        mark_tile(ia, TileEvent::SReady);
        let rescale = softmax(ia, &mut s, &mut m, &mut l);
        mark_tile(ia, TileEvent::SoftmaxDone);
        rescale.apply(&mut o);
        pack_weights::<KV::Operand<Q>, KN, KSP>(&s, &mut pa);
    }
    let mut i = ia + 1;
    while i < ib {
        let mut s = [[0.0f32; 4]; KN];
        let prev = v_slot(i - 1);
        wait_k(i);
        v_ring.wait(prev);
        let (descriptors, v_desc) = (s_descriptors(i), pv_descriptor::<KSP>(smem.v(prev.index)));
        turn_begin();
        mark_tile(i, TileEvent::TurnBegun);
        issue_s(descriptors, &mut s);
        wgmma_pv_issue_at::<KV::Operand<Q>, NTILES, KSP>(&mut o, &pa, v_desc);
        turn_end();
        mark_tile(i, TileEvent::Issued);
        // S done; the P V may still run.
        wgmma::wait_group::<1>();
        keep_s(&mut s);
        if one_q_slot && i + 1 == ib {
            q_ring.release(q_stage);
        }
        mark_tile(i, TileEvent::SReady);
        let rescale = softmax(i, &mut s, &mut m, &mut l);
        mark_tile(i, TileEvent::SoftmaxDone);
        // The P V of tile i - 1 has finished writing O and reading its stage and P.
        wgmma::wait_group::<0>();
        keep_o(&mut o);
        mark_tile(i, TileEvent::PvDone);
        wgmma::keep_fragments(&mut pa);
        v_ring.release(prev);
        rescale.apply(&mut o);
        pack_weights::<KV::Operand<Q>, KN, KSP>(&s, &mut pa);
        i += 1;
    }
    if ia < ib {
        let last = v_slot(ib - 1);
        v_ring.wait(last);
        wgmma_pv_issue::<KV::Operand<Q>, NTILES, KSP>(&mut o, &pa, smem.v(last.index));
        wgmma::wait_group::<0>();
        keep_o(&mut o);
        wgmma::keep_fragments(&mut pa);
        v_ring.release(last);
    }
    if trace::ENABLED && ia < ib {
        mark_tile(ib - 1, TileEvent::LastPvDone);
    }
    for i in ib..num_tiles {
        skip(i);
        turn_begin();
        turn_end();
    }
    if KV::FP8 {
        // V's scale, in f32.
        unroll::<NTILES>(|nt| unroll::<4>(|e| o[nt][e] *= p.v_scale));
    }
    // Each warp owns its rows: normalize and write them. Every S product (the Q tile's only
    // reader: each consumer has its own) has completed, so the tile is free until this consumer
    // arrives on the slot's empty barrier, after which the loaders may refill the slot.
    if ws_q_slots(D as u32, KV::FP8) > 1 {
        // Staged in the Q tile: the next item's Q is in the ring's other slot. (Not in the last
        // V stage: the other consumer's P V may still read it; benchmarks/NOTES.md "v21".) All
        // 64 rows in the item (this consumer's tokens): one bulk store per column block.
        if o_map != 0 && (c_base + CONSUMER_M) / group <= rc {
            let token = r0 + c_base / group;
            store_rows_tma::<Q, D, NTILES, KSTEPS>(q_tile, warp, wtid, consumer, o_map, token, g * group, &l, &o);
        } else {
            store_rows_staged::<Q, D, NTILES, KSTEPS>(ptr, p, q_tile, warp, c_base, r0, rc, g, &l, &o);
        }
        // The loaders may refill the tile with bulk copies (the async proxy): order this warp's
        // writes and reads of it before them.
        wgmma::fence_proxy_async_shared();
        q_ring.release(q_stage);
    } else {
        // One Q slot (head_dim 256, fp8 KV at 128): released after the last S (above).
        store_rows::<Q, D, NTILES>(ptr, p, r0, rc, g, m_rows, &l, &o);
    }
    if trace::ENABLED && ia < ib {
        mark_tile(ib - 1, TileEvent::StoresDone);
    }
    if traced {
        trace::mark(ptr.plan, p.plan_capacity, Point::FirstItemDone);
    }
}
