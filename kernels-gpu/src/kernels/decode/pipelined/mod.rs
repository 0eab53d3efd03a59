//! Ragged paged attention with K/V staged through shared memory by a multi-stage `cp.async`
//! pipeline, on tensor cores: the decode kernel. f16/bf16 q with KV of the same dtype (unscaled)
//! or fp8 (e4m3fn / e5m2, scaled), head dims 64 and 128 (and 256 for 16-bit KV). Same contract,
//! blocks, splits and merge as the other two kernels.
//!
//! Why: decode is memory bound, and the direct-load kernels left the memory system three quarters
//! idle (benchmarks/NOTES.md, profile): every warp waited on its own dependent global loads. Here
//! a block (query row `t`, KV head `g`, up to 16 query heads of `g`, key split) walks its keys in
//! tiles of 64 keys (32 at head_dim 256: [`pipelined_tile_keys`]):
//! - each warp (a pair at head_dim 256) copies its own 16 keys of a tile, K and V rows
//!   (page-gathered: one token's K and V for head `g` are `2 * head_dim` contiguous elements),
//!   into one of `RpaParams::pipe_stages` shared-memory stages with 16-byte `cp.async`, eight
//!   threads per token so that a warp instruction reads whole 128-byte lines (an L2 prefetch hint
//!   on request, `RpaParams::copy_hint`), `stages - 1` tiles ahead of its math, and waits for its
//!   own copies only (`RpaParams::pipe_mode` 1; mode 0 has all threads copy the whole tile and meet
//!   at a block barrier per tile). The host picks the stage count that keeps about 128 KiB per SM
//!   in flight (3 stages of 32 KiB for 16-bit KV at head_dim 128; for fp8 KV 2, or 5 where that
//!   plan leaves rows unsplit); keys past the split or on an invalid page are zero-filled (and
//!   masked below);
//! - each warp takes 16 keys of the tile: `S = Q Kᵀ` with K fragments from `ldmatrix`, online
//!   softmax on the accumulators, `O += P V` with V fragments from `ldmatrix.trans`;
//! - rows in shared memory are 16-byte chunks permuted by `chunk ^ (row % 8)`, so the eight rows an
//!   `ldmatrix` reads hit eight different bank groups;
//! - one warp (or pair) barrier per tile (a block barrier in mode 0): after it, the tile's copies
//!   are visible to every thread that reads them and each of those is done with the stage the
//!   next copies overwrite;
//! - on the sm_90 image, up to 16 splits of a (row, KV head) run as one thread-block cluster and
//!   merge through distributed shared memory (`RpaParams::cluster_splits`), with no merge kernel;
//! - fp8 KV moves half the bytes: the stage holds the raw bytes, and `ldmatrix` reads them into
//!   registers, where they widen exactly to f16 operands (every fp8 value is an f16). `k_scale`
//!   multiplies the logits and `v_scale` the output, in f32, instead of rounding scaled K and V
//!   to q's dtype first as the reference does: the same function with one rounding fewer (within
//!   the reference's own bf16 rounding, see the GPU tests).

use crate::attention::{clamp_num_seqs, is_apart_decode, page_is_valid, RpaParams, DECODE_APART_ONE_LAUNCH};
use crate::barrier::{ids, sync_named_id};
use crate::copy::{commit_group, cp_async_16, wait_all, wait_group_dyn, CopyHint};
use crate::math::FastDiv;
use crate::mma::{ldmatrix_x4, ldmatrix_x4_trans, MmaElement};
use crate::num::{Bf16, F8E4M3, F8E5M2};
use crate::shared::shared_address;
use crate::warp::{lane_id, sync_warp, warp_ballot, WARP_SIZE};

use crate::attention::mask::{mask_logits, WarpRows};
use crate::attention::planner::publish_inputs_ready;
use crate::attention::softmax::{online_softmax_step, LogitScale};
use crate::kernels::block_slot::{BlockSlot, WholeBlock, GROUP_THREADS};
use crate::kernels::decode::general::{
    attention_kernels, block_of_row, block_split_at, resolve_block, Block, BlockHeads, RpaPointers,
};
use crate::kernels::decode::key_rows::{
    key_rows_accumulate, key_rows_logits, key_rows_softmax_step, mask_key_rows, q_b_fragments, store_key_rows_state,
    KeyRowsLanes, KEY_ROWS_MAX_HEADS,
};
use crate::kernels::decode::merge::{merge_block, merge_warps_and_store, WarpStates};
use crate::kernels::decode::mma::{load_q_fragments, store_warp_state, MMA_HEADS_PER_BLOCK};
use crate::kernels::kv_operand::StagedKv;
use crate::kernels::unroll;

pub mod layout;

use layout::{
    chunk_swizzle, pipelined_dim_split, pipelined_stage_bytes, pipelined_threads, pipelined_tile_keys,
    pipelined_warp_state_floats, swizzled_chunk,
};

/// Threads that copy one token's K and V rows together, 16 bytes each: eight, so that a warp
/// instruction reads 128 contiguous bytes (a whole line) of each of four tokens. Four threads per
/// token (half lines of eight tokens) asked the L2 for twice the requests per byte:
/// that bound the 16-bit kernel at 91-93 % of the H200's L2 throughput with DRAM at 80 %
/// (benchmarks/NOTES.md "v9"), and the fp8 kernel 4-5 % below eight threads once its instructions
/// were cut (NOTES "v13.3"; in v10, with 30 % more instructions, eight had been slower). Every
/// supported row holds at least 8 chunks per token (fp8 at head_dim 64: 64 + 64 bytes).
const THREADS_PER_TOKEN: u32 = 8;

/// Tiles of a split whose page-table entry (each thread's first token's) [`TablePreload`] loads.
const PRELOAD_TILES: usize = 2;

/// Page-table entries of a thread's first token in the first [`PRELOAD_TILES`] tiles of its
/// split, loaded before the block's row is resolved (`RpaParams::table_preload`), on the decode
/// fast path's guess: row `t` is sequence `t` and its visible keys start at 0 (no sliding window
/// cuts them). Resolving the row is a round trip to memory (`resolve_block`), and the entries'
/// addresses otherwise depend on it; loaded together, the first tiles' copies leave one round
/// trip sooner, a share of the short decode chains' time. The kernel uses them only where the
/// resolved block's table row and split start are the guess's; every load stays in bounds
/// whatever the metadata (a clamped row, slots below `pages_per_seq`).
struct TablePreload {
    on: bool,
    /// The guessed sequence's page-table row and this block's split start under the guess.
    table: *const i32,
    split_lo: u32,
    entries: [i32; PRELOAD_TILES],
}

impl TablePreload {
    /// # Safety
    /// `ptr.page_indices` holds `p.max_num_seqs * p.pages_per_seq` entries; this thread's first
    /// token is `token0` of each `tile`-key tile.
    #[inline(always)]
    unsafe fn load<Q, KV>(
        ptr: &RpaPointers<Q, KV>,
        p: &RpaParams,
        pages: &FastDiv,
        tile: u32,
        token0: u32,
        slot: impl BlockSlot,
    ) -> Self {
        let mut pre = TablePreload { on: false, table: ptr.page_indices, split_lo: 0, entries: [-1; PRELOAD_TILES] };
        if p.table_preload == 0 || p.max_num_seqs == 0 {
            return pre;
        }
        let row = slot.x().min(p.max_num_seqs - 1);
        pre.on = true;
        pre.table = ptr.page_indices.add(row as usize * p.pages_per_seq as usize);
        pre.split_lo = block_split_at(p, slot.z()).saturating_mul(p.split_len);
        unroll::<PRELOAD_TILES>(|k| {
            let slot = pages.div(pre.split_lo.saturating_add(k as u32 * tile + token0));
            if slot < p.pages_per_seq {
                // Volatile, as the row's own loads in `resolve_block`: issued here, not sunk to
                // their first use after the row resolves.
                pre.entries[k] = core::ptr::read_volatile(pre.table.add(slot as usize));
            }
        });
        pre
    }

    /// The preloaded entry of tile `i`, if it is among the preloaded tiles.
    #[inline(always)]
    fn entry(&self, i: u32) -> Option<i32> {
        let mut e = None;
        unroll::<PRELOAD_TILES>(|k| {
            if i == k as u32 {
                e = Some(self.entries[k]);
            }
        });
        e
    }
}

/// [`resolve_block`] on a grid of sequences (`RpaParams::decode_apart`): block x is sequence `i`,
/// whose one row the block works on where [`is_apart_decode`] gives it to the decode kernel. None
/// otherwise: the block has nothing to do and writes nothing (the tile kernel writes that row, or
/// no row belongs to `i`). One round trip to memory: the four loads are independent (volatile,
/// issued together, as in [`resolve_block`]). The tile plan is not read: where `cu_q_lens`
/// decreases somewhere (the plan's fallback) the tile kernel writes every row, this kernel's
/// after it (it waits for this grid first, `prefill::hopper::scheduler::plan_or_wait`); in one
/// launch with the tile kernel ([`DECODE_APART_ONE_LAUNCH`], a group of a shared block) nothing
/// orders the two, so the block scans `cu_q_lens` itself (its loads beside the row's, a vote at
/// the group's barrier) and stands down there.
///
/// # Safety
/// The grid's x is at most `max_num_seqs` (at least 1); every thread of the slot calls it.
#[inline(always)]
pub(crate) unsafe fn resolve_sequence_block<Q, KV, B: BlockSlot>(
    ptr: &RpaPointers<Q, KV>,
    p: &RpaParams,
    heads_per_chunk: u32,
    slot: B,
) -> Option<Block> {
    let heads = BlockHeads::of(p, heads_per_chunk, slot);
    let i = slot.x().min(p.max_num_seqs.saturating_sub(1));
    let load = |at: *const i32| core::ptr::read_volatile(at);
    let (raw_num_seqs, lo, hi, kv_len) = (
        load(ptr.num_seqs),
        load(ptr.cu_q_lens.add(i as usize)),
        load(ptr.cu_q_lens.add(i as usize + 1)),
        load(ptr.kv_lens.add(i as usize)),
    );
    if B::GROUP && p.decode_apart == DECODE_APART_ONE_LAUNCH {
        let num_seqs = clamp_num_seqs(raw_num_seqs, p.max_num_seqs);
        // The plan's fallback test (`plan_items`): `cu_q_lens[j + 1] < cu_q_lens[j]` for a
        // sequence j. The loads do not wait for `num_seqs` (every j below `max_num_seqs` is in
        // bounds), so they leave with the row's.
        let mut decreasing = false;
        let mut j = slot.thread();
        while j < p.max_num_seqs {
            let (a, b) = (load(ptr.cu_q_lens.add(j as usize)), load(ptr.cu_q_lens.add(j as usize + 1)));
            decreasing |= j < num_seqs && b < a;
            j += GROUP_THREADS;
        }
        if slot.any(decreasing) {
            return None;
        }
    }
    let owned =
        i == slot.x() && i < clamp_num_seqs(raw_num_seqs, p.max_num_seqs) && is_apart_decode(lo, hi, p.max_tokens);
    owned.then(|| block_of_row(ptr, p, heads, lo as u32, (i, lo, hi, kv_len)))
}

/// q's A fragments as operands of type `M`, and the factor they were scaled by (divide it out of
/// the logits). Unchanged (factor 1) when `M` is q's type. bf16 q for f16 operands (fp8 KV) is
/// scaled by the power of two that puts the block's largest `|q|` in `[2^14, 2^15)`: every bf16
/// value from there down to f16's smallest normal (2^-14, 28 binades below the largest) is then
/// exact in f16, and the elements below it weigh less than 2^-28 of the largest in a dot product.
/// Every warp holds the same fragments, so every warp finds the same factor.
#[inline(always)]
pub(crate) fn q_as_operand<Q: MmaElement, M: MmaElement, const KSTEPS: usize>(
    qa: [[u32; 4]; KSTEPS],
) -> ([[u32; 4]; KSTEPS], f32) {
    if Q::IS_BF16 == M::IS_BF16 {
        return (qa, 1.0);
    }
    // bf16 halves to f32: the bits in the high half.
    let halves = |w: u32| (f32::from_bits(w << 16), f32::from_bits(w & 0xffff_0000));
    let mut largest = 0.0f32;
    unroll::<KSTEPS>(|k| {
        unroll::<4>(|r| {
            let (lo, hi) = halves(qa[k][r]);
            largest = largest.max(lo.abs()).max(hi.abs());
        })
    });
    let largest = crate::warp::warp_max_f32(largest);
    // Unbiased exponent of the largest (zero: the factor is 1; the clamp keeps 2^shift normal).
    let exponent = ((largest.to_bits() >> 23) & 0xff) as i32 - 127;
    let shift = if largest == 0.0 { 0 } else { (14 - exponent).clamp(-126, 126) };
    let factor = f32::from_bits(((shift + 127) as u32) << 23);
    let mut out = [[0u32; 4]; KSTEPS];
    unroll::<KSTEPS>(|k| {
        unroll::<4>(|r| {
            let (lo, hi) = halves(qa[k][r]);
            out[k][r] = M::pack2(lo * factor, hi * factor);
        })
    });
    (out, factor)
}

/// The pipelined kernel, in the key-rows layout with `KEY_ROWS` (`decode::key_rows`: a
/// warp's 16 keys are the mma's rows and the block's query heads, at most
/// [`KEY_ROWS_MAX_HEADS`], its columns; the host launches it for GQA groups up to 8); with
/// `BY_SEQUENCE`, on a grid of sequences over a mixed batch's decode sequences
/// (`RpaParams::decode_apart`, [`resolve_sequence_block`]).
///
/// # Safety
/// As the attention kernel that calls it (`attention_kernels`' `# Safety`): its launch
/// ([`pipelined_threads`] threads, [`layout::pipelined_shared_bytes`] of dynamic shared memory for
/// `p.pipe_stages`; with `BY_SEQUENCE` a grid of `p.max_num_seqs` sequences,
/// [`resolve_sequence_block`]), and `ptr` and `p` as it passes them.
#[inline(always)]
unsafe fn rpa_pipelined<
    Q: MmaElement,
    KV: StagedKv,
    const D: usize,
    const KSTEPS: usize,
    const NTILES: usize,
    const DSPLIT: usize,
    const KEY_ROWS: bool,
    const BY_SEQUENCE: bool,
>(
    ptr: RpaPointers<Q, KV>,
    p: RpaParams,
) {
    rpa_pipelined_on::<Q, KV, KV::Operand<Q>, D, KSTEPS, NTILES, DSPLIT, KEY_ROWS, BY_SEQUENCE, WholeBlock>(
        ptr, p, WholeBlock,
    )
}

/// The pipelined kernel with tensor-core operands of type `M` ([`StagedKv::Operand`]); with
/// `KEY_ROWS`, in the key-rows layout (`Sᵀ = K Qᵀ`, `Oᵀ += Vᵀ Pᵀ`: the same copies, `ldmatrix`
/// loads and merge; `KSTEPS` m-tiles of `Oᵀ`), in a [`BlockSlot`] (a whole block, or with `BY_SEQUENCE`
/// a group of a block shared with others, `kernels::mix`): `cta`.
///
/// # Safety
/// Every thread of the slot `cta` calls it; the slot has [`pipelined_threads`] threads and
/// [`layout::pipelined_shared_bytes`] of shared memory for `p.pipe_stages` (`cta.shared`); `ptr`
/// and `p` as the attention kernels take them (`attention_kernels`' `# Safety`), on the grid
/// `BY_SEQUENCE` says (rows, or [`resolve_sequence_block`]'s sequences).
#[inline(always)]
pub(crate) unsafe fn rpa_pipelined_on<
    Q: MmaElement,
    KV: StagedKv,
    M: MmaElement,
    const D: usize,
    const KSTEPS: usize,
    const NTILES: usize,
    const DSPLIT: usize,
    const KEY_ROWS: bool,
    const BY_SEQUENCE: bool,
    B: BlockSlot,
>(
    ptr: RpaPointers<Q, KV>,
    p: RpaParams,
    cta: B,
) {
    // Programmatic dependent launch (sm_90 image; no-ops otherwise): let the next kernel (the
    // split merge, or the next call's) launch during this one's last wave, and touch no memory
    // before the kernel before this one has finished.
    crate::grid_dependency::launch_dependents();
    crate::grid_dependency::wait_for_prerequisites();
    if !BY_SEQUENCE && p.merge_blocks != 0 && cta.z() >= p.num_splits {
        // The grid's last slices merge the splits (one launch, no merge kernel).
        merge_block(&ptr, &p, MMA_HEADS_PER_BLOCK);
        return;
    }
    if BY_SEQUENCE && p.decode_apart == 2 && cta.thread() == 0 && (cta.x() | cta.y() | cta.z()) == 0 {
        // The warp-specialized tile kernel after this one plans itself from the call's inputs
        // without waiting for this grid: tell its block 0 that they are written.
        publish_inputs_ready(ptr.plan as *mut u32, p.launch_tag);
    }
    // DSPLIT warps share each 16-key group, each accumulating NTILES 8-dim tiles of O (head dims
    // [dim_part * 8 * NTILES, ...)); all compute the group's full S.
    const { assert!(NTILES * 8 * DSPLIT == D && KSTEPS * 16 == D, "tiles cover the head dim") };
    // fp8's O n-tiles hold permuted dims (even and odd of 16-dim chunks), stored in one piece.
    const { assert!(!KV::FP8 || DSPLIT == 1, "1-byte KV needs one warp per key group") };
    const { assert!(!KEY_ROWS || DSPLIT == 1, "the key-rows layout holds a warp's whole Oᵀ") };
    const { assert!(KEY_ROWS_MAX_HEADS * 2 == MMA_HEADS_PER_BLOCK, "key rows: one head chunk where head rows have one") };
    // A group of a shared block runs a grid of sequences only: no clusters, no merge blocks.
    const { assert!(!B::GROUP || BY_SEQUENCE, "groups run the decode twins") };
    // The host launches `pipelined_threads(tile, DSPLIT)` threads, checks 2 <= stages <=
    // PIPE_MAX_STAGES and sizes the shared memory for them.
    let tile = pipelined_tile_keys(D as u32);
    let key_groups = tile / 16;
    let threads = pipelined_threads(tile, DSPLIT as u32);
    // 16-bit KV is read by ldmatrix straight into operands; 1-byte KV is converted after it.
    let kv_bytes = core::mem::size_of::<KV>() as u32;
    let fp8 = KV::FP8;
    // fp8 KV enters the tensor cores exact; its scales apply to the logits (k_scale, folded into
    // sm_scale) and to the output (v_scale), in f32.
    let mut p = p;
    if fp8 {
        p.sm_scale *= p.k_scale;
    }
    // A stage: K rows then V rows of `tile` keys, `kv_row_bytes` each, as 16-byte chunks.
    let kv_row_bytes: u32 = D as u32 * kv_bytes;
    let row_chunks: u32 = kv_row_bytes / 16;
    let token_chunks: u32 = 2 * row_chunks;
    let stage_bytes = pipelined_stage_bytes(D as u32, kv_bytes, tile);
    let stages = p.pipe_stages;
    // Copies per thread and token (`token_chunks / THREADS_PER_TOKEN`): 4 for 16-bit KV at
    // D = 128, 8 at D = 256, 2 for fp8 at D = 128 and 1 at D = 64; passes of
    // `copiers / THREADS_PER_TOKEN` tokens cover the tile (or the key group: the same count of
    // passes, four).
    const COPIES: usize = 8;
    let per_token = THREADS_PER_TOKEN;
    let copies_per_token_thread = token_chunks / per_token;
    let passes = tile / (threads / per_token);

    let tid = cta.thread();
    let lane = lane_id();
    let warp = tid / WARP_SIZE;
    // The 16-key group this warp computes, and which part of the head dims it accumulates.
    let (key_group, dim_part) = (warp % key_groups, warp / key_groups);
    // Who copies which keys of a tile, and who waits for whom (`RpaParams::pipe_mode`): mode 0,
    // all threads copy the whole tile and meet at a block barrier per tile; mode 1, the `DSPLIT`
    // warps of a key group copy its 16 keys and wait for their own copies only (a warp barrier,
    // a named one for a pair), so that no warp waits for another's keys and the groups' requests
    // spread over time instead of leaving together after each barrier.
    let group_pipes = p.pipe_mode != 0;
    let (copier, first_token, copiers) = if group_pipes {
        (lane + WARP_SIZE * dim_part, key_group * 16, WARP_SIZE * DSPLIT as u32)
    } else {
        (tid, 0, threads)
    };
    let tokens_per_pass = copiers / per_token;
    // Waits until the current tile's copies are visible to every thread that reads them.
    let sync_copies = #[inline(always)]
    || {
        if !group_pipes {
            cta.sync();
        } else if DSPLIT == 1 {
            sync_warp();
        } else {
            // Named barriers 1 and 2, one per pair, in one instruction (the id in a register).
            sync_named_id(ids::DECODE_KEY_PAIRS.start + key_group, WARP_SIZE * DSPLIT as u32);
        }
    };
    // `per_token` threads share a token of a tile's copies: `part0` is this thread's first chunk
    // of its tokens' K-then-V spans, `token0` its first token's offset in a tile.
    let part0 = copier % per_token;
    let token0 = first_token + copier / per_token;
    let pages = FastDiv::new(p.page_size);
    let preload = TablePreload::load(&ptr, &p, &pages, tile, token0, cta);
    let blk = if BY_SEQUENCE {
        // A grid of sequences: a block whose sequence the tile kernel runs has nothing to do. The
        // whole cluster of a sequence (its splits) decides alike, before any cluster barrier.
        match resolve_sequence_block(&ptr, &p, MMA_HEADS_PER_BLOCK, cta) {
            Some(blk) => blk,
            None => return,
        }
    } else {
        resolve_block(&ptr, &p, MMA_HEADS_PER_BLOCK)
    };
    let (split_lo, split_hi) = (blk.split_lo, blk.split_hi);
    // The preloaded entries are this block's where its row and split start are the guess's.
    let preloaded = preload.on && blk.page_table == preload.table && split_lo == preload.split_lo;
    let qa = if fp8 {
        load_q_fragments::<Q, KV, KSTEPS, true>(&ptr, &p, &blk)
    } else {
        load_q_fragments::<Q, KV, KSTEPS, false>(&ptr, &p, &blk)
    };

    let smem = cta.shared::<f32>();
    let smem_base = shared_address(smem);
    let kv = ptr.kv as *const u8;
    let token_stride = 2 * p.num_kv_heads as usize * D * kv_bytes as usize; // bytes per token of the pool
    let head_offset = 2 * blk.g as usize * D * kv_bytes as usize;
    // Page-table entry of key j, when j is inside the split and its page inside the pool.
    let page_of = |j: u32| -> Option<(i32, u32)> {
        if j >= split_hi {
            return None;
        }
        let (slot, in_page) = pages.div_rem(j);
        let page = *blk.page_table.add(slot as usize);
        if page_is_valid(page, p.total_pages) {
            Some((page, in_page))
        } else {
            None
        }
    };

    // Copies tile `i` of the split into stage `slot` (= i % stages; one commit group per tile).
    // `per_token` threads share a token: thread r of them copies chunks r, r + per_token, ... of
    // its K-then-V span: each warp instruction reads four tokens' whole 128-byte pieces, and a
    // thread loads a page-table entry per page it touches (its first token's comes preloaded
    // where `first_entry` is Some). Rows are stored swizzled for ldmatrix (`swizzled_chunk`).
    // Inlined at each of its call sites below (a closure called from several became a call).
    let issue_with = #[inline(always)]
    |i: u32, slot: u32, hint: CopyHint, first_entry: Option<i32>| {
        let stage_base = smem_base + slot * stage_bytes;
        let tile_base = split_lo + i * tile;
        // This thread's tokens of the tile are `tokens_per_pass` apart: one division, for the
        // first, and a page-table load per page they touch.
        // Entries past the sequence's row of the table are never read (a token past the split
        // has none: it is zero-filled whatever `page` holds).
        let entry = |table_slot: u32| {
            if table_slot < p.pages_per_seq {
                *blk.page_table.add(table_slot as usize)
            } else {
                -1
            }
        };
        let (mut table_slot, mut in_page) = pages.div_rem(tile_base + token0);
        let mut page = match first_entry {
            Some(page) => page,
            None => entry(table_slot),
        };
        let mut page_ok = page_is_valid(page, p.total_pages);
        // Wrapping: the address is formed before the page's validity is known (and used only when
        // it is valid), so it may point anywhere meanwhile.
        let token_at = |page: i32, in_page: u32| {
            let t = (page as usize).wrapping_mul(p.page_size as usize).wrapping_add(in_page as usize);
            kv.wrapping_add(t.wrapping_mul(token_stride).wrapping_add(head_offset + part0 as usize * 16))
        };
        // The pool address of this thread's token, meaningful while `page` is valid.
        let mut src = token_at(page, in_page);
        // Keys of the tile inside the split: pass `pass`'s token is inside when its offset from
        // the thread's first token is below `inside - pass * tokens_per_pass` (uniform).
        let inside = split_hi - tile_base;
        // One pass: this thread's copies of its token `pass` (zero-filled outside the split or on
        // an invalid page; a copy not `valid` reads nothing, so `src` need not be an address).
        let copy_pass = #[inline(always)]
        |pass: usize, src: *const u8, page_ok: bool| {
            let token = token0 + pass as u32 * tokens_per_pass;
            let valid = page_ok && token0 < inside.saturating_sub(pass as u32 * tokens_per_pass);
            let row = token * kv_row_bytes;
            unroll::<COPIES>(|c| {
                if (c as u32) < copies_per_token_thread {
                    let part = c as u32 * per_token + part0;
                    let (region, col) = (part / row_chunks, part % row_chunks);
                    let col = swizzled_chunk(col, token, row_chunks);
                    let dst = stage_base + region * tile * kv_row_bytes + row + col * 16;
                    cp_async_16(dst, src.wrapping_add(c * 16 * per_token as usize), valid, hint);
                }
            });
        };
        let step = tokens_per_pass as usize * token_stride;
        if in_page + (passes - 1) * tokens_per_pass < p.page_size {
            // Every pass on the first token's page (with pages of 16 tokens or more in mode 1, a
            // thread's four tokens span 13 from a key-group start): the next token is `step`
            // bytes on.
            unroll::<4>(|pass| {
                if (pass as u32) < passes {
                    copy_pass(pass, src.wrapping_add(pass * step), page_ok);
                }
            });
        } else {
            // The page-table walk: the next entry where a pass crosses a page (a division and a
            // load then).
            unroll::<4>(|pass| {
                if pass as u32 >= passes {
                    return;
                }
                if pass > 0 {
                    in_page += tokens_per_pass;
                    if in_page >= p.page_size {
                        let (pages_on, rest) = pages.div_rem(in_page);
                        table_slot += pages_on;
                        in_page = rest;
                        page = entry(table_slot);
                        page_ok = page_is_valid(page, p.total_pages);
                        src = token_at(page, in_page);
                    } else {
                        src = src.wrapping_add(step);
                    }
                }
                copy_pass(pass, src, page_ok);
            });
        }
        commit_group();
    };
    // The L2 hint (`RpaParams::copy_hint`) is chosen once per tile and each arm's copies are
    // compiled with a constant hint: a hint decided per copy made ptxas emit every copy several
    // ways behind branches (seen in the tile kernel's SASS, benchmarks/NOTES.md "v4").
    let issue = #[inline(always)]
    |i: u32, slot: u32, first_entry: Option<i32>| {
        if p.copy_hint & 1 != 0 {
            issue_with(i, slot, CopyHint { prefetch_256: true }, first_entry)
        } else {
            issue_with(i, slot, CopyHint { prefetch_256: false }, first_entry)
        }
    };

    let mut o = [[0.0f32; 4]; NTILES];
    // Running max and (this lane's share of the) sum for rows g and g + 8 of the tile (heads
    // 2c and 2c + 1 in the key-rows layout, whose Oᵀ is `ot`).
    let mut m = [f32::NEG_INFINITY; 2];
    let mut l = [0.0f32; 2];
    let mut ot = [[0.0f32; 4]; KSTEPS];
    let num_tiles = (split_hi - split_lo).div_ceil(tile);

    // This lane's ldmatrix rows among the warp's 16 keys: 16-bit K for S (non-transposed:
    // matrices are keys 0-7 / 8-15 × dims +0 / +8); V for O and 1-byte K (matrices keys 0-7 /
    // 8-15 × chunk +0, then × chunk +1).
    let k_token = (lane / 16) * 8 + lane % 8;
    let k_half = (lane / 8) % 2;
    let v_token = ((lane / 8) % 2) * 8 + lane % 8;
    let v_half = lane / 16;
    // Every column these lanes read is an even chunk plus the lane's half (`2k + half`, bit 0 the
    // half), so its swizzled chunk is `(half ^ swizzle(row)) ^ even`: one lane constant per
    // operand, and one XOR per `ldmatrix` (the swizzle recomputed from the lane id for each of
    // the 16 `ldmatrix` of a tile was ~5 instructions apiece in the SASS, benchmarks/NOTES.md "v11").
    let k_chunk = k_half ^ chunk_swizzle(k_token, row_chunks);
    let v_chunk = v_half ^ chunk_swizzle(v_token, row_chunks);
    // The same lane constants for the key-rows layout's loads.
    let key_rows_lanes = KeyRowsLanes { k_token, k_chunk, v_token, v_chunk, kv_row_bytes };

    for i in 0..stages - 1 {
        if i < num_tiles {
            issue(i, i, if preloaded { preload.entry(i) } else { None });
        } else {
            commit_group();
        }
    }
    // q as the tensor cores' operands, once the first tiles' copies are out: for bf16 q with fp8
    // KV the conversion waits for q's loads (and a warp-wide max) and would otherwise hold the
    // copies back by that round trip.
    let (qa, q_factor) = q_as_operand::<Q, M, KSTEPS>(qa);
    let qb = q_b_fragments::<KSTEPS>(&qa);
    // Logits stay raw `q · k` with the scale in the softmax's exponent where the contract allows
    // (no soft cap, a positive scale): one fma per weight instead of a multiply per logit, and
    // tiles inside the row's window with every key present skip the mask. The factor q was
    // scaled by leaves the logits exactly (a power of two).
    let logit = LogitScale::for_decode(&RpaParams { sm_scale: p.sm_scale / q_factor, ..p });
    // Every M row of the block is query row `t` (one head each): one window for all.
    let rows = WarpRows { win: [blk.window; 2], all_first: blk.window.first, all_end: blk.window.end };
    // Rows g + 8 (heads 8-15 of the chunk) exist only for GQA groups above 8.
    let upper_rows = blk.hc > 8;
    // Stage of tile i (i % stages), kept as a counter: no division per tile.
    let mut slot = 0;
    for i in 0..num_tiles {
        // Tile i has landed for this thread; after the barrier, for every thread that reads it,
        // and every one of them is past tile i - 1, whose stage (the one before `slot`) the next
        // copies reuse.
        wait_group_dyn(stages - 2);
        sync_copies();
        if i + stages - 1 < num_tiles {
            issue(i + stages - 1, if slot == 0 { stages - 1 } else { slot - 1 }, None);
        } else {
            commit_group();
        }

        let stage = slot * stage_bytes;
        slot = if slot + 1 == stages { 0 } else { slot + 1 };
        let key0 = split_lo + i * tile + key_group * 16;
        // Bit k: key key0 + k is inside the split and on a valid page (else zero-filled above).
        let present = warp_ballot(lane < 16 && page_of(key0 + lane).is_some());

        // The warp's 16 K rows, and its 16 V rows `tile` rows further.
        let k_base = smem_base + stage + key_group * 16 * kv_row_bytes;
        let v_base = k_base + tile * kv_row_bytes;

        if KEY_ROWS {
            let mut st = key_rows_logits::<M, KV, KSTEPS>(k_base, &key_rows_lanes, &qb);
            mask_key_rows(&mut st, key0, present, &blk.window, &logit, &p);
            let pt = key_rows_softmax_step::<M, KSTEPS>(&st, logit.exp_scale, &mut m, &mut l, &mut ot);
            key_rows_accumulate::<M, KV, KSTEPS>(v_base, &key_rows_lanes, pt, &mut ot);
            continue;
        }

        // S = Q Kᵀ over the warp's 16 keys.
        let mut s = [[0.0f32; 4]; 2];
        if fp8 {
            // One ldmatrix gives two k-steps (2 chunks of 16 one-byte dims) of both n-tiles:
            // matrices keys 0-7 / 8-15 × chunk 2kk, then the same × chunk 2kk + 1.
            let k_row = k_base + v_token * kv_row_bytes;
            unroll::<KSTEPS>(|kk| {
                if kk < KSTEPS / 2 {
                    let b = ldmatrix_x4(k_row + (v_chunk ^ (2 * kk as u32)) * 16);
                    s[0] = M::mma(qa[2 * kk], KV::k_operand(b[0]), s[0]);
                    s[1] = M::mma(qa[2 * kk], KV::k_operand(b[1]), s[1]);
                    s[0] = M::mma(qa[2 * kk + 1], KV::k_operand(b[2]), s[0]);
                    s[1] = M::mma(qa[2 * kk + 1], KV::k_operand(b[3]), s[1]);
                }
            });
        } else {
            let k_row = k_base + k_token * kv_row_bytes;
            unroll::<KSTEPS>(|k| {
                let b = ldmatrix_x4(k_row + (k_chunk ^ (2 * k as u32)) * 16);
                s[0] = M::mma(qa[k], [b[0], b[1]], s[0]);
                s[1] = M::mma(qa[k], [b[2], b[3]], s[1]);
            });
        }
        mask_logits::<2, 1>(&mut s, key0, [present], &rows, &logit, &p);
        let pa = online_softmax_step::<M, NTILES>(&s, logit.exp_scale, upper_rows, &mut m, &mut l, &mut o);

        // O += P V.
        let v_row = v_base + v_token * kv_row_bytes;
        if fp8 {
            // One transposed ldmatrix gives two 16-dim chunks (keys 0-7 / 8-15 × chunk 2q, then
            // chunk 2q + 1); each chunk feeds two n-tiles, its even dims and its odd dims.
            unroll::<NTILES>(|nt| {
                if nt % 4 == 0 {
                    let b = ldmatrix_x4_trans(v_row + (v_chunk ^ (nt / 2) as u32) * 16);
                    unroll::<2>(|c| {
                        let (low_keys, high_keys) = (KV::v_operands(b[2 * c]), KV::v_operands(b[2 * c + 1]));
                        o[nt + 2 * c] = M::mma(pa, [low_keys[0], high_keys[0]], o[nt + 2 * c]);
                        o[nt + 2 * c + 1] = M::mma(pa, [low_keys[1], high_keys[1]], o[nt + 2 * c + 1]);
                    });
                }
            });
        } else {
            // One ldmatrix.trans gives the B fragments of two 8-dim n-tiles.
            unroll::<NTILES>(|nt| {
                if nt % 2 == 0 {
                    let b = ldmatrix_x4_trans(v_row + (v_chunk ^ (dim_part * NTILES as u32 + nt as u32)) * 16);
                    o[nt] = M::mma(pa, [b[0], b[1]], o[nt]);
                    o[nt + 1] = M::mma(pa, [b[2], b[3]], o[nt + 1]);
                }
            });
        }
    }
    // Every copy has landed and every warp is done with the stages before they become the merge
    // area.
    wait_all();
    cta.sync();
    if fp8 {
        unroll::<NTILES>(|nt| unroll::<4>(|e| o[nt][e] *= p.v_scale));
        unroll::<KSTEPS>(|mt| unroll::<4>(|e| ot[mt][e] *= p.v_scale));
    }
    let dim0 = dim_part as usize * NTILES * 8;
    let m = [logit.to_natural(m[0]), logit.to_natural(m[1])];
    if KEY_ROWS {
        if fp8 {
            store_key_rows_state::<KSTEPS, true>(smem, D, key_group as usize, &m, &l, &ot);
        } else {
            store_key_rows_state::<KSTEPS, false>(smem, D, key_group as usize, &m, &l, &ot);
        }
    } else if fp8 {
        store_warp_state::<NTILES, true>(smem, D, key_group as usize, dim0, &m, &l, &o);
    } else {
        store_warp_state::<NTILES, false>(smem, D, key_group as usize, dim0, &m, &l, &o);
    }
    cta.sync();
    let states = WarpStates {
        smem,
        warps: key_groups as usize,
        rows: MMA_HEADS_PER_BLOCK as usize,
        stride: 2 + D,
        // A group never splits (the host's plan): its merge compiles without the cluster code.
        cluster_area: if B::GROUP {
            core::ptr::null_mut()
        } else {
            smem.add(pipelined_warp_state_floats(D as u32, tile) as usize)
        },
        counts_for_merge_blocks: !BY_SEQUENCE,
    };
    merge_warps_and_store(&ptr, &p, &blk, states, threads as usize, cta);
}

/// One pipelined kernel per (q dtype, KV dtype, head_dim) in the layout `key_rows` says:
/// `rpa_pipe_<q>_<kv>_d<D>` (heads as the mma's rows) or `rpa_pipe_kr_<q>_<kv>_d<D>` (keys as its
/// rows, GQA groups up to 8; head_dim 64 and 128, whose dim split is 1), on the grid
/// `by_sequence` says (rows, or a mixed batch's decode sequences: `rpa_pipe_seq_*`,
/// `rpa_pipe_kr_seq_*`); `@ M` compiles it for M resident blocks of its 128 threads.
macro_rules! rpa_pipe_kernels {
    (key_rows = $key_rows:literal, by_sequence = $by_sequence:literal;
     $( $q:ty, $kv:ty => $($name:ident $d:literal $(@ $blocks:literal)?),* ; )*) => {
        attention_kernels! { $( $(
            $name: $q, $kv => rpa_pipelined[$d, $d / 16, $d / 8 / pipelined_dim_split($d) as usize,
                pipelined_dim_split($d) as usize, $key_rows, $by_sequence] $(bounds(128, $blocks))?;
        )* )* }
    };
}

// Every pipelined kernel has 128 threads (the launch bounds below say so).
const _: () = assert!(
    pipelined_threads(pipelined_tile_keys(64), pipelined_dim_split(64)) == 128
        && pipelined_threads(pipelined_tile_keys(128), pipelined_dim_split(128)) == 128
        && pipelined_threads(pipelined_tile_keys(256), pipelined_dim_split(256)) == 128
);

// `@ 3`: the head_dim-128 kernels are compiled for three blocks per SM (`#[kernel(max_threads =
// 128, min_blocks = 3)]`): at most 168 registers per thread (the 16-bit kernel took 204, two
// blocks per SM), so that fp8's 16 KiB stages and 16-bit KV's two 32 KiB stages (the long-grid
// rule) run three blocks per SM (benchmarks/NOTES.md "v9", "v10"). ptxas keeps one value
// on the stack across the tile loop (stored before it, loaded after it).
rpa_pipe_kernels! {
    key_rows = false, by_sequence = false;
    f16, f16 => rpa_pipe_f16_f16_d64 64, rpa_pipe_f16_f16_d128 128 @ 3, rpa_pipe_f16_f16_d256 256;
    f16, F8E4M3 => rpa_pipe_f16_e4m3_d64 64, rpa_pipe_f16_e4m3_d128 128 @ 3;
    f16, F8E5M2 => rpa_pipe_f16_e5m2_d64 64, rpa_pipe_f16_e5m2_d128 128 @ 3;
    Bf16, Bf16 => rpa_pipe_bf16_bf16_d64 64, rpa_pipe_bf16_bf16_d128 128 @ 3, rpa_pipe_bf16_bf16_d256 256;
    Bf16, F8E4M3 => rpa_pipe_bf16_e4m3_d64 64, rpa_pipe_bf16_e4m3_d128 128 @ 3;
    Bf16, F8E5M2 => rpa_pipe_bf16_e5m2_d64 64, rpa_pipe_bf16_e5m2_d128 128 @ 3;
}

// Key rows: half the registers of the head-rows layout's q fragments and accumulators, so the
// head_dim-128 kernels are compiled for four blocks per SM (128 registers).
rpa_pipe_kernels! {
    key_rows = true, by_sequence = false;
    f16, f16 => rpa_pipe_kr_f16_f16_d64 64, rpa_pipe_kr_f16_f16_d128 128 @ 4;
    f16, F8E4M3 => rpa_pipe_kr_f16_e4m3_d64 64, rpa_pipe_kr_f16_e4m3_d128 128 @ 4;
    f16, F8E5M2 => rpa_pipe_kr_f16_e5m2_d64 64, rpa_pipe_kr_f16_e5m2_d128 128 @ 4;
    Bf16, Bf16 => rpa_pipe_kr_bf16_bf16_d64 64, rpa_pipe_kr_bf16_bf16_d128 128 @ 4;
    Bf16, F8E4M3 => rpa_pipe_kr_bf16_e4m3_d64 64, rpa_pipe_kr_bf16_e4m3_d128 128 @ 4;
    Bf16, F8E5M2 => rpa_pipe_kr_bf16_e5m2_d64 64, rpa_pipe_kr_bf16_e5m2_d128 128 @ 4;
}

// A mixed batch's decode sequences (`RpaParams::decode_apart`): the tile kernels' dtypes (16-bit KV
// of q's dtype; fp8 KV, which the warp-specialized tile kernel takes on Hopper), both layouts. Their longer prologue needs more registers at head_dim 128: at the
// row kernels' bounds the head-rows twins spilled 60 bytes (three blocks per SM, 168 registers)
// and the key-rows twins 20 on sm_80 (four, 128), so they take one block per SM less (the host
// plans each twin with its own residency; 16-bit KV's stages allow three at most anyway).
rpa_pipe_kernels! {
    key_rows = false, by_sequence = true;
    f16, f16 => rpa_pipe_seq_f16_f16_d64 64, rpa_pipe_seq_f16_f16_d128 128 @ 2, rpa_pipe_seq_f16_f16_d256 256;
    Bf16, Bf16 => rpa_pipe_seq_bf16_bf16_d64 64, rpa_pipe_seq_bf16_bf16_d128 128 @ 2, rpa_pipe_seq_bf16_bf16_d256 256;
    f16, F8E4M3 => rpa_pipe_seq_f16_e4m3_d64 64, rpa_pipe_seq_f16_e4m3_d128 128 @ 2;
    f16, F8E5M2 => rpa_pipe_seq_f16_e5m2_d64 64, rpa_pipe_seq_f16_e5m2_d128 128 @ 2;
    Bf16, F8E4M3 => rpa_pipe_seq_bf16_e4m3_d64 64, rpa_pipe_seq_bf16_e4m3_d128 128 @ 2;
    Bf16, F8E5M2 => rpa_pipe_seq_bf16_e5m2_d64 64, rpa_pipe_seq_bf16_e5m2_d128 128 @ 2;
}

rpa_pipe_kernels! {
    key_rows = true, by_sequence = true;
    f16, f16 => rpa_pipe_kr_seq_f16_f16_d64 64, rpa_pipe_kr_seq_f16_f16_d128 128 @ 3;
    Bf16, Bf16 => rpa_pipe_kr_seq_bf16_bf16_d64 64, rpa_pipe_kr_seq_bf16_bf16_d128 128 @ 3;
    f16, F8E4M3 => rpa_pipe_kr_seq_f16_e4m3_d64 64, rpa_pipe_kr_seq_f16_e4m3_d128 128 @ 3;
    f16, F8E5M2 => rpa_pipe_kr_seq_f16_e5m2_d64 64, rpa_pipe_kr_seq_f16_e5m2_d128 128 @ 3;
    Bf16, F8E4M3 => rpa_pipe_kr_seq_bf16_e4m3_d64 64, rpa_pipe_kr_seq_bf16_e4m3_d128 128 @ 3;
    Bf16, F8E5M2 => rpa_pipe_kr_seq_bf16_e5m2_d64 64, rpa_pipe_kr_seq_bf16_e5m2_d128 128 @ 3;
}
