//! Ragged paged attention on tensor cores (`mma.sync.m16n8k16`), for f16/bf16 queries and head
//! dims up to 128 (multiples of 16). Same contract, blocks and splits as
//! [`super::paged_attention`], which stays the general kernel (f32 queries, head_dim > 128).
//!
//! Per block (query row `t`, KV head `g`, up to 16 query heads of `g`, key split): the query heads
//! are the 16 rows of the mma tile (a GQA group of 4 fills 4 of them: tensor cores have throughput
//! to spare, and no warp shuffle is spent on dot products). Each warp takes runs of 16 keys:
//! `S = Q · Kᵀ` (16 heads x 16 keys, f32), online softmax on the accumulator fragments (row
//! statistics reduced over the 4 lanes of a quad), `O += P · V` with P rounded to q's dtype (as the
//! reference rounds probabilities to the value dtype). K and V fragments are read straight from
//! the pages: a K fragment register is two adjacent dims of one key (4 bytes); a V fragment
//! register is one dim of two adjacent keys. Warps merge through shared memory as in the general
//! kernel.

use crate::attention::{RowWindow, RpaParams};
use crate::math::{exp2_approx, fma_f32, max_f32, opaque_f32, tanh_fast, LOG2_E};
use crate::mma::MmaElement;
use crate::num::{Bf16, KvElement, F8E4M3, F8E5M2};
use crate::shared::dynamic_shared_mem;
use crate::thread::{sync_threads, thread_idx_x};
use crate::warp::{butterfly_max_f32, butterfly_sum_f32, lane_id, warp_any, WARP_SIZE};

use super::paged_attention::{
    attention_kernels, key_row, merge_warps_and_store, resolve_block, Block, RpaPointers, WarpStates, RPA_THREADS,
    RPA_WARPS,
};
use super::unroll;

/// Query heads per block: the M of the mma tile.
pub const MMA_HEADS_PER_BLOCK: u32 = 16;
/// Keys per warp step: two n-tiles of 8.
const KEYS_PER_WARP_STEP: u32 = 16;

/// Whether the tensor-core kernel covers a problem (q f16/bf16 is checked by the caller).
pub const fn mma_supports_head_dim(head_dim: u32) -> bool {
    head_dim.is_multiple_of(16) && head_dim >= 16 && head_dim <= 128
}

/// Dynamic shared memory of the tensor-core kernel, in bytes.
pub const fn mma_shared_bytes(head_dim: u32) -> u32 {
    RPA_WARPS * MMA_HEADS_PER_BLOCK * (2 + head_dim) * 4
}

/// Two adjacent elements `dim, dim + 1` of a K row as a packed pair of `Q`, scaled and rounded to
/// q's dtype when the call has scales (the contract's cast).
#[inline(always)]
unsafe fn k_pair<Q: MmaElement, KV: KvElement>(row: *const KV, dim: usize, p: &RpaParams) -> u32 {
    if core::mem::size_of::<KV>() == 2 && p.kv_scaled == 0 {
        // KV is q's own type (the host allows only that or fp8): the bits are the packed pair.
        return *(row.add(dim) as *const u32);
    }
    let scale = if p.kv_scaled != 0 { p.k_scale } else { 1.0 };
    Q::pack2((*row.add(dim)).widen() * scale, (*row.add(dim + 1)).widen() * scale)
}

/// One V element as f32, scaled when the call has scales (rounded to q's dtype by the packing).
#[inline(always)]
unsafe fn v_elem<KV: KvElement>(row: Option<*const KV>, dim: usize, p: &RpaParams) -> f32 {
    match row {
        Some(r) => {
            let v = (*r.add(dim)).widen();
            if p.kv_scaled != 0 {
                v * p.v_scale
            } else {
                v
            }
        }
        None => 0.0,
    }
}

/// Maximum over the 4 lanes of a quad (the lanes holding one row of an mma accumulator).
#[inline(always)]
pub(crate) fn quad_max(v: f32) -> f32 {
    butterfly_max_f32(v, [1, 2])
}

/// Sum over the 4 lanes of a quad.
#[inline(always)]
pub(crate) fn quad_sum(v: f32) -> f32 {
    butterfly_sum_f32(v, [1, 2])
}

/// The block's query heads as the A operand of `S = Q Kᵀ` (tile rows are heads `h0 + row`; rows
/// at or past `hc` stay zero), `KSTEPS` k-steps of 16 head dims. With `PAIRED`, the k-step's
/// dims are permuted as the pipelined kernel's 1-byte K operands are (`StagedKv::k_operand`):
/// the mma's k `2c, 2c + 1` are dims `4c, 4c + 1` and its k `2c + 8, 2c + 9` dims `4c + 2, 4c + 3`.
#[inline(always)]
pub(crate) unsafe fn load_q_fragments<Q: MmaElement, KV, const KSTEPS: usize, const PAIRED: bool>(
    ptr: &RpaPointers<Q, KV>,
    p: &RpaParams,
    blk: &Block,
) -> [[u32; 4]; KSTEPS] {
    let lane = lane_id() as usize;
    let (gq, cq) = (lane / 4, lane % 4);
    let d = p.head_dim as usize;
    let mut qa = [[0u32; 4]; KSTEPS];
    let q_row = |r: usize| ptr.q.add((blk.t as usize * p.num_q_heads as usize + blk.h0 as usize + r) * d);
    let (first, second) = if PAIRED { (4 * cq, 4 * cq + 2) } else { (2 * cq, 2 * cq + 8) };
    unroll::<KSTEPS>(|k| {
        let (col, col2) = (k * 16 + first, k * 16 + second);
        if gq < blk.hc {
            qa[k][0] = *(q_row(gq).add(col) as *const u32);
            qa[k][2] = *(q_row(gq).add(col2) as *const u32);
        }
        if gq + 8 < blk.hc {
            qa[k][1] = *(q_row(gq + 8).add(col) as *const u32);
            qa[k][3] = *(q_row(gq + 8).add(col2) as *const u32);
        }
    });
    qa
}

/// A raw `q · k` accumulator element turned into the contract's logit for key `j`: scaled, soft
/// capped, and offset by `mask_value` when masked keys are visited and `j` is masked.
#[inline(always)]
pub(crate) fn finish_logit(raw: f32, j: u32, blk: &Block, p: &RpaParams) -> f32 {
    let mut x = raw * p.sm_scale;
    if p.soft_cap != 0.0 {
        // `sm_scale / soft_cap` is loop-invariant (hoisted): no IEEE division per logit, whose
        // slow path ran once per logit at head_dim 256 with soft cap 50 (benchmarks/NOTES.md v8).
        x = p.soft_cap * tanh_fast(raw * (p.sm_scale / p.soft_cap));
    }
    if p.include_masked != 0 && !blk.window.visible(j) {
        x += p.mask_value;
    }
    x
}

/// One online-softmax step over a 16-key run: `s` holds the run's logits as two n-tiles of
/// accumulator fragments (absent keys -inf), weighed as `exp2((s - max) * exp_scale)`; updates the
/// running max `m`, this lane's share of the sum `l` and rescales `o` for rows `g` and `g + 8`;
/// returns P (rounded to q's dtype, as the reference rounds probabilities to the value dtype) as
/// the A operand of `O += P V`. Without `upper_rows` (warp-uniform: the block's query heads fit
/// rows 0-7, as in every GQA group up to 8) row `g + 8` is left out: its P is 0 and its state
/// stays empty, half the softmax's instructions saved on rows that only pad the mma tile.
#[inline(always)]
pub(crate) fn online_softmax_step<Q: MmaElement, const NTILES: usize>(
    s: &[[f32; 4]; 2],
    exp_scale: f32,
    upper_rows: bool,
    m: &mut [f32; 2],
    l: &mut [f32; 2],
    o: &mut [[f32; 4]; NTILES],
) -> [u32; 4] {
    let mut pa = [[0u32; 4]; 1];
    online_softmax_steps::<Q, NTILES, 2, 1>(s, exp_scale, upper_rows, m, l, o, &mut pa);
    pa[0]
}

/// [`online_softmax_step`] over a run of `8 * KN` keys (`KN` n-tiles of S, `KS = KN / 2` k-steps
/// of `O += P V`): one max, one rescale for the whole run. `pa[ks]` is the A operand of k-step
/// `ks` (keys `16 ks .. 16 ks + 16`). Weights are `exp2((s - max) * exp_scale)`: `LOG2_E` for
/// natural-log logits, 1 for logits already in log2 units (the multiply folds away). Without
/// `upper_rows`, row `g + 8` is left out (its entries of `pa` are left as they are).
#[inline(always)]
pub(crate) fn online_softmax_steps<Q: MmaElement, const NTILES: usize, const KN: usize, const KS: usize>(
    s: &[[f32; 4]; KN],
    exp_scale: f32,
    upper_rows: bool,
    m: &mut [f32; 2],
    l: &mut [f32; 2],
    o: &mut [[f32; 4]; NTILES],
    pa: &mut [[u32; 4]; KS],
) {
    // The rescale applied where its factor is computed: the mma.sync kernels sit at their
    // register limit, and a factor kept alive past the weights made ptxas spill.
    const { assert!(KN == 2 * KS, "two S n-tiles per P k-step") };
    unroll::<2>(|ri| {
        if ri == 1 && !upper_rows {
            return;
        }
        softmax_row(
            s,
            ri,
            exp_scale,
            &mut m[ri],
            &mut l[ri],
            |corr| {
                unroll::<NTILES>(|nt| {
                    o[nt][2 * ri] *= corr;
                    o[nt][2 * ri + 1] *= corr;
                })
            },
            |nt, w0, w1| pa[nt / 2][2 * (nt % 2) + ri] = Q::pack2(w0, w1),
        )
    });
}

/// The accumulator rescale an online-softmax step asks for: `corr` per row (`g`, `g + 8`), and
/// whether any row of the warp moved its reference (else every `corr` is 1 and the rescale is
/// skipped).
#[derive(Clone, Copy)]
pub(crate) struct Rescale {
    corr: [f32; 2],
    any: bool,
}

impl Rescale {
    /// `o *= corr` row by row (a warp-uniform skip when no row moved its reference).
    #[inline(always)]
    pub(crate) fn apply<const NTILES: usize>(&self, o: &mut [[f32; 4]; NTILES]) {
        if self.any {
            unroll::<2>(|ri| {
                unroll::<NTILES>(|nt| {
                    o[nt][2 * ri] *= self.corr[ri];
                    o[nt][2 * ri + 1] *= self.corr[ri];
                });
            });
        }
    }
}

/// An online-softmax step like [`online_softmax_steps`] that leaves the weights in `s` as f32
/// (`exp2((s - ref) * exp_scale)`) instead of packing them into P, and returns O's rescale instead
/// of applying it: a caller with a `wgmma` in flight packs them ([`pack_weights`]) once it has
/// completed (ptxas 13.0, the JIT of driver 580, serializes every `wgmma` of a kernel where
/// registers of a later one's A operand are written while one is in flight).
#[inline(always)]
pub(crate) fn online_softmax_weights_f32<const KN: usize>(
    s: &mut [[f32; 4]; KN],
    exp_scale: f32,
    m: &mut [f32; 2],
    l: &mut [f32; 2],
) -> Rescale {
    let mut rescale = Rescale { corr: [1.0; 2], any: false };
    let logits = *s;
    unroll::<2>(|ri| {
        softmax_row(
            &logits,
            ri,
            exp_scale,
            &mut m[ri],
            &mut l[ri],
            |corr| {
                rescale.corr[ri] = corr;
                rescale.any = true;
            },
            |nt, w0, w1| {
                s[nt][2 * ri] = w0;
                s[nt][2 * ri + 1] = w1;
            },
        )
    });
    rescale
}

/// The weights of [`online_softmax_weights_f32`] rounded to q's dtype as P, the A operand of
/// `O += P V` (`pa[ks]`: keys `16 ks .. 16 ks + 16`).
#[inline(always)]
pub(crate) fn pack_weights<Q: MmaElement, const KN: usize, const KS: usize>(
    s: &[[f32; 4]; KN],
    pa: &mut [[u32; 4]; KS],
) {
    const { assert!(KN == 2 * KS, "two S n-tiles per P k-step") };
    unroll::<2>(|ri| unroll::<KN>(|nt| pa[nt / 2][2 * (nt % 2) + ri] = Q::pack2(s[nt][2 * ri], s[nt][2 * ri + 1])));
}

/// One row (`ri`: the lane's row g or g + 8) of an online-softmax step over `8 KN` keys: the
/// row's max, its running reference `m` (moved lazily, see below), `on_move(corr)` when some row
/// of the warp moved its reference (`l` already rescaled; rows that kept theirs get corr = 1),
/// then `weight(nt, w0, w1)` with the weights of n-tile `nt`'s two keys, summed into `l`.
#[inline(always)]
fn softmax_row<const KN: usize>(
    s: &[[f32; 4]; KN],
    ri: usize,
    exp_scale: f32,
    m: &mut f32,
    l: &mut f32,
    on_move: impl FnOnce(f32),
    mut weight: impl FnMut(usize, f32, f32),
) {
    // Max and sum as trees (a linear fold is a chain of 2 KN dependent instructions; with two
    // warps per scheduler their latency is not hidden).
    let mut part = [f32::NEG_INFINITY; KN];
    unroll::<KN>(|nt| part[nt] = max_f32(s[nt][2 * ri], s[nt][2 * ri + 1]));
    let local = tree_fold::<KN>(&mut part, max_f32);
    // The running reference moves only when the max rose by more than `RESCALE_THRESHOLD_LOG2`
    // in exp2 units (the first finite max always: -inf to finite is +inf). Weights then stay at
    // most 2^8: no overflow, the same relative rounding, and O and l keep one reference, so the
    // final O / l is unchanged; the rescale is skipped on almost every tile once a row has seen
    // its first keys, where an exact max moves on most tiles of a 16-row warp. Whether any lane's
    // own max rose that far is one vote; only then does the row's max across its quad (two
    // shuffles on the softmax's critical path) get computed: the same reference as from the
    // row's max every time, since the row's max rose that far exactly when one of its lanes' did.
    let rose = |max: f32| (max - *m) * exp_scale > RESCALE_THRESHOLD_LOG2;
    // The reference in exp2 units, negated (all -inf so far: 0, so exp gives 0, never NaN).
    let neg_ref_of = |m_new: f32| -(if m_new == f32::NEG_INFINITY { 0.0 } else { m_new }) * exp_scale;
    let mut neg_ref = neg_ref_of(*m);
    // Warp-uniform branches: rare once the rows have seen their first keys.
    if warp_any(rose(local)) {
        let m_max = max_f32(*m, quad_max(local));
        let m_new = if rose(m_max) { m_max } else { *m };
        neg_ref = neg_ref_of(m_new);
        // Rows that kept their reference get corr = 1.
        let corr = exp2_approx(fma_f32(*m, exp_scale, neg_ref));
        *l *= corr;
        on_move(corr);
        *m = m_new;
    }
    let mut sums = [0.0f32; KN];
    unroll::<KN>(|nt| {
        let w0 = exp2_approx(fma_f32(s[nt][2 * ri], exp_scale, neg_ref));
        let w1 = exp2_approx(fma_f32(s[nt][2 * ri + 1], exp_scale, neg_ref));
        sums[nt] = w0 + w1;
        weight(nt, w0, w1);
    });
    *l += tree_fold::<KN>(&mut sums, |a, b| a + b);
}

/// How far (in exp2 units) a row's max may rise above the softmax's running reference before the
/// accumulators are rescaled to it: weights are then at most 2^8 (FlashAttention 4's lazy rescale).
pub(crate) const RESCALE_THRESHOLD_LOG2: f32 = 8.0;

/// `v[0] op v[1] op ...` as a balanced tree (`N` a power of two; `v` is scratch).
#[inline(always)]
fn tree_fold<const N: usize>(v: &mut [f32; N], op: impl Fn(f32, f32) -> f32) -> f32 {
    const { assert!(N.is_power_of_two(), "a balanced tree") };
    let mut width = N;
    while width > 1 {
        width /= 2;
        unroll::<N>(|i| {
            if i < width {
                v[i] = op(v[i], v[i + width]);
            }
        });
    }
    v[0]
}

/// The contract's logit transform, folded for logits kept in log2 units (the softmax then takes
/// `exp2` with no multiply): `x = raw * sm_scale`, soft capped `cap * tanh(x / cap)`, masked keys
/// (when they count) `x + mask_value`; each times log2(e).
///
/// In the WG kernels and the pipelined decode kernel (`fold`), without a soft cap and with a
/// positive scale, the logits stay raw `q · k` and the scale goes into the softmax's exponent
/// (`exp2(s * scale_log2 - max * scale_log2)`, one fma per weight): the max of raw logits is the
/// max of scaled ones. `mask_add`
/// is `mask_value` in the units the logits are kept in (raw only where that stays finite: a tiny
/// scale could push `mask_value / sm_scale` past f32).
pub(crate) struct LogitScale {
    scale_log2: f32,
    scale_over_cap: f32,
    cap_log2: f32,
    /// Logits kept raw, scaled in the exponent.
    raw: bool,
    /// The softmax's exponent scale: `scale_log2` for raw logits, else 1.
    pub(crate) exp_scale: f32,
    mask_add: f32,
}

impl LogitScale {
    /// `fold`: keep logits raw where the contract allows (see above).
    pub(crate) fn new(p: &RpaParams, fold: bool) -> Self {
        Self::build(p, fold, false)
    }

    /// [`LogitScale::new`] with `fold`, for the pipelined decode kernel, whose short chains pay
    /// for every instruction-cache miss: without the IEEE division of 0 (or of an infinity) by
    /// which `new` forms the raw mask where masked keys do not count. Such a division is not on
    /// the fast path, and its slow path, a call to far code, missed the instruction cache in
    /// every warp (ncu: ~19 % of the 1 x 2k kernel's stall samples, benchmarks/NOTES.md "v16").
    /// (`new` keeps its division: the same change left the warp-specialized head_dim-256 tile
    /// kernel, at the edge of its registers, with spills.)
    pub(crate) fn for_decode(p: &RpaParams) -> Self {
        Self::build(p, true, true)
    }

    #[inline(always)]
    fn build(p: &RpaParams, fold: bool, no_special_division: bool) -> Self {
        let cap = if p.soft_cap != 0.0 { p.soft_cap } else { 1.0 };
        let scale_log2 = p.sm_scale * LOG2_E;
        // Only used when masked keys count (mask_value > -1e30: no overflow in log2 units).
        let masked = p.include_masked != 0;
        let mask_log2 = if masked { p.mask_value * LOG2_E } else { 0.0 };
        let mask_raw = if no_special_division {
            // LLVM computes the division whatever the branches say, and a select of its
            // dividend it folds into `mask_log2` (the quotient is used only where masked): the
            // dividend is chosen where it cannot see (`scale_log2 / scale_log2` otherwise).
            let dividend = opaque_f32(if masked { mask_log2 } else { scale_log2 });
            if masked {
                dividend / scale_log2
            } else {
                0.0
            }
        } else {
            mask_log2 / scale_log2
        };
        let raw = fold && p.soft_cap == 0.0 && scale_log2 > 0.0 && mask_raw.is_finite();
        LogitScale {
            scale_log2,
            scale_over_cap: p.sm_scale / cap,
            cap_log2: cap * LOG2_E,
            raw,
            exp_scale: if raw { scale_log2 } else { 1.0 },
            mask_add: if raw { mask_raw } else { mask_log2 },
        }
    }

    /// A softmax reference of logits in these units (raw, or log2 units) in the contract's
    /// natural-log units, as the split and warp merges take it: raw ones times `sm_scale`, log2
    /// ones over log2(e) (-inf stays -inf: the factor is positive).
    #[inline(always)]
    pub(crate) fn to_natural(&self, m: f32) -> f32 {
        m * (self.exp_scale * (1.0 / LOG2_E))
    }

    /// Raw `q · k` logits in these units before the masks, in place: soft capped (log2 units),
    /// scaled where the logits are not kept raw, else left as they are. The branch is taken once
    /// for all the elements (per element, ptxas keeps it as branches).
    #[inline(always)]
    pub(crate) fn transform_tiles<const N: usize>(&self, s: &mut [[f32; 4]; N], p: &RpaParams) {
        if p.soft_cap != 0.0 {
            unroll::<N>(|nt| unroll::<4>(|e| s[nt][e] = self.cap_log2 * tanh_fast(s[nt][e] * self.scale_over_cap)));
        } else if !self.raw {
            unroll::<N>(|nt| unroll::<4>(|e| s[nt][e] *= self.scale_log2));
        }
    }

    /// What a masked key that counts adds to its logit, in these units.
    #[inline(always)]
    pub(crate) fn mask_add(&self) -> f32 {
        self.mask_add
    }
}

/// What the mask of a warp's 16 M rows needs: the windows of this lane's two rows, and the keys
/// every row of the warp sees (`[all_first, all_end)`: tiles inside need no mask).
pub(crate) struct WarpRows {
    pub win: [RowWindow; 2],
    pub all_first: u32,
    pub all_end: u32,
}

/// The logit transform and the masks of a warp's 16 M rows over a tile of `8 KN` keys at
/// `tile_base` (`KN` n-tiles of S: element e of n-tile nt is M row lane/4 + 8 (e/2), key
/// `tile_base + 8 nt + 2 (lane % 4) + e % 2`), in place: scaled as `logit` says, soft capped,
/// masked keys offset by `mask_value` where they count and -inf where not, keys absent from
/// `present` (one word per 32 keys; bit k: key `tile_base + k` is in range and on a valid page)
/// -inf.
#[inline(always)]
pub(crate) fn mask_logits<const KN: usize, const PW: usize>(
    s: &mut [[f32; 4]; KN],
    tile_base: u32,
    present: [u32; PW],
    rows: &WarpRows,
    logit: &LogitScale,
    p: &RpaParams,
) {
    const { assert!(PW == KN.div_ceil(4), "one presence word per four n-tiles") };
    let cq = (lane_id() % 4) as usize;
    let include_masked = p.include_masked != 0;
    logit.transform_tiles(s, p);
    // Masks, unless every key is visible to every row of the warp (most tiles of a long row).
    let mut all_present = true;
    unroll::<PW>(|w| {
        // The word's keys: 32, or 16 in a tile of 16 (bits past them are ignored).
        let keys = 8 * (KN - 4 * w).min(4) as u32;
        let outside = if keys >= 32 { 0 } else { u32::MAX << keys };
        all_present &= present[w] | outside == u32::MAX;
    });
    let interior = tile_base >= rows.all_first && tile_base + 8 * KN as u32 <= rows.all_end && all_present;
    if !interior {
        // Per row and 32-key word, the keys that count as visible and those that count masked
        // (`include_masked`), as bit masks built once from the row's window; each element then
        // tests a bit at a constant position (the lane's keys 2 (lane % 4) + {0, 1} of each
        // 8-key n-tile, after a shift by 2 (lane % 4)): a few instructions per element instead
        // of three comparisons on its key index, and no key index held in registers.
        let keys = 8 * KN as u32;
        let rel = |x: u32| x.saturating_sub(tile_base).min(keys);
        unroll::<2>(|ri| {
            let w = &rows.win[ri];
            let (vis_lo, vis_hi) = (rel(w.first), rel(w.end));
            let counted_hi = if include_masked && w.first < w.end { rel(w.kv_len) } else { 0 };
            unroll::<PW>(|word| {
                let base = 32 * word as u32;
                let vis = (range_bits(vis_lo, vis_hi, base) & present[word]) >> (2 * cq);
                let counted = (range_bits(0, counted_hi, base) & present[word]) >> (2 * cq);
                unroll::<4>(|n| {
                    let nt = 4 * word + n;
                    if nt >= KN {
                        return;
                    }
                    unroll::<2>(|h| {
                        let bit = 1u32 << (8 * n + h);
                        let e = 2 * ri + h;
                        s[nt][e] = if vis & bit != 0 {
                            s[nt][e]
                        } else if counted & bit != 0 {
                            s[nt][e] + logit.mask_add
                        } else {
                            f32::NEG_INFINITY
                        };
                    })
                })
            })
        });
    }
}

/// Bit k set for the keys `base + k` (k < 32) inside `[lo, hi)`.
#[inline(always)]
pub(crate) fn range_bits(lo: u32, hi: u32, base: u32) -> u32 {
    let ones = |n: u32| if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
    let (a, b) = (lo.saturating_sub(base), hi.saturating_sub(base));
    ones(b) & !ones(a)
}

/// Hands a warp's `(m, l, O)` of rows `g` and `g + 8` to [`merge_warps_and_store`]: shared layout
/// `[logical warp][row][2 + head_dim]` f32, `O` covering dims `[dim0, dim0 + 8 * NTILES)`. Warps
/// that split the head dims of one logical warp share its `(m, l)`; the one with `dim0 == 0`
/// writes them. With `PAIRED`, n-tile `2j + parity` holds dims `16j + 2n + parity` (the
/// pipelined kernel's 1-byte V operands: `StagedKv::v_operands`) instead of `8 nt + n`. The
/// caller synchronizes the block before (nothing else may still use that shared memory) and after.
#[inline(always)]
pub(crate) unsafe fn store_warp_state<const NTILES: usize, const PAIRED: bool>(
    smem: *mut f32,
    head_dim: usize,
    logical_warp: usize,
    dim0: usize,
    m: &[f32; 2],
    l: &[f32; 2],
    o: &[[f32; 4]; NTILES],
) {
    let lane = lane_id() as usize;
    let (gq, cq) = (lane / 4, lane % 4);
    let stride = 2 + head_dim;
    unroll::<2>(|ri| {
        let sum = quad_sum(l[ri]);
        let row = smem.add((logical_warp * MMA_HEADS_PER_BLOCK as usize + gq + 8 * ri) * stride);
        if cq == 0 && dim0 == 0 {
            *row = m[ri];
            *row.add(1) = sum;
        }
        unroll::<NTILES>(|nt| {
            if PAIRED {
                // n-tile 2j + parity holds dims 16j + 2n + parity of its columns n.
                let dim = dim0 + (nt / 2) * 16 + 4 * cq + nt % 2;
                *row.add(2 + dim) = o[nt][2 * ri];
                *row.add(4 + dim) = o[nt][2 * ri + 1];
            } else {
                let dim = dim0 + nt * 8 + 2 * cq;
                *row.add(2 + dim) = o[nt][2 * ri];
                *row.add(3 + dim) = o[nt][2 * ri + 1];
            }
        });
    });
}

#[inline(always)]
unsafe fn rpa_mma<Q: MmaElement, KV: KvElement, const KSTEPS: usize, const NTILES: usize>(
    ptr: RpaPointers<Q, KV>,
    p: RpaParams,
) {
    let lane = lane_id() as usize;
    // Programmatic dependent launch (sm_90 image; no-ops otherwise): let the next kernel (the
    // split merge, or the next call's) launch during this one's last wave, and touch no memory
    // before the kernel before this one has finished.
    crate::grid_dependency::launch_dependents();
    crate::grid_dependency::wait_for_prerequisites();
    let warp = thread_idx_x() / WARP_SIZE;
    let (gq, cq) = (lane / 4, lane % 4);
    let d = p.head_dim as usize;
    let blk = resolve_block(&ptr, &p, MMA_HEADS_PER_BLOCK);
    let qa = load_q_fragments::<Q, KV, KSTEPS, false>(&ptr, &p, &blk);

    let mut o = [[0.0f32; 4]; NTILES];
    // Running max and (this lane's share of the) sum for rows gq and gq + 8.
    let mut m = [f32::NEG_INFINITY; 2];
    let mut l = [0.0f32; 2];
    let key_ok = |j: u32| j < blk.split_hi && key_row(ptr.kv, &blk, &p, j).is_some();

    let mut base = blk.split_lo + warp * KEYS_PER_WARP_STEP;
    while base < blk.split_hi {
        // S = Q Kᵀ for keys base + [0, 16): this lane loads key base + nt*8 + gq.
        let mut s = [[0.0f32; 4]; 2];
        unroll::<2>(|nt| {
            let j = base + (nt * 8 + gq) as u32;
            let row = if j < blk.split_hi { key_row(ptr.kv, &blk, &p, j) } else { None };
            unroll::<KSTEPS>(|k| {
                let b = match row {
                    Some(r) => [k_pair::<Q, KV>(r, k * 16 + 2 * cq, &p), k_pair::<Q, KV>(r, k * 16 + 8 + 2 * cq, &p)],
                    None => [0, 0],
                };
                s[nt] = Q::mma(qa[k], b, s[nt]);
            });
        });

        // Logits: scale, soft cap, mask; absent keys (past the split, invalid page) are -inf.
        // Element e of n-tile nt is row gq + 8*(e/2), key base + nt*8 + 2*cq + e%2.
        unroll::<2>(|nt| {
            unroll::<4>(|e| {
                let j = base + (nt * 8 + 2 * cq + (e & 1)) as u32;
                s[nt][e] = if key_ok(j) { finish_logit(s[nt][e], j, &blk, &p) } else { f32::NEG_INFINITY };
            })
        });

        // Online softmax per row; P packed as the A operand of P·V.
        let pa = online_softmax_step::<Q, NTILES>(&s, LOG2_E, true, &mut m, &mut l, &mut o);

        // O += P V: this lane reads dims nt*8 + gq of keys base + 2cq + {0, 1, 8, 9}.
        let mut v_rows: [Option<*const KV>; 4] = [None; 4];
        unroll::<4>(|i| {
            let j = base + 2 * cq as u32 + [0, 1, 8, 9][i];
            if j < blk.split_hi {
                v_rows[i] = key_row(ptr.kv, &blk, &p, j).map(|r| r.add(d));
            }
        });
        unroll::<NTILES>(|nt| {
            let dim = nt * 8 + gq;
            let b = [
                Q::pack2(v_elem(v_rows[0], dim, &p), v_elem(v_rows[1], dim, &p)),
                Q::pack2(v_elem(v_rows[2], dim, &p), v_elem(v_rows[3], dim, &p)),
            ];
            o[nt] = Q::mma(pa, b, o[nt]);
        });
        base += RPA_WARPS * KEYS_PER_WARP_STEP;
    }

    // Hand (m, l, O) of rows gq and gq + 8 to the shared merge: layout [warp][row][2 + d].
    let smem = dynamic_shared_mem::<f32>();
    store_warp_state::<NTILES, false>(smem, d, warp as usize, 0, &m, &l, &o);
    sync_threads();
    let states = WarpStates {
        smem,
        warps: RPA_WARPS as usize,
        rows: MMA_HEADS_PER_BLOCK as usize,
        stride: 2 + d,
        cluster_area: core::ptr::null_mut(),
        counts_for_merge_blocks: false,
    };
    merge_warps_and_store(&ptr, &p, &blk, states, RPA_THREADS as usize, super::block_slot::WholeBlock);
}

/// One tensor-core kernel per (q dtype, KV dtype, head_dim): `rpa_mma_<q>_<kv>_d<D>`.
macro_rules! rpa_mma_kernels {
    ($( $name:ident: $q:ty, $kv:ty, $d:literal; )*) => {
        attention_kernels! { $( $name: $q, $kv => rpa_mma[$d / 16, $d / 8]; )* }
    };
}

macro_rules! rpa_mma_dims {
    ($( $q:ty, $kv:ty => $($name:ident $d:literal),* ; )*) => {
        rpa_mma_kernels! { $( $( $name: $q, $kv, $d; )* )* }
    };
}

rpa_mma_dims! {
    f16, f16 => rpa_mma_f16_f16_d64 64, rpa_mma_f16_f16_d80 80, rpa_mma_f16_f16_d96 96, rpa_mma_f16_f16_d112 112, rpa_mma_f16_f16_d128 128;
    f16, F8E4M3 => rpa_mma_f16_e4m3_d64 64, rpa_mma_f16_e4m3_d80 80, rpa_mma_f16_e4m3_d96 96, rpa_mma_f16_e4m3_d112 112, rpa_mma_f16_e4m3_d128 128;
    f16, F8E5M2 => rpa_mma_f16_e5m2_d64 64, rpa_mma_f16_e5m2_d80 80, rpa_mma_f16_e5m2_d96 96, rpa_mma_f16_e5m2_d112 112, rpa_mma_f16_e5m2_d128 128;
    Bf16, Bf16 => rpa_mma_bf16_bf16_d64 64, rpa_mma_bf16_bf16_d80 80, rpa_mma_bf16_bf16_d96 96, rpa_mma_bf16_bf16_d112 112, rpa_mma_bf16_bf16_d128 128;
    Bf16, F8E4M3 => rpa_mma_bf16_e4m3_d64 64, rpa_mma_bf16_e4m3_d80 80, rpa_mma_bf16_e4m3_d96 96, rpa_mma_bf16_e4m3_d112 112, rpa_mma_bf16_e4m3_d128 128;
    Bf16, F8E5M2 => rpa_mma_bf16_e5m2_d64 64, rpa_mma_bf16_e5m2_d80 80, rpa_mma_bf16_e5m2_d96 96, rpa_mma_bf16_e5m2_d112 112, rpa_mma_bf16_e5m2_d128 128;
}
