//! Online softmax on `mma` accumulator fragments, shared by the decode (`mma.sync` rows, the
//! pipelined kernels) and prefill (query tiles, `wgmma`) kernels: the scale of a logit (sm_scale,
//! soft cap, `exp2`), the running max / sum with lazy rescaling, and P packed as an A operand.

use crate::attention::RpaParams;
use crate::kernels::unroll;
use crate::math::{exp2_approx, fma_f32, max_f32, opaque_f32, tanh_fast, LOG2_E};
use crate::mma::MmaElement;
use crate::warp::{butterfly_max_f32, butterfly_sum_f32, warp_any};

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
    // Both rows at once (unlike `softmax_row`, one row after the other): their max trees, then
    // one vote on whether either moves its reference, then their weights together. The two rows'
    // dependency chains interleave, and a tile pays one vote and branch instead of two: the
    // warp-specialized consumers' softmax is bound by its chains' latency (benchmarks/NOTES.md
    // "v37"). When one row moves, the other takes the move's path too and keeps its reference
    // (its max did not rise that far), with a factor of 1 up to rounding.
    let mut rescale = Rescale { corr: [1.0; 2], any: false };
    let local = [lane_row_max(s, 0), lane_row_max(s, 1)];
    let mut neg_ref = [neg_ref_of(m[0], exp_scale), neg_ref_of(m[1], exp_scale)];
    if warp_any(rose(local[0], m[0], exp_scale) || rose(local[1], m[1], exp_scale)) {
        unroll::<2>(|ri| {
            let (corr, r, m_new) = move_reference(local[ri], exp_scale, m[ri], &mut l[ri]);
            rescale.corr[ri] = corr;
            neg_ref[ri] = r;
            m[ri] = m_new;
        });
        rescale.any = true;
    }
    let mut sums = [[0.0f32; KN]; 2];
    unroll::<KN>(|nt| {
        unroll::<2>(|ri| {
            let w0 = exp2_approx(fma_f32(s[nt][2 * ri], exp_scale, neg_ref[ri]));
            let w1 = exp2_approx(fma_f32(s[nt][2 * ri + 1], exp_scale, neg_ref[ri]));
            s[nt][2 * ri] = w0;
            s[nt][2 * ri + 1] = w1;
            sums[ri][nt] = w0 + w1;
        })
    });
    unroll::<2>(|ri| l[ri] += tree_fold::<KN>(&mut sums[ri], |a, b| a + b));
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
/// row's max, its running reference `m` (moved lazily: [`rose`]), `on_move(corr)` when some row
/// of the warp moved its reference (`l` already rescaled; rows that kept theirs get corr = 1),
/// then `weight(nt, w0, w1)` with the weights of n-tile `nt`'s two keys, summed into `l`. (The
/// steps of [`online_softmax_weights_f32`], one row at a time, through the same helpers but for
/// the reference's move, written out: through [`move_reference`] LLVM lays out the head_dim-64
/// and -80 decode kernels' code differently, which the decode matrix has not been measured with.)
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
    let local = lane_row_max(s, ri);
    let mut neg_ref = neg_ref_of(*m, exp_scale);
    // Warp-uniform branches: rare once the rows have seen their first keys.
    if warp_any(rose(local, *m, exp_scale)) {
        let m_max = max_f32(*m, quad_max(local));
        let m_new = if rose(m_max, *m, exp_scale) { m_max } else { *m };
        neg_ref = neg_ref_of(m_new, exp_scale);
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

/// This lane's max of row `ri`'s logits in the tile, as a tree (a linear fold is a chain of 2 KN
/// dependent instructions; with two warps per scheduler their latency is not hidden).
#[inline(always)]
fn lane_row_max<const KN: usize>(s: &[[f32; 4]; KN], ri: usize) -> f32 {
    let mut part = [f32::NEG_INFINITY; KN];
    unroll::<KN>(|nt| part[nt] = max_f32(s[nt][2 * ri], s[nt][2 * ri + 1]));
    tree_fold::<KN>(&mut part, max_f32)
}

/// Whether a lane's `max` rose above the running reference `m` by more than
/// [`RESCALE_THRESHOLD_LOG2`] in exp2 units: the reference moves only then (the first finite max
/// always: -inf to finite is +inf). Weights then stay at most 2^8: no overflow, the same relative
/// rounding, and O and l keep one reference, so the final O / l is unchanged; the rescale is
/// skipped on almost every tile once a row has seen its first keys, where an exact max moves on
/// most tiles of a 16-row warp. Whether any lane's own max rose that far is one vote (the
/// caller's); only then does the row's max across its quad (two shuffles on the softmax's
/// critical path) get computed ([`move_reference`]): the same reference as from the row's max
/// every time, since the row's max rose that far exactly when one of its lanes' did.
#[inline(always)]
fn rose(max: f32, m: f32, exp_scale: f32) -> bool {
    (max - m) * exp_scale > RESCALE_THRESHOLD_LOG2
}

/// The reference `m` in exp2 units, negated (all -inf so far: 0, so exp gives 0, never NaN).
#[inline(always)]
fn neg_ref_of(m: f32, exp_scale: f32) -> f32 {
    -(if m == f32::NEG_INFINITY { 0.0 } else { m }) * exp_scale
}

/// A row's reference `m` moved to its max across the quad (this lane's is `local`) where that
/// rose far enough ([`rose`]), `l` rescaled: returns O's factor for the row (1 where it kept its
/// reference), the new reference in exp2 units ([`neg_ref_of`]) and the new `m`. Every lane of
/// the warp calls it (shuffles).
#[inline(always)]
fn move_reference(local: f32, exp_scale: f32, m: f32, l: &mut f32) -> (f32, f32, f32) {
    let m_max = max_f32(m, quad_max(local));
    let m_new = if rose(m_max, m, exp_scale) { m_max } else { m };
    let neg_ref = neg_ref_of(m_new, exp_scale);
    let corr = exp2_approx(fma_f32(m, exp_scale, neg_ref));
    *l *= corr;
    (corr, neg_ref, m_new)
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
