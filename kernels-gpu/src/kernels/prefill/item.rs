//! A tile item as both prefill tile kernels ([`super::tiled`], [`super::hopper`]) see it: rows
//! `[r0, r0 + rc)` of one sequence for one KV head. The rows' windows and the keys they visit
//! ([`ItemRows`]), the zero-fill of an item with no keys, the normalized stores of a warp's rows,
//! and `O += P V` on the warpgroup tensor cores with P in registers.

use crate::attention::mask::WarpRows;
use crate::attention::planner::TiledPointers;
use crate::attention::softmax::quad_sum;
use crate::attention::{row_window, RowWindow, RpaParams};
use crate::kernels::unroll;
use crate::math::inverse_or_zero;
use crate::mma::MmaElement;
use crate::warp::lane_id;
use crate::wgmma;

/// Keys `[lo, hi)` that any of rows `[ra, rb]` of an item may visit (rows' ranges grow with the
/// row; an empty first row widens the range to 0, which only costs masked work).
#[inline(always)]
pub(crate) fn rows_visit_range(first: &RowWindow, last: &RowWindow, include_masked: bool) -> (u32, u32) {
    let (lo_a, hi_a) = first.visit_range(include_masked);
    let (lo_b, hi_b) = last.visit_range(include_masked);
    (lo_a.min(lo_b), hi_a.max(hi_b))
}

/// An item's rows `[r0, r0 + rc)` of one sequence and the keys each may see, from the device
/// metadata (read once per item).
#[derive(Clone, Copy)]
pub(crate) struct ItemRows {
    r0: u32,
    rc: u32,
    seq_start: i32,
    seq_end: i32,
    kv_len_raw: i32,
    max_kv: u32,
    sliding_window: u32,
    include_masked: bool,
}

impl ItemRows {
    /// # Safety
    /// `seq` < `p.max_num_seqs`; `ptr.cu_q_lens` and `ptr.kv_lens` as the kernels take them.
    #[inline(always)]
    pub(crate) unsafe fn load<Q>(ptr: &TiledPointers<Q>, p: &RpaParams, seq: u32, r0: u32, rc: u32) -> Self {
        ItemRows {
            r0,
            rc,
            seq_start: *ptr.cu_q_lens.add(seq as usize),
            seq_end: *ptr.cu_q_lens.add(seq as usize + 1),
            kv_len_raw: *ptr.kv_lens.add(seq as usize),
            max_kv: p.pages_per_seq * p.page_size,
            sliding_window: p.sliding_window,
            include_masked: p.include_masked != 0,
        }
    }

    /// The window of row `r` of the item.
    #[inline(always)]
    pub(crate) fn window(&self, r: u32) -> RowWindow {
        row_window(
            (self.r0 + r) as i32,
            self.seq_start,
            self.seq_end,
            self.kv_len_raw,
            self.max_kv,
            self.sliding_window,
        )
    }

    /// Keys `[lo, hi)` that any row of the item visits.
    #[inline(always)]
    pub(crate) fn keys(&self) -> (u32, u32) {
        rows_visit_range(&self.window(0), &self.window(self.rc - 1), self.include_masked)
    }

    /// For the `count` M rows from `m_base` (query row `mr / group` of each), the keys any of them
    /// visits and `[all_first, all_end)`, the keys every one of them sees; all 0 when none of the
    /// rows is in the item.
    #[inline(always)]
    pub(crate) fn m_rows_keys(&self, m_base: u32, count: u32, group: u32) -> (u32, u32, u32, u32) {
        let ra = m_base / group;
        if ra < self.rc {
            let rb = ((m_base + count - 1) / group).min(self.rc - 1);
            let (wa, wb) = (self.window(ra), self.window(rb));
            let (lo, hi) = rows_visit_range(&wa, &wb, self.include_masked);
            (lo, hi, wb.first, wa.end)
        } else {
            (0, 0, 0, 0)
        }
    }

    /// This lane's two M rows (g and g + 8 of the mma fragments) of the warp whose 16 rows start at
    /// `m_base`, and what the mask of those 16 rows needs.
    #[inline(always)]
    pub(crate) fn warp_rows(&self, m_base: u32, group: u32) -> ([u32; 2], WarpRows) {
        let lane = lane_id();
        let m_rows = [m_base + lane / 4, m_base + lane / 4 + 8];
        let mut win = [RowWindow { kv_len: 0, first: 0, end: 0 }; 2];
        unroll::<2>(|ri| {
            let r = m_rows[ri] / group;
            if r < self.rc {
                win[ri] = self.window(r);
            }
        });
        let (_, _, all_first, all_end) = self.m_rows_keys(m_base, 16, group);
        (m_rows, WarpRows { win, all_first, all_end })
    }
}

/// Zeros rows `[r0, r0 + rc)` of the output for the query heads of KV head `g` (a zero-fill
/// item), thread `thread` of `threads` taking every `threads`-th 4-byte word.
///
/// # Safety
/// Rows within `ptr.out` (`p.max_tokens`); `thread < threads`.
#[inline(always)]
pub(crate) unsafe fn zero_item_rows<Q, const D: usize>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    r0: u32,
    rc: u32,
    g: u32,
    thread: u32,
    threads: u32,
) {
    let (group, nq) = (p.num_q_heads / p.num_kv_heads, p.num_q_heads as usize);
    // The heads of `g` are `group * D` contiguous elements of each row.
    let words_per_row = group * D as u32 / 2;
    let mut idx = thread;
    while idx < rc * words_per_row {
        let (r, w) = (idx / words_per_row, idx % words_per_row);
        let row = ptr.out.add(((r0 + r) as usize * nq + (g * group) as usize) * D) as *mut u32;
        *row.add(w as usize) = 0;
        idx += threads;
    }
}

/// Normalizes this lane's share of its two M rows (`m_rows`, with `l` and `o` from the online
/// softmax) and writes them to the output rows of item rows `[r0, r0 + rc)` (KV head `g`); rows
/// past the item are skipped.
///
/// # Safety
/// Rows within `ptr.out`; every lane of the warp executes it (the row sums are quad reductions).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn store_rows<Q: MmaElement, const D: usize, const NTILES: usize>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    r0: u32,
    rc: u32,
    g: u32,
    m_rows: [u32; 2],
    l: &[f32; 2],
    o: &[[f32; 4]; NTILES],
) {
    let (group, nq) = (p.num_q_heads / p.num_kv_heads, p.num_q_heads as usize);
    let cq = (lane_id() % 4) as usize;
    unroll::<2>(|ri| {
        let sum = quad_sum(l[ri]);
        let r = m_rows[ri] / group;
        if r < rc {
            let inv = inverse_or_zero(sum);
            let h = g * group + m_rows[ri] % group;
            let row = ptr.out.add(((r0 + r) as usize * nq + h as usize) * D);
            unroll::<NTILES>(|nt| {
                let dim = nt * 8 + 2 * cq;
                *(row.add(dim) as *mut u32) = Q::pack2(o[nt][2 * ri] * inv, o[nt][2 * ri + 1] * inv);
            });
        }
    });
}

/// Issues `O += P V` on the tensor cores (`wgmma`, one commit group; the caller waits): P from
/// registers (`pa`, `KS` k-steps of 16 keys), V from the stage at shared address `v_tile` (`16 KS`
/// keys, 128-byte swizzled rows in 64-dim column blocks, read transposed: MN-major B), O as
/// `NTILES` n-tiles of 8 dims. O and `pa` must not be touched until the group's wait (then
/// [`keep_o`] and `wgmma::keep_fragments`).
///
/// # Safety
/// Every thread of the warpgroup executes it; the V tile has landed and is visible to the async
/// proxy (`wgmma::fence_proxy_async_shared` after the copies' wait).
#[inline(always)]
pub(crate) unsafe fn wgmma_pv_issue<Q: MmaElement, const NTILES: usize, const KS: usize>(
    o: &mut [[f32; 4]; NTILES],
    pa: &[[u32; 4]; KS],
    v_tile: u32,
) {
    wgmma_pv_issue_at::<Q, NTILES, KS>(o, pa, pv_descriptor::<KS>(v_tile))
}

/// The warp-uniform descriptor of the V stage at shared address `v_tile` (`16 KS` keys) for
/// [`wgmma_pv_issue_at`]: made ahead of the issue, it keeps its shuffle and its move to a uniform
/// register off the issue's path (the Hopper prefill makes it before its consumer's turn).
#[inline(always)]
pub(crate) fn pv_descriptor<const KS: usize>(v_tile: u32) -> u64 {
    // 16 keys per k-step are 16 rows of 128 bytes; the 64-dim column blocks are the tile's
    // 16 KS rows apart.
    wgmma::warp_uniform(wgmma::descriptor(v_tile, KS as u32 * 16 * 128, 8 * 128, wgmma::Swizzle::Bytes128))
}

/// [`wgmma_pv_issue`] with V's descriptor made by the caller ([`pv_descriptor`]).
///
/// # Safety
/// As [`wgmma_pv_issue`].
#[inline(always)]
pub(crate) unsafe fn wgmma_pv_issue_at<Q: MmaElement, const NTILES: usize, const KS: usize>(
    o: &mut [[f32; 4]; NTILES],
    pa: &[[u32; 4]; KS],
    v_desc: u64,
) {
    let desc = |ks: usize| wgmma::advance(v_desc, ks as u32 * 16 * 128);
    macro_rules! pv {
        ($regs:literal, $mma:ident) => {{
            let acc = &mut *(o.as_mut_ptr() as *mut [f32; $regs]);
            // Every write of O and P (the softmax's rescale) lands before the fence.
            wgmma::keep_accumulator(acc);
            wgmma::fence();
            unroll::<KS>(|ks| wgmma::$mma::<Q, 1>(acc, pa[ks], desc(ks), true));
            wgmma::commit_group();
        }};
    }
    const { assert!(NTILES == 8 || NTILES == 16 || NTILES == 32, "head_dim 64, 128 or 256") };
    if NTILES == 32 {
        // head_dim 256: two n = 128 halves of O (dims 0-127 and 128-255, V's column blocks 0-1
        // and 2-3), one commit group.
        keep_o(o);
        let acc = o.as_mut_ptr() as *mut [f32; 64];
        let (lo, hi) = (&mut *acc, &mut *acc.add(1));
        wgmma::fence();
        let half = 2 * KS as u32 * 16 * 128;
        unroll::<KS>(|ks| wgmma::mma_m64n128k16_rs::<Q, 1>(lo, pa[ks], desc(ks), true));
        unroll::<KS>(|ks| wgmma::mma_m64n128k16_rs::<Q, 1>(hi, pa[ks], wgmma::advance(desc(ks), half), true));
        wgmma::commit_group();
    } else if NTILES == 16 {
        pv!(64, mma_m64n128k16_rs)
    } else {
        pv!(32, mma_m64n64k16_rs)
    }
}

/// Pins O's registers after the wait that retires a `wgmma` writing them.
#[inline(always)]
pub(crate) fn keep_o<const NTILES: usize>(o: &mut [[f32; 4]; NTILES]) {
    // SAFETY (of the casts): [[f32; 4]; NTILES] is 4 NTILES contiguous f32.
    if NTILES == 32 {
        // Two halves: LLVM unrolls the pin's loop over 64 registers, not over 128 (an array it
        // cannot unroll over stays in local memory).
        let halves = o.as_mut_ptr() as *mut [f32; 64];
        unsafe {
            wgmma::keep_accumulator(&mut *halves);
            wgmma::keep_accumulator(&mut *halves.add(1));
        }
    } else if NTILES == 16 {
        wgmma::keep_accumulator(unsafe { &mut *(o.as_mut_ptr() as *mut [f32; 64]) });
    } else if NTILES == 8 {
        wgmma::keep_accumulator(unsafe { &mut *(o.as_mut_ptr() as *mut [f32; 32]) });
    }
}
