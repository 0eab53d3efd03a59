//! Key masks on `mma` accumulator fragments (causal, sliding window, key presence), shared by
//! the decode and prefill kernels.

use crate::attention::softmax::LogitScale;
use crate::attention::{RowWindow, RpaParams};
use crate::kernels::unroll;
use crate::warp::lane_id;

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
                            s[nt][e] + logit.mask_add()
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
