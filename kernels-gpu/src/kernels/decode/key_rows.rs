//! Attention parts for the decode kernel's key-rows layout: a warp's 16 keys are the M rows of
//! the `mma.m16n8k16` tile and the block's query heads (at most eight: GQA groups up to 8) its N
//! columns, `Sᵀ = K Qᵀ` and `Oᵀ += Vᵀ Pᵀ`.
//!
//! Why: with the heads as the M rows (`decode::mma`), a group of 4 fills 4 of 16 rows:
//! the q fragments (A, four registers per k-step) and the accumulators of O (16 x head_dim) are
//! three quarters padding, held in registers that decide how many warps an SM keeps, and every
//! product runs over the padding. Keys as rows pad 8 columns instead of 16 rows: q is a B
//! fragment (two registers per k-step), `Oᵀ` is head_dim x 8 (half the accumulators), and each
//! of the two products takes half the `mma` instructions. The fragments come from the same
//! `ldmatrix` loads as the head-rows layout's, taken in another register order.
//!
//! Layout (`g = lane / 4`, `c = lane % 4`): `Sᵀ` element `e` is key `g + 8 (e / 2)`, head
//! `2c + e % 2`; `Oᵀ` m-tile `mt`, element `e`, is dim row `g + 8 (e / 2)` of the tile, head
//! `2c + e % 2`. A head's statistics (max, sum) are reduced over the 8 lanes sharing `c`.

use crate::attention::{RowWindow, RpaParams};
use crate::math::{exp2_approx, fma_f32, max_f32};
use crate::mma::{ldmatrix_x4, ldmatrix_x4_trans, movmatrix_trans, MmaElement};
use crate::warp::{butterfly_max_f32, butterfly_sum_f32, lane_id, warp_any};

use crate::attention::mask::range_bits;
use crate::attention::softmax::{LogitScale, RESCALE_THRESHOLD_LOG2};
use crate::kernels::decode::mma::MMA_HEADS_PER_BLOCK;
use crate::kernels::kv_operand::StagedKv;
use crate::kernels::unroll;

/// Most query heads a block of the key-rows layout computes: the N of the mma tile. The host
/// takes the layout only for GQA groups up to this (one head chunk per KV head).
pub const KEY_ROWS_MAX_HEADS: u32 = 8;

/// Maximum over the 8 lanes that hold one head (column) of an accumulator: lanes `c`, `c + 4`,
/// ..., `c + 28`.
#[inline(always)]
fn column_max(v: f32) -> f32 {
    butterfly_max_f32(v, [4, 8, 16])
}

/// Sum over the 8 lanes that hold one head of an accumulator.
#[inline(always)]
fn column_sum(v: f32) -> f32 {
    butterfly_sum_f32(v, [4, 8, 16])
}

/// q as the B operand of `Sᵀ = K Qᵀ` from its A fragments in the head-rows layout
/// (`load_q_fragments`, heads as rows `g`, with or without its `PAIRED` dims): the registers of
/// rows `g` are exactly B's (k = dims `2c, 2c + 1` and `2c + 8, 2c + 9`, n = head `g`); rows
/// `g + 8` (heads 8-15) are not needed.
#[inline(always)]
pub(crate) fn q_b_fragments<const KSTEPS: usize>(qa: &[[u32; 4]; KSTEPS]) -> [[u32; 2]; KSTEPS] {
    let mut qb = [[0u32; 2]; KSTEPS];
    unroll::<KSTEPS>(|k| qb[k] = [qa[k][0], qa[k][2]]);
    qb
}

/// The logit transform and masks of a warp's `Sᵀ` over keys `key0 .. key0 + 16`, in place (as
/// `mask_logits` does for the head-rows layout; one window for all heads: a decode block's heads
/// share its query row): scaled as `logit` says, soft capped, masked keys offset by `mask_value`
/// where they count and -inf where not, keys absent from `present` (bit k: key `key0 + k` is in
/// the split and on a valid page) -inf.
#[inline(always)]
pub(crate) fn mask_key_rows(
    s: &mut [f32; 4],
    key0: u32,
    present: u32,
    win: &RowWindow,
    logit: &LogitScale,
    p: &RpaParams,
) {
    logit.transform_tiles(core::array::from_mut(s), p);
    let interior = key0 >= win.first && key0 + 16 <= win.end && present & 0xffff == 0xffff;
    if !interior {
        let g = lane_id() / 4;
        let rel = |x: u32| x.saturating_sub(key0).min(16);
        let vis = range_bits(rel(win.first), rel(win.end), 0) & present;
        let counted_hi = if p.include_masked != 0 && win.first < win.end { rel(win.kv_len) } else { 0 };
        let counted = range_bits(0, counted_hi, 0) & present;
        unroll::<4>(|e| {
            let bit = 1u32 << (g + 8 * (e as u32 / 2));
            s[e] = if vis & bit != 0 {
                s[e]
            } else if counted & bit != 0 {
                s[e] + logit.mask_add()
            } else {
                f32::NEG_INFINITY
            };
        });
    }
}

/// One online-softmax step over a warp's 16 keys in the key-rows layout: `s` holds their logits
/// (absent keys -inf), weighed as `exp2((s - ref) * exp_scale)`; updates each of this lane's two
/// heads' running reference `m` (moved lazily, as the head-rows softmax does: only when a head's
/// max rose by more than `RESCALE_THRESHOLD_LOG2`), its share of the sum `l`, rescales `Oᵀ`'s
/// columns, and returns `Pᵀ` (rounded to q's dtype) as the B operand of `Oᵀ += Vᵀ Pᵀ`: the
/// weights packed in the accumulator's layout (keys as rows) and transposed by `movmatrix`.
#[inline(always)]
pub(crate) fn key_rows_softmax_step<Q: MmaElement, const MT: usize>(
    s: &[f32; 4],
    exp_scale: f32,
    m: &mut [f32; 2],
    l: &mut [f32; 2],
    o: &mut [[f32; 4]; MT],
) -> [u32; 2] {
    let local = [max_f32(s[0], s[2]), max_f32(s[1], s[3])];
    let rose = |max: f32, m: f32| (max - m) * exp_scale > RESCALE_THRESHOLD_LOG2;
    // The reference in exp2 units, negated (all -inf so far: 0, so exp gives 0, never NaN).
    let neg_ref_of = |m_new: f32| -(if m_new == f32::NEG_INFINITY { 0.0 } else { m_new }) * exp_scale;
    let mut neg_ref = [neg_ref_of(m[0]), neg_ref_of(m[1])];
    // One vote for both heads; warp-uniform, rare once the heads have seen their first keys.
    if warp_any(rose(local[0], m[0]) || rose(local[1], m[1])) {
        unroll::<2>(|h| {
            let m_max = max_f32(m[h], column_max(local[h]));
            let m_new = if rose(m_max, m[h]) { m_max } else { m[h] };
            neg_ref[h] = neg_ref_of(m_new);
            // Heads that kept their reference get corr = 1.
            let corr = exp2_approx(fma_f32(m[h], exp_scale, neg_ref[h]));
            l[h] *= corr;
            unroll::<MT>(|mt| {
                o[mt][h] *= corr;
                o[mt][2 + h] *= corr;
            });
            m[h] = m_new;
        });
    }
    let mut w = [0.0f32; 4];
    unroll::<4>(|e| w[e] = exp2_approx(fma_f32(s[e], exp_scale, neg_ref[e % 2])));
    l[0] += w[0] + w[2];
    l[1] += w[1] + w[3];
    [movmatrix_trans(Q::pack2(w[0], w[1])), movmatrix_trans(Q::pack2(w[2], w[3]))]
}

/// Hands a warp's `(m, l, Oᵀ)` to `merge_warps_and_store` in the head-rows layout's shared
/// layout, `[logical warp][row (head)][2 + head_dim]` f32 with `MMA_HEADS_PER_BLOCK` rows per
/// warp (rows 0-7 written: the heads of this layout). `Oᵀ` m-tile `mt` covers dims `16 mt ..
/// 16 mt + 16`: rows `g` and `g + 8` are dims `16 mt + g` and `+ 8`, or with `PAIRED` (1-byte V,
/// `StagedKv::v_operands`) dims `16 mt + 2g` and `+ 1`. The caller synchronizes the block before
/// and after.
///
/// # Safety
/// Every lane of the warp calls it, between the caller's block barriers; `smem` is shared memory
/// of at least `(logical_warp + 1) * MMA_HEADS_PER_BLOCK * (2 + head_dim)` f32 that no other warp's
/// state overlaps, and `16 * MT` is at most `head_dim`.
#[inline(always)]
pub(crate) unsafe fn store_key_rows_state<const MT: usize, const PAIRED: bool>(
    smem: *mut f32,
    head_dim: usize,
    logical_warp: usize,
    m: &[f32; 2],
    l: &[f32; 2],
    o: &[[f32; 4]; MT],
) {
    let lane = lane_id() as usize;
    let (g, c) = (lane / 4, lane % 4);
    let stride = 2 + head_dim;
    unroll::<2>(|h| {
        let sum = column_sum(l[h]);
        let row = smem.add((logical_warp * MMA_HEADS_PER_BLOCK as usize + 2 * c + h) * stride);
        if g == 0 {
            *row = m[h];
            *row.add(1) = sum;
        }
        unroll::<MT>(|mt| {
            let (lo, hi) = if PAIRED { (16 * mt + 2 * g, 16 * mt + 2 * g + 1) } else { (16 * mt + g, 16 * mt + 8 + g) };
            *row.add(2 + lo) = o[mt][h];
            *row.add(2 + hi) = o[mt][2 + h];
        });
    });
}

/// A lane's `ldmatrix` rows and swizzled chunks in a stage (computed before the tile loop of
/// [`super::pipelined`]'s `rpa_pipelined_on`), for the key-rows layout's loads.
pub(super) struct KeyRowsLanes {
    pub(super) k_token: u32,
    pub(super) k_chunk: u32,
    pub(super) v_token: u32,
    pub(super) v_chunk: u32,
    pub(super) kv_row_bytes: u32,
}

/// `Sᵀ = K Qᵀ` over a warp's 16 K rows of a pipelined kernel's stage at `k_base`: the head-rows
/// layout's `ldmatrix` loads, each word taken as the A fragment's (keys as rows) instead of B's;
/// q as B (`qb`). Even and odd k-steps accumulate
/// apart (two chains of mma half as long), summed at the end.
///
/// # Safety
/// The warp's K rows of the stage have landed and are visible to it; every lane calls it.
#[inline(always)]
pub(super) unsafe fn key_rows_logits<M: MmaElement, KV: StagedKv, const KSTEPS: usize>(
    k_base: u32,
    lanes: &KeyRowsLanes,
    qb: &[[u32; 2]; KSTEPS],
) -> [f32; 4] {
    let mut acc = [[0.0f32; 4]; 2];
    if KV::FP8 {
        // One ldmatrix gives two k-steps (chunks 2kk, 2kk + 1 of 16 one-byte dims): words 0 / 1
        // are keys 0-7 / 8-15 of the first, 2 / 3 of the second.
        let k_row = k_base + lanes.v_token * lanes.kv_row_bytes;
        unroll::<KSTEPS>(|kk| {
            if kk < KSTEPS / 2 {
                let b = ldmatrix_x4(k_row + (lanes.v_chunk ^ (2 * kk as u32)) * 16);
                unroll::<2>(|h| {
                    let (low, high) = (KV::k_operand(b[2 * h]), KV::k_operand(b[2 * h + 1]));
                    acc[h] = M::mma([low[0], high[0], low[1], high[1]], qb[2 * kk + h], acc[h]);
                });
            }
        });
    } else {
        // Words: keys 0-7 × dims +0, keys 0-7 × dims +8, keys 8-15 × +0, keys 8-15 × +8.
        let k_row = k_base + lanes.k_token * lanes.kv_row_bytes;
        unroll::<KSTEPS>(|k| {
            let b = ldmatrix_x4(k_row + (lanes.k_chunk ^ (2 * k as u32)) * 16);
            acc[k % 2] = M::mma([b[0], b[2], b[1], b[3]], qb[k], acc[k % 2]);
        });
    }
    let mut s = [0.0f32; 4];
    unroll::<4>(|e| s[e] = acc[0][e] + acc[1][e]);
    s
}

/// `Oᵀ += Vᵀ Pᵀ` over a warp's 16 V rows of a stage at `v_base` (the key-rows layout): the
/// head-rows layout's transposed `ldmatrix` loads as A fragments (dims as rows), `pt` as B. 16-bit
/// V: m-tile `mt` is dims `16 mt ..`; 1-byte V: m-tile `mt` is chunk `mt`'s even dims (rows `g`)
/// and odd dims (rows `g + 8`), as `store_key_rows_state`'s `PAIRED` reads them.
///
/// # Safety
/// As [`key_rows_logits`], for the V rows.
#[inline(always)]
pub(super) unsafe fn key_rows_accumulate<M: MmaElement, KV: StagedKv, const KSTEPS: usize>(
    v_base: u32,
    lanes: &KeyRowsLanes,
    pt: [u32; 2],
    ot: &mut [[f32; 4]; KSTEPS],
) {
    let v_row = v_base + lanes.v_token * lanes.kv_row_bytes;
    if KV::FP8 {
        // One transposed ldmatrix gives chunks mt, mt + 1: words keys 0-7 / 8-15 of each.
        unroll::<KSTEPS>(|mt| {
            if mt % 2 == 0 {
                let b = ldmatrix_x4_trans(v_row + (lanes.v_chunk ^ mt as u32) * 16);
                unroll::<2>(|c| {
                    let (low, high) = (KV::v_operands(b[2 * c]), KV::v_operands(b[2 * c + 1]));
                    ot[mt + c] = M::mma([low[0], low[1], high[0], high[1]], pt, ot[mt + c]);
                });
            }
        });
    } else {
        // Words: keys 0-7 × dims +0, keys 8-15 × +0, keys 0-7 × +8, keys 8-15 × +8.
        unroll::<KSTEPS>(|mt| {
            let b = ldmatrix_x4_trans(v_row + (lanes.v_chunk ^ (2 * mt as u32)) * 16);
            ot[mt] = M::mma([b[0], b[2], b[1], b[3]], pt, ot[mt]);
        });
    }
}
