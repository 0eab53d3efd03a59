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
//!   of `g`) pairs, row-major: 64 for a tile, 16 per warp (a short item's rows are all warp 0's;
//!   the other warps only copy: a decode row stays memory bound, with no merge across warps).
//!   K/V come through a 3-stage `cp.async` ring of 64-key tiles as in the decode kernel (permuted
//!   rows, `ldmatrix`, `mma.sync`), over the keys any row of the item can see: key tiles wholly
//!   above the causal diagonal or before the sliding window are never loaded, and a warp skips the
//!   tiles its own rows cannot see. Per tile a warp computes S for its 16 rows and all 64 keys
//!   (eight independent mma chains), one online-softmax step in log2 units, and `O += P V`; masks
//!   apply only to tiles that are not wholly visible to the warp's rows.
//! - `rpa_tile_wg_<q>_<kv>_d<D>` (sm_90a image): the same items with warpgroup MMA (`WG`, see
//!   `tile_item`); the host takes it for prefill-shaped calls on Hopper.
//!
//! Order: tile items first, each sequence's last tile first (a causal sequence's last tiles see
//! the most keys; starting them first keeps them off the tail of the grid), then short items
//! (memory bound, they fill in behind), then zero-fill items.

use crate::attention::{page_is_valid, RpaParams};
use crate::copy::{commit_group, cp_async_16, wait_all, wait_group, CopyHint};
use crate::kernel;
use crate::math::FastDiv;
use crate::mma::{ldmatrix_x4, ldmatrix_x4_trans, MmaElement};
use crate::num::Bf16;
use crate::shared::{align_swizzle_128b, dynamic_shared_mem, shared_address, SWIZZLE_128B_ALIGN};
use crate::thread::{block_idx_x, block_idx_y, grid_dim_x, sync_threads, thread_idx_x};
use crate::warp::{lane_id, warp_ballot, WARP_SIZE};

use crate::attention::mask::{mask_logits, WarpRows};
use crate::attention::planner::{plan_items, PlanView, TiledPointers, NO_SEQUENCE, PLAN_THREADS};
use crate::attention::softmax::{online_softmax_steps, LogitScale};
use crate::kernels::prefill::item::{keep_o, store_rows, wgmma_pv_issue, zero_item_rows, ItemRows};
use crate::kernels::unroll;
use crate::wgmma;

/// M rows (query row × query head pairs) of a tile: 16 per warp.
pub const TILE_M: u32 = 64;
/// Keys per pipeline stage.
pub const TILE_KEYS: u32 = 64;
/// Shared-memory stages of the K/V pipeline (two tiles in flight; 2 blocks per SM at head_dim
/// 128). Two stages with launch bounds for 3 blocks per SM (168 registers) measured 0.57x as fast:
/// the accumulators spill (benchmarks/NOTES.md).
pub const TILE_STAGES: u32 = 3;
/// Threads per block of the tiled kernel (4 warps).
pub const TILE_THREADS: u32 = 128;

/// Whether the tiled kernel covers a head size and GQA group (16-bit KV of q's dtype).
pub const fn tiled_supports(head_dim: u32, group: u32) -> bool {
    (head_dim == 64 || head_dim == 128) && group >= 1 && group <= TILE_M
}

/// Query rows per tile item for a GQA group.
pub const fn tile_rows(group: u32) -> u32 {
    TILE_M / group
}

/// Dynamic shared memory of the tiled kernel: the pipeline stages.
pub const fn tiled_shared_bytes(head_dim: u32) -> u32 {
    TILE_STAGES * 2 * TILE_KEYS * head_dim * 2
}

/// Dynamic shared memory of the warpgroup-MMA tiled kernel: the stages, the item's Q tile (the A
/// operand of S = Q Kᵀ, read by the tensor cores from shared memory: the 32 registers a thread
/// would hold it in go to the pipeline instead) and 1 KiB to align them to the 128-byte swizzle's
/// 1024 bytes. At head_dim 128, 113 KiB: two blocks fill an H100 multiprocessor's 228 KiB with
/// the driver's 1 KiB per block.
pub const fn tiled_wgmma_shared_bytes(head_dim: u32) -> u32 {
    tiled_shared_bytes(head_dim) + TILE_M * head_dim * 2 + SWIZZLE_128B_ALIGN
}

/// Calls `f(seq, first row, rows, KV head)` for the block's items: item `blockIdx.x` of the plan
/// for KV head `blockIdx.y`, or, with an invalid `cu_q_lens` (the plan's fallback flag), rows
/// `blockIdx.x`, `blockIdx.x + gridDim.x`, ... ([`PlanView::item`]). Block-uniform.
///
/// # Safety
/// As [`PlanView::item`].
#[inline(always)]
pub(crate) unsafe fn for_each_item<Q>(ptr: &TiledPointers<Q>, p: &RpaParams, mut f: impl FnMut(u32, u32, u32, u32)) {
    let plan = PlanView::load(ptr);
    let mut unit = block_idx_x();
    while let Some((seq, r0, rc)) = plan.item(ptr, p, unit) {
        f(seq, r0, rc, block_idx_y());
        if !plan.fallback {
            break;
        }
        unit += grid_dim_x();
    }
}

/// The tiled kernel's body (see the module docs): each block the plan's items it is given, one
/// at a time.
///
/// # Safety
/// As the tiled kernel that calls it (`rpa_tile_kernels`' `# Safety`); every thread of the block
/// calls it.
#[inline(always)]
unsafe fn rpa_tiled<Q: MmaElement, const D: usize, const KSTEPS: usize, const NTILES: usize, const WG: bool>(
    ptr: TiledPointers<Q>,
    p: RpaParams,
) {
    const { assert!(NTILES * 8 == D && KSTEPS * 16 == D, "tiles cover the head dim") };
    // Launched programmatically after `rpa_plan` (sm_90 image): the plan is readable after the wait.
    crate::grid_dependency::launch_dependents();
    crate::grid_dependency::wait_for_prerequisites();
    // One call site keeps a single inlined copy. (Short items through the mma.sync path in the WG
    // kernels, a second copy, made ptxas spill: benchmarks/NOTES.md "v4".)
    for_each_item(&ptr, &p, |seq, r0, rc, g| tile_item::<Q, D, KSTEPS, NTILES, WG>(&ptr, &p, seq, r0, rc, g));
}

/// One item: rows `[r0, r0 + rc)` of sequence `seq` (or zeros for [`NO_SEQUENCE`]) for the query
/// heads of KV head `g`. Block-uniform; ends with a barrier, so a block may run another.
///
/// `WG` (sm_90a image only): the block's four warps are one warpgroup and the tensor-core work is
/// `wgmma` ([`crate::wgmma`]): S = Q Kᵀ for all 64 M rows with Q and K read from shared memory,
/// then O += P V with P from registers and V read transposed; the stages and the Q tile hold their
/// rows in the 128-byte swizzle (64-dim column blocks of 128-byte rows) instead of the `ldmatrix`
/// permutation, and every warp takes part in every tile (no per-warp skip: a `wgmma` needs the
/// whole warpgroup). Per tile, S is issued before the next tile's copies (the tensor cores work
/// while the warps issue them), page-table entries are loaded a tile before their use, and without
/// a soft cap the logits stay raw with the scale folded into the softmax's exponent
/// (`LogitScale`).
///
/// # Safety
/// Every thread of the block calls it, for an item of the plan (rows of sequence `seq` or
/// [`NO_SEQUENCE`], KV head `g` below `p.num_kv_heads`), with `ptr` and `p` as [`rpa_tiled`] takes
/// them and [`tiled_shared_bytes`] of dynamic shared memory ([`tiled_wgmma_shared_bytes`] with
/// `WG`).
#[inline(always)]
unsafe fn tile_item<Q: MmaElement, const D: usize, const KSTEPS: usize, const NTILES: usize, const WG: bool>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    seq: u32,
    r0: u32,
    rc: u32,
    g: u32,
) {
    let group = p.num_q_heads / p.num_kv_heads;
    let nq = p.num_q_heads as usize;
    let tid = thread_idx_x();
    if seq == NO_SEQUENCE {
        zero_item_rows::<Q, D>(ptr, p, r0, rc, g, tid, TILE_THREADS);
        return;
    }

    let lane = lane_id();
    let warp = tid / WARP_SIZE;
    let cq = (lane % 4) as usize;
    let item = ItemRows::load(ptr, p, seq, r0, rc);

    // Warp w owns M rows 16w .. 16w + 16 (a short item's rows are all warp 0's: the others only
    // copy, which keeps a decode row memory bound rather than split four ways and merged). This
    // lane's two M rows (g and g + 8 of the mma fragments), their windows, and the keys every row
    // of the warp sees (the latest first key, the earliest end: tiles inside need no mask).
    let m_base = warp * 16;
    let (m_rows, rows) = item.warp_rows(m_base, group);
    let mut q_rows: [Option<*const Q>; 2] = [None; 2];
    unroll::<2>(|ri| {
        let r = m_rows[ri] / group;
        if r < rc {
            let h = (g * group + m_rows[ri] % group) as usize;
            q_rows[ri] = Some(ptr.q.add(((r0 + r) as usize * nq + h) * D));
        }
    });
    // Keys the item visits, and those the warp's own rows visit.
    let (lo, hi) = item.keys();
    let (warp_lo, warp_hi, _, _) = item.m_rows_keys(m_base, 16, group);

    // Q as mma.sync A fragments (the WG path reads Q from shared memory instead, below).
    let mut qa = [[0u32; 4]; KSTEPS];
    if !WG {
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
    }

    // The K/V pipeline (as the decode kernel's, 16-bit rows only).
    let row_bytes: u32 = D as u32 * 2;
    let row_chunks: u32 = row_bytes / 16;
    let stage_bytes = 2 * TILE_KEYS * row_bytes;
    let copies_per_token_thread = 2 * row_chunks / 4;
    let tokens_per_pass = TILE_THREADS / 4;
    let smem = dynamic_shared_mem::<f32>();
    // The 128-byte swizzle is defined on address bits, so the wgmma stages start on a 1024-byte
    // boundary (the launch gives WG kernels `SWIZZLE_128B_ALIGN` more for this); the ldmatrix permutation needs
    // 256-byte alignment, which the dynamic shared memory of these kernels (no static shared
    // memory) has.
    let smem_base = if WG { align_swizzle_128b(shared_address(smem)) } else { shared_address(smem) };
    let kv = ptr.kv as *const u8;
    let token_stride = 2 * p.num_kv_heads as usize * D * 2;
    let head_offset = 2 * g as usize * D * 2;
    let page_table = ptr.page_indices.add(seq as usize * p.pages_per_seq as usize);
    // Page-table entry of key j, -1 past the keys the item visits. Entries are loaded a tile
    // before their use (the copies of tile i + 2 and the present-key bits of tile i read entries
    // loaded during tile i - 1), so no tile waits on a dependent global load.
    // WG: page slots by multiply-high (no branch on the page size being a power of two: each
    // branch and reconvergence cost instructions in every lookup, four per tile and thread). The
    // mma.sync path keeps the branch: the divider's registers made ptxas spill it on sm_80.
    let pages = FastDiv::new(p.page_size);
    let slot_of = |j: u32| -> (u32, u32) {
        if WG {
            pages.div_rem(j)
        } else if p.page_size.is_power_of_two() {
            (j >> p.page_size.trailing_zeros(), j & (p.page_size - 1))
        } else {
            (j / p.page_size, j % p.page_size)
        }
    };
    let load_page = |j: u32| -> i32 {
        if j >= hi {
            return -1;
        }
        *page_table.add(slot_of(j).0 as usize)
    };
    let in_page = |j: u32| slot_of(j).1;
    let on_pool = |page: i32| page_is_valid(page, p.total_pages);
    // The entries of this thread's two copied tokens of tile i (one per pass of `issue`), and of
    // this lane's two keys of the tile (for the present bits).
    let copy_pages = |i: u32| -> [i32; 2] {
        [load_page(lo + i * TILE_KEYS + tid / 4), load_page(lo + i * TILE_KEYS + 32 + tid / 4)]
    };
    let lane_pages =
        |i: u32| -> [i32; 2] { [load_page(lo + i * TILE_KEYS + lane), load_page(lo + i * TILE_KEYS + 32 + lane)] };
    let quad = tid % 4;
    // A fixed L2 hint (`RpaParams::copy_hint` tunes the decode kernels): a runtime choice made
    // ptxas emit every copy four ways behind branches. K/V tiles are read again by the sequence's
    // other query tiles, so no evict-first policy.
    let hint = CopyHint { prefetch_256: true };
    // Tile i into stage i % TILE_STAGES: four threads per token, K then V rows, permuted chunks;
    // `pages` from `copy_pages(i)`.
    let issue = |i: u32, pages: [i32; 2]| {
        let stage_base = smem_base + (i % TILE_STAGES) * stage_bytes;
        let tile_base = lo + i * TILE_KEYS;
        unroll::<2>(|pass| {
            let token = pass as u32 * tokens_per_pass + tid / 4;
            let (src, valid) = if on_pool(pages[pass]) {
                let t = pages[pass] as usize * p.page_size as usize + in_page(tile_base + token) as usize;
                (kv.add(t * token_stride + head_offset + quad as usize * 16), true)
            } else {
                (kv, false)
            };
            // Copy c writes chunk `4c + quad` of the token's K-then-V span: region (K or V)
            // `c / groups`, permuted column `(4 (c % groups) + quad) ^ (token % 8)`, which is
            // `first ^ (c % groups) << 6` (as for the ldmatrix addresses below; the stage base has
            // bits 6-7 clear).
            let groups = row_chunks / 4;
            let first = stage_base + token * row_bytes + ((quad ^ (token & 7)) * 16);
            unroll::<8>(|c| {
                if (c as u32) < copies_per_token_thread {
                    let (region, group4) = (c as u32 / groups, c as u32 % groups);
                    let dst = if WG {
                        // Chunk 4 group4 + quad of the row: 64-dim block group4 / 2, chunk
                        // (4 (group4 % 2) + quad) of that block's 128-byte row, swizzled.
                        let chunk = 4 * (group4 % 2) + quad;
                        stage_base
                            + region * TILE_KEYS * row_bytes
                            + (group4 / 2) * TILE_KEYS * 128
                            + wgmma::swizzled_128b_offset(token, chunk)
                    } else {
                        (first ^ (group4 << 6)) + region * TILE_KEYS * row_bytes
                    };
                    cp_async_16(dst, src.add(c * 64), valid, hint);
                }
            });
        });
        commit_group();
    };

    let logit = LogitScale::new(p, WG);
    let mut o = [[0.0f32; 4]; NTILES];
    let mut m = [f32::NEG_INFINITY; 2];
    let mut l = [0.0f32; 2];
    let num_tiles = (hi - lo).div_ceil(TILE_KEYS);
    let k_token = (lane / 16) * 8 + lane % 8;
    let k_half = (lane / 8) % 2;
    let v_token = ((lane / 8) % 2) * 8 + lane % 8;
    let v_half = lane / 16;
    // This lane's ldmatrix addresses, relative to a stage: K rows (k-step 0, key group 0) and V
    // rows (n-tiles 0-1, k-step 0). K-step k (V n-tile pair j) flips address bits 5-7 by `k << 5`
    // (`j << 5`): the permuted chunk `(2k + half) ^ (row % 8)` is `2k ^ (half ^ row % 8)`, and a row
    // holds at least 128 bytes, so XOR-ing the chunk into the address equals adding it. The stage
    // base has those bits clear (stages are 16 KiB multiples from the dynamic shared memory base,
    // 1 KiB aligned), so the XOR applies to `stage + offset` inside the loop: no per-step address
    // stays live in registers across it.
    let k_lane = k_token * row_bytes + ((k_half ^ (k_token & 7)) * 16);
    let v_lane = TILE_KEYS * row_bytes + v_token * row_bytes + ((v_half ^ (v_token & 7)) * 16);

    // WG: the Q tile after the stages, laid out as K is (64-dim column blocks of 128-byte rows,
    // swizzled), M row `mr` = (query row mr / group, head mr % group of g); rows past the item are
    // zero-filled. Its copies join tile 0's commit group, so the first wait covers them.
    let q_tile = smem_base + TILE_STAGES * stage_bytes;
    let q_desc0 = wgmma::descriptor(q_tile, 16, 8 * 128, wgmma::Swizzle::Bytes128);
    if WG {
        let no_hint = CopyHint { prefetch_256: false };
        let chunks = TILE_M * row_chunks;
        let mut c = tid;
        while c < chunks {
            let (mr, chunk) = (c / row_chunks, c % row_chunks);
            let r = mr / group;
            let h = (g * group + mr % group) as usize;
            let src = if r < rc { ptr.q.add(((r0 + r) as usize * nq + h) * D + chunk as usize * 8) } else { ptr.q };
            let dst = q_tile + (chunk / 8) * TILE_M * 128 + wgmma::swizzled_128b_offset(mr, chunk % 8);
            cp_async_16(dst, src as *const u8, r < rc, no_hint);
            c += TILE_THREADS;
        }
    }
    for i in 0..TILE_STAGES - 1 {
        if i < num_tiles {
            issue(i, copy_pages(i));
        } else {
            commit_group();
        }
    }
    // Entries for the first copies inside the loop and the first tile's present bits.
    let mut next_copy_pages = if WG { copy_pages(TILE_STAGES - 1) } else { [-1; 2] };
    let mut next_lane_pages = if WG { lane_pages(0) } else { [-1; 2] };
    for i in 0..num_tiles {
        // Tile i has landed (TILE_STAGES - 2 later groups may still be in flight).
        wait_group::<{ TILE_STAGES - 2 }>();
        if WG {
            // The tile's cp.async writes (generic proxy) become visible to the wgmma operand reads.
            wgmma::fence_proxy_async_shared();
        }
        sync_threads();
        let tile_base = lo + i * TILE_KEYS;
        let stage = smem_base + (i % TILE_STAGES) * stage_bytes;
        // The warp's 16 rows against all 64 keys, one softmax step for the tile (eight
        // independent mma chains for S, one max and one rescale per 64 keys).
        let mut s = [[0.0f32; 4]; 8];
        // WG: S = Q Kᵀ starts on the tensor cores now and runs while the warps issue the next
        // copies and load page-table entries; the wait comes after.
        if WG {
            // The accumulators of m64n64 are the eight n-tiles' mma fragments, in order.
            let acc = &mut *(s.as_mut_ptr() as *mut [f32; 32]);
            // The zeroed accumulators are written before the fence (the ISA wants every register
            // write a wgmma depends on ordered before `wgmma.fence`).
            wgmma::keep_accumulator(acc);
            wgmma::fence();
            // One descriptor per stage, constants added per k-step (K-major A and B: k-steps of 16
            // dims are 32 bytes apart inside a 64-dim block). Not broadcast into uniform registers
            // as the warp-specialized kernel's are (`wgmma::warp_uniform`): that removes the three
            // `R2UR`s before each S `wgmma` here, but measured level (benchmarks/NOTES.md "v43.3").
            let k_desc = wgmma::descriptor(stage, 16, 8 * 128, wgmma::Swizzle::Bytes128);
            unroll::<KSTEPS>(|k| {
                let step = (k as u32 % 4) * 32;
                let desc = wgmma::advance(k_desc, (k as u32 / 4) * TILE_KEYS * 128 + step);
                let q_desc = wgmma::advance(q_desc0, (k as u32 / 4) * TILE_M * 128 + step);
                wgmma::mma_m64n64k16_ss::<Q, 0>(acc, q_desc, desc, k > 0);
            });
            wgmma::commit_group();
        }
        // The WG path loads page-table entries a tile ahead; the mma.sync path (at its register
        // limit: prefetching made ptxas spill) when it uses them.
        if i + TILE_STAGES - 1 < num_tiles {
            issue(i + TILE_STAGES - 1, if WG { next_copy_pages } else { copy_pages(i + TILE_STAGES - 1) });
        } else {
            commit_group();
        }
        let this_lane_pages = if WG { next_lane_pages } else { lane_pages(i) };
        if WG {
            next_copy_pages = copy_pages(i + TILE_STAGES);
            next_lane_pages = lane_pages(i + 1);
        }
        if !WG && (tile_base >= warp_hi || tile_base + TILE_KEYS <= warp_lo) {
            continue; // none of the warp's rows sees this tile (warp-uniform)
        }
        // Bit k: key tile_base + k is in range and on a valid page.
        let present = [warp_ballot(on_pool(this_lane_pages[0])), warp_ballot(on_pool(this_lane_pages[1]))];
        if WG {
            wgmma::wait_group::<0>();
            wgmma::keep_accumulator(&mut *(s.as_mut_ptr() as *mut [f32; 32]));
        } else {
            let k_stage = stage + k_lane;
            unroll::<KSTEPS>(|k| {
                let k_step = k_stage ^ ((k as u32) << 5);
                unroll::<4>(|kg| {
                    let b = ldmatrix_x4(k_step + kg as u32 * 16 * row_bytes);
                    s[2 * kg] = Q::mma(qa[k], [b[0], b[1]], s[2 * kg]);
                    s[2 * kg + 1] = Q::mma(qa[k], [b[2], b[3]], s[2 * kg + 1]);
                });
            });
        }
        let mut pa = [[0u32; 4]; 4];
        mask_and_softmax::<Q, NTILES>(&mut s, tile_base, present, &rows, &logit, p, &mut m, &mut l, &mut o, &mut pa);
        if WG {
            wgmma_pv::<Q, NTILES>(&mut o, &pa, stage + TILE_KEYS * row_bytes);
        } else {
            let v_stage = stage + v_lane;
            unroll::<4>(|ks| {
                unroll::<NTILES>(|nt| {
                    if nt % 2 == 0 {
                        let b = ldmatrix_x4_trans((v_stage ^ ((nt as u32 / 2) << 5)) + ks as u32 * 16 * row_bytes);
                        o[nt] = Q::mma(pa[ks], [b[0], b[1]], o[nt]);
                        o[nt + 1] = Q::mma(pa[ks], [b[2], b[3]], o[nt + 1]);
                    }
                });
            });
        }
    }
    // Every copy has landed and every warp is done with the stages (the next item of a fallback
    // block refills them).
    wait_all();
    sync_threads();

    // Each warp owns its rows: normalize and write them.
    store_rows::<Q, D, NTILES>(ptr, p, r0, rc, g, m_rows, &l, &o);
    sync_threads();
}

/// The logit transform, the masks and one online-softmax step of a warp's 16 rows over the 64 keys
/// of a tile at `tile_base`: `s` holds S (element e of n-tile nt: M row lane/4 + 8 (e/2), key
/// `tile_base + 8 nt + 2 (lane % 4) + e % 2`), raw or as `logit` says; `present` bit k: key
/// `tile_base + k` is in range and on a valid page. Updates `m`, `l`, `o` and writes P (the A
/// operand of `O += P V`, four k-steps of 16 keys) into `pa`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn mask_and_softmax<Q: MmaElement, const NTILES: usize>(
    s: &mut [[f32; 4]; 8],
    tile_base: u32,
    present: [u32; 2],
    rows: &WarpRows,
    logit: &LogitScale,
    p: &RpaParams,
    m: &mut [f32; 2],
    l: &mut [f32; 2],
    o: &mut [[f32; 4]; NTILES],
    pa: &mut [[u32; 4]; 4],
) {
    mask_logits(s, tile_base, present, rows, logit, p);
    online_softmax_steps::<Q, NTILES, 8, 4>(s, logit.exp_scale, true, m, l, o, pa);
}

/// `O += P V` on the tensor cores (`wgmma`, issued and waited for): see [`wgmma_pv_issue`].
///
/// # Safety
/// As [`wgmma_pv_issue`].
#[inline(always)]
pub(crate) unsafe fn wgmma_pv<Q: MmaElement, const NTILES: usize>(
    o: &mut [[f32; 4]; NTILES],
    pa: &[[u32; 4]; 4],
    v_tile: u32,
) {
    wgmma_pv_issue::<Q, NTILES, 4>(o, pa, v_tile);
    wgmma::wait_group::<0>();
    keep_o(o);
}

/// Builds the work plan of the tiled kernel (see the module docs).
///
/// # Safety
/// One block of [`PLAN_THREADS`] threads with [`PLAN_SHARED_BYTES`] of dynamic shared memory;
/// `cu_q_lens` holds `max_num_seqs + 1` and `num_seqs` one int32; `plan` holds
/// [`plan_bytes`]`(params.plan_capacity)` bytes. Metadata values may be anything.
#[kernel]
pub unsafe fn rpa_plan(cu_q_lens: *const i32, num_seqs: *const i32, plan: *mut u32, params: RpaParams) {
    // Programmatic dependent launch (sm_90 image): the tile kernel launches while this one runs
    // and waits for the plan before reading it.
    crate::grid_dependency::launch_dependents();
    crate::grid_dependency::wait_for_prerequisites();
    plan_items(cu_q_lens, num_seqs, plan, params, PLAN_THREADS)
}

/// One tiled kernel per (q dtype = KV dtype, head_dim): `rpa_tile_<q>_<q>_d<D>`.
macro_rules! rpa_tile_kernels {
    ($( $name:ident: $q:ty, $d:literal, $wg:literal; )*) => {$(
        /// The tiled attention kernel (see the module docs); launched by the host after
        /// [`rpa_plan`].
        ///
        /// # Safety
        /// Grid `(params.plan_capacity, num_kv_heads)`, [`TILE_THREADS`] threads and
        /// [`tiled_shared_bytes`] of dynamic shared memory ([`tiled_wgmma_shared_bytes`] for the
        /// `wgmma` kernels, `rpa_tile_wg_*`); every pointer a device buffer of the shape `params`
        /// describes, `plan` written by [`rpa_plan`] with the same `params`.
        /// Metadata values may be anything: they never lead outside the buffers.
        #[kernel]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $name(
            q: *const $q, kv: *const $q, kv_lens: *const i32, page_indices: *const i32,
            cu_q_lens: *const i32, num_seqs: *const i32, plan: *const u32, out: *mut $q,
            params: RpaParams,
        ) {
            rpa_tiled::<$q, $d, { $d / 16 }, { $d / 8 }, $wg>(
                TiledPointers { q, kv, kv_lens, page_indices, cu_q_lens, num_seqs, plan, out },
                params,
            )
        }
    )*};
}

rpa_tile_kernels! {
    rpa_tile_f16_f16_d64: f16, 64, false;
    rpa_tile_f16_f16_d128: f16, 128, false;
    rpa_tile_bf16_bf16_d64: Bf16, 64, false;
    rpa_tile_bf16_bf16_d128: Bf16, 128, false;
}

// The warpgroup-MMA variants (`WG`), in the sm_90a image only; chosen explicitly
// (`XGK_RPA_KERNEL=tiled-wgmma`) until they are measured.
#[cfg(any(xgk_sm90, not(target_arch = "nvptx64")))]
rpa_tile_kernels! {
    rpa_tile_wg_f16_f16_d64: f16, 64, true;
    rpa_tile_wg_f16_f16_d128: f16, 128, true;
    rpa_tile_wg_bf16_bf16_d64: Bf16, 64, true;
    rpa_tile_wg_bf16_bf16_d128: Bf16, 128, true;
}
