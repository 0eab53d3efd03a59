//! The device planner of the query-tile kernels: one block turns a ragged batch's `cu_q_lens` into
//! work items (tile items, short items, zero-fill items) in a plan buffer in the workspace, whose
//! header the tile kernels and their persistent schedulers read ([`PlanView`]). The plan kernels
//! (`rpa_plan`, `rpa_plan_ws`) and the warp-specialized kernel's own block 0 run [`plan_items`].

use crate::attention::{clamp_num_seqs, find_sequence, is_apart_decode, RpaParams};
use crate::barrier::{self, ids};
use crate::kernels::unroll;
use crate::shared::dynamic_shared_mem;
use crate::thread::thread_idx_x;
use crate::warp::{warp_inclusive_sum_u32, warp_shuffle_idx_u32, WARP_SIZE};

/// Threads of the planning kernel (one block).
pub const PLAN_THREADS: u32 = 256;

/// Words before the items in the plan: item count, fallback flag, a reserved word, the
/// warp-specialized kernel's work counter (its dynamic schedule; zeroed with the plan), a mixed
/// batch's inputs word ([`PLAN_INPUTS_READY_WORD`], words 4 and 5); then, in the next 128-byte
/// line (apart from those words, which are written while every block polls; the first items share
/// it), that kernel's plan state (an 8-byte word at [`PLAN_STATE_WORD`]) and count of blocks done
/// ([`PLAN_BLOCKS_DONE_WORD`]); items from word 36 (16-byte aligned).
pub const PLAN_HEADER_WORDS: u32 = 36;

/// The header word that is nonzero when `cu_q_lens` decreases somewhere: the plan's items are
/// then single rows ([`PlanView::item`]).
pub(crate) const PLAN_FALLBACK_WORD: usize = 1;

/// The header word the warp-specialized kernel's blocks take their (item, KV head) pairs from.
pub(crate) const PLAN_WORK_COUNTER_WORD: usize = 3;

/// The warp-specialized kernel's plan state, where its plan is published under a tag (built by its
/// block 0, or with decode rows apart and one block per pair by `rpa_plan_ws`): an 8-byte word at
/// words 32 and 33 (byte 128 of the plan, which is 16-byte aligned;
/// `prefill::hopper::scheduler::plan_or_wait`).
pub(crate) const PLAN_STATE_WORD: usize = 32;

/// The warp-specialized kernel's count of blocks that are done with the plan.
pub(crate) const PLAN_BLOCKS_DONE_WORD: usize = 34;

/// Where a mixed batch's warp-specialized kernel plans itself after the decode kernel
/// (`RpaParams::decode_apart` 2): an 8-byte word at words 4 and 5 in which the decode kernel's
/// block (0, 0, 0) says, under the call's tag, that it has passed its grid dependency wait (the
/// kernels before the call, which write its inputs, have completed), so that the tile kernel's
/// block 0 may read the metadata and plan without waiting for the decode grid
/// ([`publish_inputs_ready`], `prefill::hopper::scheduler::plan_or_wait`).
pub(crate) const PLAN_INPUTS_READY_WORD: usize = 4;

/// The inputs word's value once the decode kernel has published it under `tag`
/// ([`PLAN_INPUTS_READY_WORD`]); anything else (the workspace's earlier contents, 0 as the tile
/// kernel's block 0 leaves it) means not yet.
#[inline(always)]
pub(crate) const fn inputs_ready_word(tag: u32) -> u64 {
    crate::attention::launch_tagged_word(tag, 2)
}

/// Publishes [`PLAN_INPUTS_READY_WORD`] under `tag`: a GPU-scope fence (the writes of the kernels
/// before, which this thread's grid dependency wait made visible to it, ordered before the word),
/// then the word. The decode kernel's block (0, 0, 0) calls it, its thread 0 only.
///
/// # Safety
/// One thread, after its grid dependency wait; `plan` holds the plan header and nothing else
/// writes the word until the tile kernel's block 0 has read it.
#[inline(always)]
pub(crate) unsafe fn publish_inputs_ready(plan: *mut u32, tag: u32) {
    crate::gpu_scope::publish_u64(plan.add(PLAN_INPUTS_READY_WORD) as *mut u64, inputs_ready_word(tag));
}

/// Words per item: sequence ([`NO_SEQUENCE`] for zero-fill), first row, rows, reserved.
pub const PLAN_ITEM_WORDS: u32 = 4;

/// The sequence of a zero-fill item.
pub(crate) const NO_SEQUENCE: u32 = u32::MAX;

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

/// Most threads of a block that plans ([`plan_items`]), and their warps.
const PLAN_MAX_THREADS: usize = 1024;
const PLAN_MAX_WARPS: usize = PLAN_MAX_THREADS / WARP_SIZE as usize;

/// Dynamic shared memory of a block that plans: three counts per warp (the scan), then for each
/// thread its sequence's inclusive tile-item count and end row, and the first sequence's start
/// row (the tile items' writes spread over the block).
pub const PLAN_SHARED_BYTES: u32 = (3 * PLAN_MAX_WARPS + 2 * PLAN_MAX_THREADS + 1) as u32 * 4;

/// One plan item as the planner stores it: one 16-byte store (items start 16-byte aligned).
#[repr(C, align(16))]
struct PlanItem([u32; PLAN_ITEM_WORDS as usize]);

/// Whether a sequence of `rows` query rows is one short item (all its M rows fit one warp's 16).
#[inline(always)]
fn is_short(rows: u32, group: u32) -> bool {
    rows <= 16 / group
}

/// Builds the plan (see the module docs) with one block of `block_threads` threads: each thread counts
/// the items of a contiguous run of sequences, a block-wide scan places them. Order, the order the
/// kernels take them in: the tile items in reverse of the sequences' order (the last sequence's
/// last tile first: a causal sequence's later tiles see more keys), then the short items, then the
/// zero-fill items; the header holds the item count and the work counter at 0.
/// With at most one sequence per thread, the tile items are written by every thread, item `k` by
/// thread `k mod block_threads` (its sequence found by a binary search of the scan): one thread
/// per sequence took ~14 µs for 1 x 8k's 256 items, on the path of every block's first tile
/// (benchmarks/NOTES.md "v39").
///
/// # Safety
/// The block's first `block_threads` threads (a multiple of 32, at most 1024) call it, and no
/// other thread of the block meanwhile uses named barrier `ids::PLAN` (they meet there and in warp
/// shuffles), with [`PLAN_SHARED_BYTES`] of dynamic shared memory that nothing else uses
/// meanwhile; the metadata readable (after the grid dependency wait), as `rpa_plan` takes it;
/// `plan` holds [`plan_bytes`]`(p.plan_capacity)` bytes that nothing reads meanwhile.
#[inline(always)]
pub(crate) unsafe fn plan_items(
    cu_q_lens: *const i32,
    num_seqs: *const i32,
    plan: *mut u32,
    p: RpaParams,
    block_threads: u32,
) {
    let (tid, threads) = (thread_idx_x() as usize, block_threads as usize);
    let cu = |i: u32| *cu_q_lens.add(i as usize);
    // This thread's sequence in a batch of at most one sequence per thread, its bounds loaded
    // beside the sequence count (in bounds whatever the count: `cu_q_lens` holds
    // `max_num_seqs + 1` entries): the plan then waits for one round trip to memory, not two.
    let t = tid as u32;
    let first = if t < p.max_num_seqs { (cu(t), cu(t + 1)) } else { (0, 0) };
    let n = clamp_num_seqs(*num_seqs, p.max_num_seqs);
    let group = p.num_q_heads / p.num_kv_heads;
    let tile_rows = p.tile_rows.max(1);
    let max_tokens = p.max_tokens as i32; // < 2^31, validated on the host
    let clamp_row = |r: i32| r.clamp(0, max_tokens) as u32;
    let row_of = |i: u32| clamp_row(cu(i));
    let per = n.div_ceil(block_threads);
    let lo = (tid as u32 * per).min(n);
    let hi = (lo + per).min(n);
    // This thread's (tile items, short items, decreasing cu_q_lens steps).
    let mut counts = [0u32; 3];
    // The items of the sequence from row `a` to row `b` (its `cu_q_lens` entries). Decode
    // sequences that the pipelined kernel runs apart (`RpaParams::decode_apart`) are no items of
    // this plan.
    let mut count = |a: i32, b: i32| {
        if b < a {
            counts[2] += 1;
        }
        let rows = clamp_row(b).saturating_sub(clamp_row(a));
        if rows == 0 || (p.decode_apart != 0 && is_apart_decode(a, b, p.max_tokens)) {
        } else if is_short(rows, group) {
            counts[1] += 1;
        } else {
            counts[0] += rows.div_ceil(tile_rows);
        }
    };
    if per == 1 {
        // lo = tid < n <= max_num_seqs where this thread has a sequence.
        if lo < hi {
            count(first.0, first.1);
        }
    } else {
        for i in lo..hi {
            count(cu(i), cu(i + 1));
        }
    }
    let apart = |i: u32| p.decode_apart != 0 && is_apart_decode(cu(i), cu(i + 1), p.max_tokens);

    let scan = dynamic_shared_mem::<u32>();
    // With one sequence per thread, its end row (and thread 0's start row) for the tile items'
    // writes below: stored now, so that `first` dies before the scan.
    let tile_end = scan.add(3 * PLAN_MAX_WARPS);
    let row_end = tile_end.add(PLAN_MAX_THREADS);
    let row_start = row_end.add(PLAN_MAX_THREADS);
    *row_end.add(tid) = clamp_row(first.1);
    if tid == 0 {
        *row_start = clamp_row(first.0);
    }
    let (lane, warp) = (tid as u32 % WARP_SIZE, tid / WARP_SIZE as usize);
    // Inclusive scans of the three counts over the threads: within each warp by shuffles, then
    // across the warps' totals, which lane 31 of each warp leaves in shared memory (one block
    // barrier) and lane w of every warp reads back for warp w, a second shuffle scan (a few
    // registers, where a loop over the warps' totals held them all: it spilled in the
    // prologues of the mix kernels). This runs on the critical path of every prefill call,
    // where the blocks wait for the plan: benchmarks/NOTES.md "v38".
    let warps = threads / WARP_SIZE as usize;
    let mut incl = [0u32; 3];
    unroll::<3>(|c| incl[c] = warp_inclusive_sum_u32(counts[c]));
    if lane == WARP_SIZE - 1 {
        unroll::<3>(|c| *scan.add(c * PLAN_MAX_WARPS + warp) = incl[c]);
    }
    barrier::sync_named::<{ ids::PLAN.start }>(block_threads);
    let mut totals = [0u32; 3];
    unroll::<3>(|c| {
        let t = if (lane as usize) < warps { *scan.add(c * PLAN_MAX_WARPS + lane as usize) } else { 0 };
        let across = warp_inclusive_sum_u32(t);
        incl[c] += warp_shuffle_idx_u32(across - t, warp as u32);
        totals[c] = warp_shuffle_idx_u32(across, WARP_SIZE - 1);
    });
    let (tiles, shorts) = (totals[0], totals[1]);
    let capacity = p.plan_capacity;
    if totals[2] != 0 {
        if tid == 0 {
            *plan = 0;
            *plan.add(PLAN_FALLBACK_WORD) = 1;
            *plan.add(PLAN_WORK_COUNTER_WORD) = 0;
        }
        return;
    }
    let write = |k: u32, seq: u32, row: u32, rows: u32| {
        if k < capacity {
            let item = plan.add((PLAN_HEADER_WORDS + PLAN_ITEM_WORDS * k) as usize) as *mut PlanItem;
            item.write(PlanItem([seq, row, rows, 0]));
        }
    };
    // Tile item `k` in the sequences' order (sequence by sequence, row by row) is stored at
    // `tiles - 1 - k`: the kernels take the lowest first.
    let mut next_short = tiles + incl[1] - counts[1];
    if per == 1 {
        // Thread t holds sequence t (if any): its inclusive tile-item count, for every thread's
        // search (threads past the last sequence hold the total); its rows are stored above.
        *tile_end.add(tid) = incl[0];
        barrier::sync_named::<{ ids::PLAN.start }>(block_threads);
        let mut k = tid as u32;
        while k < tiles {
            // Its sequence: the first whose inclusive count exceeds k (sequences without tile
            // items, whose count equals the one before, are never found).
            let (mut a, mut b) = (0u32, n);
            while a < b {
                let mid = (a + b) / 2;
                if *tile_end.add(mid as usize) > k {
                    b = mid;
                } else {
                    a = mid + 1;
                }
            }
            let (before, r0) =
                if a == 0 { (0, *row_start) } else { (*tile_end.add(a as usize - 1), *row_end.add(a as usize - 1)) };
            let row = r0 + (k - before) * tile_rows;
            write(tiles - 1 - k, a, row, (*row_end.add(a as usize) - row).min(tile_rows));
            k += block_threads;
        }
        if counts[1] != 0 {
            // This thread's sequence is a short item (`count`).
            let (r0, r1) = (if tid == 0 { *row_start } else { *row_end.add(tid - 1) }, *row_end.add(tid));
            write(next_short, lo, r0, r1 - r0);
        }
    } else {
        let mut next_tile = incl[0] - counts[0];
        for i in lo..hi {
            let (r0, r1) = (row_of(i), row_of(i + 1));
            if r1 <= r0 || apart(i) {
                continue;
            }
            if is_short(r1 - r0, group) {
                write(next_short, i, r0, r1 - r0);
                next_short += 1;
            } else {
                let mut r = r0;
                while r < r1 {
                    let rows = (r1 - r).min(tile_rows);
                    write(tiles - 1 - next_tile, i, r, rows);
                    next_tile += 1;
                    r += rows;
                }
            }
        }
    }
    // Zero-fill items for the rows before the first sequence and after the last.
    let (head, tail0) = (row_of(0), row_of(n));
    let head_items = head.div_ceil(ZERO_ITEM_ROWS);
    let zero_items = head_items + (p.max_tokens - tail0).div_ceil(ZERO_ITEM_ROWS);
    let mut z = tid as u32;
    while z < zero_items {
        let (start, end) = if z < head_items {
            (z * ZERO_ITEM_ROWS, head)
        } else {
            (tail0 + (z - head_items) * ZERO_ITEM_ROWS, p.max_tokens)
        };
        write(tiles + shorts + z, NO_SEQUENCE, start, (end - start).min(ZERO_ITEM_ROWS));
        z += block_threads;
    }
    if tid == 0 {
        *plan = (tiles + shorts + zero_items).min(capacity);
        *plan.add(PLAN_FALLBACK_WORD) = 0;
        *plan.add(PLAN_WORK_COUNTER_WORD) = 0;
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

/// The plan's header, as the tile kernels walk it.
#[derive(Clone, Copy)]
pub(crate) struct PlanView {
    count: u32,
    /// Invalid `cu_q_lens`: the items are single rows (see [`PlanView::item`]).
    pub(crate) fallback: bool,
}

impl PlanView {
    /// # Safety
    /// `ptr.plan` written by [`rpa_plan`] (readable: after the grid dependency wait).
    #[inline(always)]
    pub(crate) unsafe fn load<Q>(ptr: &TiledPointers<Q>) -> Self {
        PlanView { count: *ptr.plan, fallback: *ptr.plan.add(PLAN_FALLBACK_WORD) != 0 }
    }

    /// Work item `unit` as (sequence, first row, rows), `None` past the last: the plan's items, in
    /// the order the kernels take them (the lowest units first: a causal sequence's last tiles,
    /// which see the most keys, first; [`plan_items`]), or with the fallback flag row `unit`, owned as
    /// [`find_sequence`] says. Items are in ascending order of `unit`: past one end, past all.
    ///
    /// # Safety
    /// As [`PlanView::load`]; `ptr.cu_q_lens` and `ptr.num_seqs` as [`rpa_plan`] takes them.
    #[inline(always)]
    pub(crate) unsafe fn item<Q>(&self, ptr: &TiledPointers<Q>, p: &RpaParams, unit: u32) -> Option<(u32, u32, u32)> {
        if self.fallback {
            if unit >= p.max_tokens {
                return None;
            }
            // Read here, not held: the producer's registers are few.
            let num_seqs = clamp_num_seqs(*ptr.num_seqs, p.max_num_seqs);
            let seq = find_sequence(unit as i32, num_seqs, |i| *ptr.cu_q_lens.add(i as usize));
            Some((seq.unwrap_or(NO_SEQUENCE), unit, 1))
        } else {
            if unit >= self.count {
                return None;
            }
            let item = ptr.plan.add((PLAN_HEADER_WORDS + PLAN_ITEM_WORDS * unit) as usize) as *const PlanItem;
            let [seq, row, rows, _] = (*item).0;
            Some((seq, row, rows))
        }
    }
}

/// Rows per zero-fill item.
pub(crate) const ZERO_ITEM_ROWS: u32 = 64;
