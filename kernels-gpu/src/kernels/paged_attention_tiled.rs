//! Ragged paged attention over query tiles: the prefill and mixed-batch kernel. Several query
//! rows of one sequence share every K/V tile they read, where the decode kernels read a row's keys
//! once per row (a 2k-row prefill read its K/V 2048 times).
//!
//! Two kernels per call:
//! - [`rpa_plan`] (one block) turns the device metadata into work items, with no host sync:
//!   `(sequence, first row, rows)`. A sequence of at most `16 / group` rows (a decode row, a few
//!   speculative rows) is one item; a longer one is cut into tiles of `RpaParams::tile_rows`
//!   (`64 / group`) rows. Rows no sequence owns (before `cu_q_lens[0]`, past
//!   `cu_q_lens[num_seqs]`) become zero-fill items. The grid of the attention kernel is sized from
//!   the static shapes (`RpaParams::plan_capacity`, an upper bound on the items) and surplus blocks
//!   exit at once. When `cu_q_lens` decreases somewhere (invalid metadata) the plan says so, and
//!   the attention blocks fall back to one row per item, rows found as in
//!   [`crate::attention::find_sequence`]: the same results as every other kernel, slower.
//! - `rpa_tile_<q>_<kv>_d<D>`: block (item, KV head `g`). Its M rows are (query row, query head
//!   of `g`) pairs, row-major: 64 for a tile, 16 per warp. K/V come through the same 3-stage
//!   `cp.async` ring of 64-key tiles as the decode kernel (permuted rows, `ldmatrix`, `mma.sync`),
//!   over the keys any row of the item can see: key tiles wholly above the causal diagonal or
//!   before the sliding window are never loaded, and a warp skips the 16-key groups its own rows
//!   cannot see. A tile item gives each warp its 16 rows and every key; a short item (at most 16
//!   M rows) gives every warp the same rows and a quarter of the keys, merged through shared
//!   memory at the end, as in decode.
//!
//! Items run last-first: the last tiles of a causal sequence see the most keys, and starting them
//! first keeps them off the tail of the grid.

use crate::attention::{clamp_num_seqs, find_sequence, page_is_valid, row_window, RowWindow, RpaParams};
use crate::copy::{commit_group, cp_async_16, evict_first_policy, wait_all, wait_group, CopyHint};
use crate::kernel;
use crate::math::{exp2_approx, max_f32, tanh, LOG2_E};
use crate::mma::{ldmatrix_x4, ldmatrix_x4_trans, MmaElement};
use crate::num::Bf16;
use crate::shared::{dynamic_shared_mem, shared_address};
use crate::thread::{block_idx_x, block_idx_y, grid_dim_x, sync_threads, thread_idx_x};
use crate::warp::{lane_id, warp_ballot, WARP_SIZE};

use super::paged_attention_mma::{online_softmax_step, quad_sum, store_warp_state, MMA_HEADS_PER_BLOCK};
use super::unroll;

/// M rows (query row × query head pairs) of a tile: 16 per warp.
pub const TILE_M: u32 = 64;
/// Keys per pipeline stage.
pub const TILE_KEYS: u32 = 64;
/// Shared-memory stages of the K/V pipeline.
pub const TILE_STAGES: u32 = 3;
/// Threads per block of the tiled kernel (4 warps).
pub const TILE_THREADS: u32 = 128;
/// Threads of the planning kernel (one block).
pub const PLAN_THREADS: u32 = 256;
/// Words before the items in the plan: item count, fallback flag, two reserved.
pub const PLAN_HEADER_WORDS: u32 = 4;
/// Words per item: sequence ([`NO_SEQUENCE`] for zero-fill), first row, rows, reserved.
pub const PLAN_ITEM_WORDS: u32 = 4;
/// Rows per zero-fill item.
const ZERO_ITEM_ROWS: u32 = 64;
/// The sequence of a zero-fill item.
const NO_SEQUENCE: u32 = u32::MAX;
/// 16-key groups of a tile.
const KEY_GROUPS: u32 = TILE_KEYS / 16;

/// Whether the tiled kernel covers a head size and GQA group (16-bit KV of q's dtype).
pub const fn tiled_supports(head_dim: u32, group: u32) -> bool {
    (head_dim == 64 || head_dim == 128) && group >= 1 && group <= TILE_M
}

/// Query rows per tile item for a GQA group.
pub const fn tile_rows(group: u32) -> u32 {
    TILE_M / group
}

/// Upper bound on the plan's items: tiles of every sequence (at most `rows / tile_rows` plus one
/// partial tile per non-empty sequence) and zero-fill items (at most `rows / 64` plus two partial).
pub const fn plan_capacity(max_tokens: u64, max_num_seqs: u64, tile_rows: u64) -> u64 {
    let nonempty = if max_num_seqs < max_tokens { max_num_seqs } else { max_tokens };
    max_tokens.div_ceil(tile_rows) + nonempty + max_tokens.div_ceil(ZERO_ITEM_ROWS as u64) + 2
}

/// Bytes of the plan buffer.
pub const fn plan_bytes(capacity: u64) -> u64 {
    (PLAN_HEADER_WORDS as u64 + PLAN_ITEM_WORDS as u64 * capacity) * 4
}

/// Dynamic shared memory of the planning kernel.
pub const PLAN_SHARED_BYTES: u32 = 2 * PLAN_THREADS * 4;

/// Dynamic shared memory of the tiled kernel: the pipeline stages, reused by the short-item merge.
pub const fn tiled_shared_bytes(head_dim: u32) -> u32 {
    let pipeline = TILE_STAGES * 2 * TILE_KEYS * head_dim * 2;
    let merge = (TILE_THREADS / WARP_SIZE) * MMA_HEADS_PER_BLOCK * (2 + head_dim) * 4;
    if pipeline > merge {
        pipeline
    } else {
        merge
    }
}

/// Items of a sequence with `rows` query rows (in `[0, max_tokens)`).
#[inline(always)]
fn items_for_rows(rows: u32, group: u32, tile_rows: u32) -> u32 {
    if rows == 0 {
        0
    } else if rows <= 16 / group {
        1
    } else {
        rows.div_ceil(tile_rows)
    }
}

/// Builds the plan (see the module docs) with one block of [`PLAN_THREADS`] threads: each thread
/// counts the items of a contiguous run of sequences, a block-wide scan places them.
#[inline(always)]
unsafe fn plan_items(cu_q_lens: *const i32, num_seqs: *const i32, plan: *mut u32, p: RpaParams) {
    let tid = thread_idx_x();
    let n = clamp_num_seqs(*num_seqs, p.max_num_seqs);
    let group = p.num_q_heads / p.num_kv_heads;
    let tile_rows = p.tile_rows.max(1);
    let max_tokens = p.max_tokens as i32; // < 2^31, validated on the host
    let cu = |i: u32| *cu_q_lens.add(i as usize);
    let row_of = |i: u32| cu(i).clamp(0, max_tokens) as u32;
    let per = n.div_ceil(PLAN_THREADS);
    let lo = (tid * per).min(n);
    let hi = (lo + per).min(n);
    let mut items = 0u32;
    let mut decreasing = 0u32;
    for i in lo..hi {
        if cu(i + 1) < cu(i) {
            decreasing += 1;
        }
        items += items_for_rows(row_of(i + 1).saturating_sub(row_of(i)), group, tile_rows);
    }

    // Inclusive scan of (items, decreasing) over the threads (Hillis-Steele in shared memory).
    let scan = dynamic_shared_mem::<u32>();
    let bad = scan.add(PLAN_THREADS as usize);
    *scan.add(tid as usize) = items;
    *bad.add(tid as usize) = decreasing;
    sync_threads();
    let mut offset = 1;
    while offset < PLAN_THREADS {
        let (mut a, mut b) = (*scan.add(tid as usize), *bad.add(tid as usize));
        if tid >= offset {
            a += *scan.add((tid - offset) as usize);
            b += *bad.add((tid - offset) as usize);
        }
        sync_threads();
        *scan.add(tid as usize) = a;
        *bad.add(tid as usize) = b;
        sync_threads();
        offset *= 2;
    }
    let total = *scan.add(PLAN_THREADS as usize - 1);
    let capacity = p.plan_capacity;
    if *bad.add(PLAN_THREADS as usize - 1) != 0 {
        if tid == 0 {
            *plan = 0;
            *plan.add(1) = 1;
        }
        return;
    }
    let write = |k: u32, seq: u32, row: u32, rows: u32| {
        if k < capacity {
            let item = plan.add((PLAN_HEADER_WORDS + PLAN_ITEM_WORDS * k) as usize);
            *item = seq;
            *item.add(1) = row;
            *item.add(2) = rows;
            *item.add(3) = 0;
        }
    };
    let mut k = *scan.add(tid as usize) - items;
    for i in lo..hi {
        let (r0, r1) = (row_of(i), row_of(i + 1));
        if r1 <= r0 {
            continue;
        }
        if r1 - r0 <= 16 / group {
            write(k, i, r0, r1 - r0);
            k += 1;
        } else {
            let mut r = r0;
            while r < r1 {
                let rows = (r1 - r).min(tile_rows);
                write(k, i, r, rows);
                k += 1;
                r += rows;
            }
        }
    }
    // Zero-fill items for the rows before the first sequence and after the last.
    let (head, tail0) = (row_of(0), row_of(n));
    let head_items = head.div_ceil(ZERO_ITEM_ROWS);
    let zero_items = head_items + (p.max_tokens - tail0).div_ceil(ZERO_ITEM_ROWS);
    let mut z = tid;
    while z < zero_items {
        let (start, end) = if z < head_items {
            (z * ZERO_ITEM_ROWS, head)
        } else {
            (tail0 + (z - head_items) * ZERO_ITEM_ROWS, p.max_tokens)
        };
        write(total + z, NO_SEQUENCE, start, (end - start).min(ZERO_ITEM_ROWS));
        z += PLAN_THREADS;
    }
    if tid == 0 {
        *plan = (total + zero_items).min(capacity);
        *plan.add(1) = 0;
    }
}

/// Pointers of one tiled launch.
pub(crate) struct TiledPointers<Q> {
    pub q: *const Q,
    pub kv: *const Q,
    pub kv_lens: *const i32,
    pub page_indices: *const i32,
    pub cu_q_lens: *const i32,
    pub num_seqs: *const i32,
    pub plan: *const u32,
    pub out: *mut Q,
}

/// The contract's logit of key `j` for a row with window `w` from a raw `q · k`, or -inf when the
/// key takes no part (outside the window and masked keys are skipped, or the row sees nothing).
#[inline(always)]
fn row_logit(raw: f32, j: u32, w: &RowWindow, p: &RpaParams) -> f32 {
    let visible = w.visible(j);
    let masked_counts = p.include_masked != 0 && w.first < w.end && j < w.kv_len;
    if !visible && !masked_counts {
        return f32::NEG_INFINITY;
    }
    let mut x = raw * p.sm_scale;
    if p.soft_cap != 0.0 {
        x = p.soft_cap * tanh(x / p.soft_cap);
    }
    if visible {
        x
    } else {
        x + p.mask_value
    }
}

/// Keys `[lo, hi)` that any of rows `[ra, rb]` of an item may visit (rows' ranges grow with the
/// row; an empty first row widens the range to 0, which only costs masked work).
#[inline(always)]
fn rows_visit_range(first: &RowWindow, last: &RowWindow, include_masked: bool) -> (u32, u32) {
    let (lo_a, hi_a) = first.visit_range(include_masked);
    let (lo_b, hi_b) = last.visit_range(include_masked);
    (lo_a.min(lo_b), hi_a.max(hi_b))
}

#[inline(always)]
unsafe fn rpa_tiled<Q: MmaElement, const D: usize, const KSTEPS: usize, const NTILES: usize>(
    ptr: TiledPointers<Q>,
    p: RpaParams,
) {
    const { assert!(NTILES * 8 == D && KSTEPS * 16 == D, "tiles cover the head dim") };
    let count = *ptr.plan;
    let fallback = *ptr.plan.add(1);
    let b = block_idx_x();
    if fallback == 0 {
        if b < count {
            let item = ptr.plan.add((PLAN_HEADER_WORDS + PLAN_ITEM_WORDS * (count - 1 - b)) as usize);
            tile_item::<Q, D, KSTEPS, NTILES>(&ptr, &p, *item, *item.add(1), *item.add(2));
        }
    } else {
        // Invalid cu_q_lens: one row per item, owned as find_sequence says (block-uniform loop).
        let num_seqs = clamp_num_seqs(*ptr.num_seqs, p.max_num_seqs);
        let mut t = b;
        while t < p.max_tokens {
            let seq = find_sequence(t as i32, num_seqs, |i| *ptr.cu_q_lens.add(i as usize)).unwrap_or(NO_SEQUENCE);
            tile_item::<Q, D, KSTEPS, NTILES>(&ptr, &p, seq, t, 1);
            t += grid_dim_x();
        }
    }
}

/// One item: rows `[r0, r0 + rc)` of sequence `seq` (or zeros for [`NO_SEQUENCE`]) for the query
/// heads of KV head `blockIdx.y`. Block-uniform; ends with a barrier, so a block may run another.
#[inline(always)]
unsafe fn tile_item<Q: MmaElement, const D: usize, const KSTEPS: usize, const NTILES: usize>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    seq: u32,
    r0: u32,
    rc: u32,
) {
    let g = block_idx_y();
    let group = p.num_q_heads / p.num_kv_heads;
    let nq = p.num_q_heads as usize;
    let tid = thread_idx_x();
    if seq == NO_SEQUENCE {
        // The heads of `g` are `group * D` contiguous elements of each row.
        let words_per_row = group * D as u32 / 2;
        let mut idx = tid;
        while idx < rc * words_per_row {
            let (r, w) = (idx / words_per_row, idx % words_per_row);
            let row = ptr.out.add(((r0 + r) as usize * nq + (g * group) as usize) * D) as *mut u32;
            *row.add(w as usize) = 0;
            idx += TILE_THREADS;
        }
        return;
    }

    let lane = lane_id();
    let warp = tid / WARP_SIZE;
    let cq = (lane % 4) as usize;
    let include_masked = p.include_masked != 0;
    let (seq_start, seq_end) = (*ptr.cu_q_lens.add(seq as usize), *ptr.cu_q_lens.add(seq as usize + 1));
    let kv_len_raw = *ptr.kv_lens.add(seq as usize);
    let max_kv = p.pages_per_seq * p.page_size;
    let window_of = |r: u32| row_window((r0 + r) as i32, seq_start, seq_end, kv_len_raw, max_kv, p.sliding_window);
    let empty = RowWindow { kv_len: 0, first: 0, end: 0 };

    // A short item: every warp takes all its (at most 16) M rows and a quarter of each key tile.
    let short = rc <= 16 / group;
    let m_base = if short { 0 } else { warp * 16 };
    // This lane's two M rows (g and g + 8 of the mma fragments) and their windows.
    let m_rows = [m_base + lane / 4, m_base + lane / 4 + 8];
    let mut win = [empty; 2];
    let mut q_rows: [Option<*const Q>; 2] = [None; 2];
    unroll::<2>(|ri| {
        let r = m_rows[ri] / group;
        if r < rc {
            win[ri] = window_of(r);
            let h = (g * group + m_rows[ri] % group) as usize;
            q_rows[ri] = Some(ptr.q.add(((r0 + r) as usize * nq + h) * D));
        }
    });
    // Keys the item visits, and those the warp's own rows visit.
    let (lo, hi) = rows_visit_range(&window_of(0), &window_of(rc - 1), include_masked);
    let (warp_lo, warp_hi) = {
        let ra = m_base / group;
        if ra < rc {
            let rb = ((m_base + 15) / group).min(rc - 1);
            rows_visit_range(&window_of(ra), &window_of(rb), include_masked)
        } else {
            (0, 0)
        }
    };

    let mut qa = [[0u32; 4]; KSTEPS];
    unroll::<KSTEPS>(|k| {
        let col = k * 16 + 2 * cq;
        if let Some(row) = q_rows[0] {
            qa[k][0] = *(row.add(col) as *const u32);
            qa[k][2] = *(row.add(col + 8) as *const u32);
        }
        if let Some(row) = q_rows[1] {
            qa[k][1] = *(row.add(col) as *const u32);
            qa[k][3] = *(row.add(col + 8) as *const u32);
        }
    });

    // The K/V pipeline (as the decode kernel's, 16-bit rows only).
    let row_bytes: u32 = D as u32 * 2;
    let row_chunks: u32 = row_bytes / 16;
    let stage_bytes = 2 * TILE_KEYS * row_bytes;
    let copies_per_token_thread = 2 * row_chunks / 4;
    let tokens_per_pass = TILE_THREADS / 4;
    let smem = dynamic_shared_mem::<f32>();
    let smem_base = shared_address(smem);
    let kv = ptr.kv as *const u8;
    let token_stride = 2 * p.num_kv_heads as usize * D * 2;
    let head_offset = 2 * g as usize * D * 2;
    let page_table = ptr.page_indices.add(seq as usize * p.pages_per_seq as usize);
    let page_of = |j: u32| -> Option<(i32, u32)> {
        if j >= hi {
            return None;
        }
        let (slot, in_page) = if p.page_size.is_power_of_two() {
            (j >> p.page_size.trailing_zeros(), j & (p.page_size - 1))
        } else {
            (j / p.page_size, j % p.page_size)
        };
        let page = *page_table.add(slot as usize);
        if page_is_valid(page, p.total_pages) {
            Some((page, in_page))
        } else {
            None
        }
    };
    let quad = tid % 4;
    let hint = CopyHint {
        prefetch_256: p.copy_hint & 1 != 0,
        evict_first: if p.copy_hint & 2 != 0 { Some(evict_first_policy()) } else { None },
    };
    // Tile i into stage i % TILE_STAGES: four threads per token, K then V rows, permuted chunks.
    let issue = |i: u32| {
        let stage_base = smem_base + (i % TILE_STAGES) * stage_bytes;
        let tile_base = lo + i * TILE_KEYS;
        unroll::<2>(|pass| {
            let token = pass as u32 * tokens_per_pass + tid / 4;
            let (src, valid) = match page_of(tile_base + token) {
                Some((page, in_page)) => {
                    let t = page as usize * p.page_size as usize + in_page as usize;
                    (kv.add(t * token_stride + head_offset + quad as usize * 16), true)
                }
                None => (kv, false),
            };
            unroll::<8>(|c| {
                if (c as u32) < copies_per_token_thread {
                    let part = c as u32 * 4 + quad;
                    let (region, col) = (part / row_chunks, part % row_chunks);
                    let dst =
                        stage_base + region * TILE_KEYS * row_bytes + token * row_bytes + (col ^ (token & 7)) * 16;
                    cp_async_16(dst, src.add(c * 64), valid, hint);
                }
            });
        });
        commit_group();
    };

    let mut o = [[0.0f32; 4]; NTILES];
    let mut m = [f32::NEG_INFINITY; 2];
    let mut l = [0.0f32; 2];
    let num_tiles = (hi - lo).div_ceil(TILE_KEYS);
    let k_token = (lane / 16) * 8 + lane % 8;
    let k_half = (lane / 8) % 2;
    let v_token = ((lane / 8) % 2) * 8 + lane % 8;
    let v_half = lane / 16;
    let (kg_first, kg_end) = if short { (warp, warp + 1) } else { (0, KEY_GROUPS) };

    for i in 0..TILE_STAGES - 1 {
        if i < num_tiles {
            issue(i);
        } else {
            commit_group();
        }
    }
    for i in 0..num_tiles {
        wait_group::<{ TILE_STAGES - 2 }>();
        sync_threads();
        if i + TILE_STAGES - 1 < num_tiles {
            issue(i + TILE_STAGES - 1);
        } else {
            commit_group();
        }
        let tile_base = lo + i * TILE_KEYS;
        if tile_base >= warp_hi || tile_base + TILE_KEYS <= warp_lo {
            continue; // none of the warp's rows sees this tile (warp-uniform)
        }
        let stage = smem_base + (i % TILE_STAGES) * stage_bytes;
        // Bit k: key tile_base + k is in range and on a valid page.
        let present =
            [warp_ballot(page_of(tile_base + lane).is_some()), warp_ballot(page_of(tile_base + 32 + lane).is_some())];
        let mut kg = kg_first;
        while kg < kg_end {
            let key0 = tile_base + kg * 16;
            if key0 < warp_hi && key0 + 16 > warp_lo {
                let bits = (if kg < 2 { present[0] } else { present[1] }) >> (16 * (kg % 2));
                let k_base = stage + kg * 16 * row_bytes;
                let mut s = [[0.0f32; 4]; 2];
                let k_row = k_base + k_token * row_bytes;
                unroll::<KSTEPS>(|k| {
                    let col = k as u32 * 2 + k_half;
                    let b = ldmatrix_x4(k_row + ((col ^ (k_token & 7)) * 16));
                    s[0] = Q::mma(qa[k], [b[0], b[1]], s[0]);
                    s[1] = Q::mma(qa[k], [b[2], b[3]], s[1]);
                });
                // Element e of n-tile nt: M row lane/4 + 8*(e/2), key key0 + nt*8 + 2*cq + e%2.
                unroll::<2>(|nt| {
                    unroll::<4>(|e| {
                        let kk = nt * 8 + 2 * cq + (e & 1);
                        s[nt][e] = if bits & (1 << kk) != 0 {
                            row_logit(s[nt][e], key0 + kk as u32, &win[e / 2], p)
                        } else {
                            f32::NEG_INFINITY
                        };
                    })
                });
                let pa = online_softmax_step::<Q, NTILES>(&s, &mut m, &mut l, &mut o);
                let v_row = k_base + TILE_KEYS * row_bytes + v_token * row_bytes;
                unroll::<NTILES>(|nt| {
                    if nt % 2 == 0 {
                        let col = nt as u32 + v_half;
                        let b = ldmatrix_x4_trans(v_row + ((col ^ (v_token & 7)) * 16));
                        o[nt] = Q::mma(pa, [b[0], b[1]], o[nt]);
                        o[nt + 1] = Q::mma(pa, [b[2], b[3]], o[nt + 1]);
                    }
                });
            }
            kg += 1;
        }
    }
    // Every copy has landed and every warp is done with the stages (the short-item merge reuses
    // them; the next item of a fallback block refills them).
    wait_all();
    sync_threads();

    let out_row = |mr: u32| -> *mut Q {
        let (r, h) = (mr / group, g * group + mr % group);
        ptr.out.add(((r0 + r) as usize * nq + h as usize) * D)
    };
    if short {
        // The four warps saw different keys of the same rows: merge them (softmax-weighted).
        store_warp_state::<NTILES>(smem, D, warp as usize, 0, &m, &l, &o);
        sync_threads();
        let stride = 2 + D;
        let mut idx = tid as usize;
        while idx < MMA_HEADS_PER_BLOCK as usize * D {
            let (mr, dim) = ((idx / D) as u32, idx % D);
            if mr / group < rc {
                let mut m_all = f32::NEG_INFINITY;
                unroll::<4>(|w| {
                    m_all = max_f32(m_all, *smem.add((w * MMA_HEADS_PER_BLOCK as usize + mr as usize) * stride))
                });
                let (mut l_all, mut o_all) = (0.0f32, 0.0f32);
                if m_all != f32::NEG_INFINITY {
                    unroll::<4>(|w| {
                        let state = smem.add((w * MMA_HEADS_PER_BLOCK as usize + mr as usize) * stride);
                        if *state != f32::NEG_INFINITY {
                            let scale = exp2_approx((*state - m_all) * LOG2_E);
                            l_all += *state.add(1) * scale;
                            o_all += *state.add(2 + dim) * scale;
                        }
                    });
                }
                *out_row(mr).add(dim) = Q::from_f32(if l_all > 0.0 { o_all / l_all } else { 0.0 });
            }
            idx += TILE_THREADS as usize;
        }
    } else {
        // Each warp owns its rows: normalize and write them.
        unroll::<2>(|ri| {
            let sum = quad_sum(l[ri]);
            if m_rows[ri] / group < rc {
                let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
                let row = out_row(m_rows[ri]);
                unroll::<NTILES>(|nt| {
                    let dim = nt * 8 + 2 * cq;
                    *(row.add(dim) as *mut u32) = Q::pack2(o[nt][2 * ri] * inv, o[nt][2 * ri + 1] * inv);
                });
            }
        });
    }
    sync_threads();
}

/// Builds the work plan of the tiled kernel (see the module docs).
///
/// # Safety
/// One block of [`PLAN_THREADS`] threads with [`PLAN_SHARED_BYTES`] of dynamic shared memory;
/// `cu_q_lens` holds `max_num_seqs + 1` and `num_seqs` one int32; `plan` holds
/// [`plan_bytes`]`(params.plan_capacity)` bytes. Metadata values may be anything.
#[kernel]
pub unsafe fn rpa_plan(cu_q_lens: *const i32, num_seqs: *const i32, plan: *mut u32, params: RpaParams) {
    plan_items(cu_q_lens, num_seqs, plan, params)
}

/// One tiled kernel per (q dtype = KV dtype, head_dim): `rpa_tile_<q>_<q>_d<D>`.
macro_rules! rpa_tile_kernels {
    ($( $name:ident: $q:ty, $d:literal; )*) => {$(
        /// The tiled attention kernel (see the module docs); launched by the host after
        /// [`rpa_plan`].
        ///
        /// # Safety
        /// Grid `(params.plan_capacity, num_kv_heads)`, [`TILE_THREADS`] threads and
        /// [`tiled_shared_bytes`] of dynamic shared memory; every pointer a device buffer of the
        /// shape `params` describes, `plan` written by [`rpa_plan`] with the same `params`.
        /// Metadata values may be anything: they never lead outside the buffers.
        #[kernel]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $name(
            q: *const $q, kv: *const $q, kv_lens: *const i32, page_indices: *const i32,
            cu_q_lens: *const i32, num_seqs: *const i32, plan: *const u32, out: *mut $q,
            params: RpaParams,
        ) {
            rpa_tiled::<$q, $d, { $d / 16 }, { $d / 8 }>(
                TiledPointers { q, kv, kv_lens, page_indices, cu_q_lens, num_seqs, plan, out },
                params,
            )
        }
    )*};
}

rpa_tile_kernels! {
    rpa_tile_f16_f16_d64: f16, 64;
    rpa_tile_f16_f16_d128: f16, 128;
    rpa_tile_bf16_bf16_d64: Bf16, 64;
    rpa_tile_bf16_bf16_d128: Bf16, 128;
}
