//! How a decode block's work becomes the output: the block's warps merge their online-softmax
//! states ([`merge_warps_and_store`]) into the output row, or, where the keys are split over
//! blocks (`num_splits`), into the split's normalized partial and its log-sum-exp; the splits
//! then merge in one of three ways, each the same softmax-weighted arithmetic:
//! - inside a thread-block cluster, through distributed shared memory (the pipelined kernel on
//!   sm_90: [`merge_warps_and_store`] with a cluster area);
//! - in merge blocks of the same grid, once every split block has counted in at the (row, head
//!   chunk)'s split counter ([`merge_block`]);
//! - in a second kernel over the partials in global memory ([`rpa_combine`] for few splits,
//!   [`rpa_combine_groups`] for many).
//!
//! Every decode kernel ([`super::general`], [`super::mma`], [`super::pipelined`]) ends here.
//! Invalid metadata never leads outside the buffers: every index into the output, the partials,
//! their log-sum-exps and the split counters is bounded by the static shapes in [`RpaParams`].

use crate::attention::{launch_tagged_word, split_counters_offset, RpaParams};
use crate::gpu_scope;
use crate::kernel;
use crate::math::{exp2_approx, ln_approx, max_f32, LOG2_E};
use crate::num::{Bf16, Element};
use crate::shared::dynamic_shared_mem;
use crate::thread::{block_idx_x, block_idx_y, block_idx_z, grid_dim_y, sync_threads, thread_idx_x};

use crate::kernels::block_slot::{BlockSlot, WholeBlock};
use crate::kernels::decode::general::{Block, BlockHeads, RpaPointers, RPA_THREADS, RPA_WARPS};
use crate::kernels::{load_vec, store_vec, unroll};

/// Where the warps of a block left their states for [`merge_warps_and_store`]: `warps` (logical)
/// warps, at most [`RPA_WARPS`], each `(m, l, acc[head_dim])` per query head of the chunk, at
/// `smem[(warp * rows + head) * stride]`.
#[derive(Clone, Copy)]
pub(crate) struct WarpStates {
    pub smem: *const f32,
    pub warps: usize,
    pub rows: usize,
    pub stride: usize,
    /// Shared memory for this block's split partial when the splits merge in a cluster
    /// (`RpaParams::cluster_splits`): `rows * (head_dim + 1)` floats apart from the states. Null
    /// for the kernels the host never launches in clusters.
    pub cluster_area: *mut f32,
    /// Whether the kernel's split blocks count in for the grid's merge blocks, as the host may
    /// ask (`RpaParams::merge_blocks`); false, a constant, compiles the count out (the host asks
    /// only the pipelined kernel on a grid of rows).
    pub counts_for_merge_blocks: bool,
}

/// Final step of the attention kernels: merge the warps' states (softmax-weighted) and write the
/// output row, or the split's partial output and log-sum-exp. The block's `threads` threads share
/// the work; the caller synchronizes the block before.
///
/// # Safety
/// Every one of the slot's `threads` threads calls it, after a barrier that follows every warp's
/// state store into `states`; `ptr`, `p` and `blk` as the attention kernel resolved them (with
/// splits, `ptr.part_o` / `ptr.part_lse` sized for `p.num_splits`; with `p.cluster_splits`, a
/// cluster launch of the splits and `states.cluster_area` set).
#[inline(always)]
pub(crate) unsafe fn merge_warps_and_store<Q: Element, KV>(
    ptr: &RpaPointers<Q, KV>,
    p: &RpaParams,
    blk: &Block,
    states: WarpStates,
    threads: usize,
    slot: impl BlockSlot,
) {
    let WarpStates { smem, warps, rows, stride, cluster_area, counts_for_merge_blocks } = states;
    let d = p.head_dim as usize;
    // The host sets `cluster_splits` only for the kernel that passes a cluster area (a null area
    // is a constant of the others: the cluster code is compiled out of them).
    let in_cluster = p.num_splits > 1 && p.cluster_splits != 0 && !cluster_area.is_null();
    let merged_by_blocks = counts_for_merge_blocks && !in_cluster && p.num_splits > 1 && p.merge_blocks != 0;
    let counter_seen = if merged_by_blocks { preload_split_counter(ptr, p, blk.t, slot.y()) } else { 0 };
    let total = blk.hc * d;
    let mut idx = slot.thread() as usize;
    while idx < total {
        let hh = idx / d;
        let dim = idx % d;
        let mut m_all = f32::NEG_INFINITY;
        // Unrolled over the most warps a block has, so the loads go out together.
        unroll::<{ RPA_WARPS as usize }>(|w| {
            if w < warps {
                m_all = max_f32(m_all, *smem.add((w * rows + hh) * stride));
            }
        });
        let mut l_all = 0.0f32;
        let mut o_all = 0.0f32;
        if m_all != f32::NEG_INFINITY {
            unroll::<{ RPA_WARPS as usize }>(|w| {
                let base = smem.add((w * rows + hh) * stride);
                if w < warps && *base != f32::NEG_INFINITY {
                    let scale = exp2_approx((*base - m_all) * LOG2_E);
                    l_all += *base.add(1) * scale;
                    o_all += *base.add(2 + dim) * scale;
                }
            });
        }
        let o = if l_all > 0.0 { o_all / l_all } else { 0.0 };
        let h = blk.h0 as usize + hh;
        let t = blk.t as usize;
        let lse = || if l_all > 0.0 { m_all + ln_approx(l_all) } else { f32::NEG_INFINITY };
        if p.num_splits <= 1 {
            *ptr.out.add((t * p.num_q_heads as usize + h) * d + dim) = Q::from_f32(o);
        } else if in_cluster {
            *cluster_area.add(hh * (d + 1) + dim) = o;
            if dim == 0 {
                *cluster_area.add(hh * (d + 1) + d) = lse();
            }
        } else {
            let row = (blk.split as usize * p.max_tokens as usize + t) * p.num_q_heads as usize + h;
            *ptr.part_o.add(row * d + dim) = o;
            if dim == 0 {
                *ptr.part_lse.add(row) = lse();
            }
        }
        idx += threads;
    }
    if in_cluster {
        merge_cluster_splits(ptr, p, blk, cluster_area, threads);
    } else if merged_by_blocks {
        // Every thread's partial stores before thread 0 counts the block in.
        slot.sync();
        if slot.thread() == 0 {
            gpu_scope::fence_acq_rel();
            count_split_in(split_counter(ptr, p, blk.t, slot.y()), counter_seen, p.launch_tag);
        }
    }
}

/// Most splits one cluster merges: the non-portable cluster size of Hopper (the host enables it
/// per kernel and checks that a cluster of the launch's blocks fits a GPC).
pub const MAX_CLUSTER_SPLITS: u32 = 16;

/// The softmax-weighted merge of one output element's split partials: each split's partial is
/// normalized over its own keys and carries their log-sum-exp; against the largest of those
/// (`m_all`), split `s` weighs `exp(lse_s - m_all)`. Splits that saw no key (`lse` = -inf) weigh
/// nothing, and an element no split saw merges to 0. The cluster merge's arithmetic (partials in
/// the cluster's shared memory); the merge kernel computes the same weights once per split.
struct SplitMerge {
    m_all: f32,
    o: f32,
    wsum: f32,
}

impl SplitMerge {
    /// A merge against `m_all`, the largest log-sum-exp among the splits (every `lse` added
    /// must be at most `m_all`).
    #[inline(always)]
    fn new(m_all: f32) -> Self {
        SplitMerge { m_all, o: 0.0, wsum: 0.0 }
    }

    /// Whether any split saw a key (`m_all` is finite). Callers weigh the splits only then: the
    /// outer test also keeps the compiler from sinking each partial's load behind its split's
    /// exponential in the cluster merge (without it the 16 distributed-shared-memory loads ran
    /// one after another: 1 x 2k 0.9 µs slower, benchmarks/NOTES.md "v10").
    #[inline(always)]
    fn any(&self) -> bool {
        self.m_all != f32::NEG_INFINITY
    }

    /// Adds a split of log-sum-exp `lse` and partial `part` (ignored when the split saw no key).
    #[inline(always)]
    fn add(&mut self, lse: f32, part: f32) {
        if lse != f32::NEG_INFINITY {
            let w = exp2_approx((lse - self.m_all) * LOG2_E);
            self.wsum += w;
            self.o += w * part;
        }
    }

    /// The merged value.
    #[inline(always)]
    fn value(&self) -> f32 {
        if self.wsum > 0.0 {
            self.o / self.wsum
        } else {
            0.0
        }
    }
}

/// Merges the splits of one (row, head chunk) whose blocks form one thread-block cluster (grid
/// z = the splits = the cluster), instead of [`rpa_combine`] over partials in global memory: no
/// second kernel, no partials leaving the chip. Every block has left its split's normalized
/// output and log-sum-exp in `area` (per head of the chunk: `head_dim` outputs, then the lse);
/// after a cluster barrier each block merges its share of the chunk's output elements, reading
/// every split's partial from its block's shared memory; a second barrier keeps each block's
/// shared memory alive until its peers have read it. The same arithmetic as [`rpa_combine`].
///
/// # Safety
/// Every thread of every block of the cluster calls it (a launch whose clusters are the splits,
/// sm_90 image); `area` holds this block's normalized partial and log-sum-exp per head of the
/// chunk, written before the call; `ptr`, `p` and `blk` as for [`merge_warps_and_store`].
#[inline(always)]
unsafe fn merge_cluster_splits<Q: Element, KV>(
    ptr: &RpaPointers<Q, KV>,
    p: &RpaParams,
    blk: &Block,
    area: *const f32,
    threads: usize,
) {
    crate::cluster::sync();
    let d = p.head_dim as usize;
    let splits = (p.num_splits as usize).min(MAX_CLUSTER_SPLITS as usize);
    // Each split's area in its block's shared memory (a block's window of the cluster's shared
    // address space is contiguous: offsets add to its mapped base).
    let local = crate::shared::shared_address(area);
    let mut peer = [0u32; MAX_CLUSTER_SPLITS as usize];
    unroll::<{ MAX_CLUSTER_SPLITS as usize }>(|s| {
        if s < splits {
            peer[s] = crate::cluster::map_shared(local, s as u32);
        }
    });
    let at = |s: usize, i: usize| crate::cluster::load_shared_f32(peer[s] + 4 * i as u32);
    let total = blk.hc * d;
    let mut idx = crate::cluster::rank() as usize * threads + thread_idx_x() as usize;
    while idx < total {
        let (hh, dim) = (idx / d, idx % d);
        // Every split's lse and output, loaded together (unrolled over the most splits).
        let mut lse = [f32::NEG_INFINITY; MAX_CLUSTER_SPLITS as usize];
        let mut part = [0.0f32; MAX_CLUSTER_SPLITS as usize];
        unroll::<{ MAX_CLUSTER_SPLITS as usize }>(|s| {
            if s < splits {
                lse[s] = at(s, hh * (d + 1) + d);
                part[s] = at(s, hh * (d + 1) + dim);
            }
        });
        let mut m_all = f32::NEG_INFINITY;
        unroll::<{ MAX_CLUSTER_SPLITS as usize }>(|s| m_all = max_f32(m_all, lse[s]));
        let mut merge = SplitMerge::new(m_all);
        if merge.any() {
            unroll::<{ MAX_CLUSTER_SPLITS as usize }>(|s| merge.add(lse[s], part[s]));
        }
        let row = blk.t as usize * p.num_q_heads as usize + blk.h0 as usize + hh;
        *ptr.out.add(row * d + dim) = Q::from_f32(merge.value());
        idx += splits * threads;
    }
    crate::cluster::sync();
}

/// The (row, query head) a merge block merges: its row of the output and of every split's
/// partials, the partial rows per split, and the head size.
#[derive(Clone, Copy)]
struct MergeRow {
    row: usize,
    rows_per_split: usize,
    d: usize,
}

impl MergeRow {
    /// Row `t`, query head `h`.
    #[inline(always)]
    fn of(p: &RpaParams, t: usize, h: usize) -> Self {
        let nq = p.num_q_heads as usize;
        MergeRow { row: t * nq + h, rows_per_split: p.max_tokens as usize * nq, d: p.head_dim as usize }
    }
}

/// Starts a merge kernel's block: waits for the split kernel (launched programmatically after
/// it, its partials are complete and visible only after the wait) and locates the block's row
/// (grid `(max_tokens, num_q_heads)`).
///
/// # Safety
/// Every thread of a merge kernel's block calls it before any load, on the grid `merge_kernels`'
/// `# Safety` describes.
#[inline(always)]
unsafe fn merge_row(p: &RpaParams) -> MergeRow {
    crate::grid_dependency::launch_dependents();
    crate::grid_dependency::wait_for_prerequisites();
    MergeRow::of(p, block_idx_x() as usize, block_idx_y() as usize)
}

/// Most splits the loop merge takes (the merge kernel the host picks, and a merge block's
/// arithmetic); the group merge above. On an H200 the loop kernel ran the cells of 8 to 16
/// splits 0.4-0.6 µs faster than the group kernel (4 x 512 10.2 against 10.8 µs), and the cells
/// of 32 and 47 splits 1.5-1.8 µs slower (1 x 8k 15.4 against 13.9, 1 x 32k 42.3 against 40.7;
/// benchmarks/NOTES.md "v14").
pub const LOOP_MERGE_MAX_SPLITS: u32 = 16;

/// Output elements of a partial row one merge thread reads at once (16-byte loads; every
/// supported head_dim is a multiple of 16, so rows of the partials stay 16-byte aligned).
const MERGE_VECTOR: usize = 4;

/// Splits whose log-sum-exps and partials one merge thread loads before it adds any: the loads
/// of a thread's splits are independent, and the merge is a chain of L2 round trips unless they
/// are in flight together.
const MERGE_LOADS_IN_FLIGHT: usize = 8;

/// Most split groups of a merge block: a group is `head_dim / 4` threads, and the smallest
/// supported head_dim (64) gives the most.
const MAX_MERGE_GROUPS: usize = RPA_THREADS as usize / (64 / MERGE_VECTOR);

/// Dynamic shared memory of the group merge kernel: each split group's running maximum and
/// weight sum, and its partial sums (at most `RPA_THREADS * MERGE_VECTOR` floats: the groups tile
/// the block's threads).
pub const fn rpa_combine_shared_bytes() -> u32 {
    (2 * MAX_MERGE_GROUPS as u32 + RPA_THREADS * MERGE_VECTOR as u32) * 4
}

/// The online softmax merge of one 16-byte column (four output elements) of a (row, query head)'s
/// split partials, over some of its splits (a group of [`rpa_combine_groups`]): the largest
/// log-sum-exp seen, and the weight sum and weighted partials against it. Splits that saw no key
/// (`lse` = -inf) weigh nothing.
#[derive(Clone, Copy)]
struct ColumnMerge {
    m: f32,
    wsum: f32,
    acc: [f32; MERGE_VECTOR],
}

impl ColumnMerge {
    /// No split merged yet.
    const EMPTY: Self = ColumnMerge { m: f32::NEG_INFINITY, wsum: 0.0, acc: [0.0; MERGE_VECTOR] };

    /// Adds splits `first, first + step, ...` below `splits` of column `col` of partial row
    /// `at.row`: `N` splits' log-sum-exps and partials are loaded before any is added (the loads
    /// are independent; added one by one, the merge is a chain of L2 round trips).
    ///
    /// # Safety
    /// The partials are `splits * at.rows_per_split` rows of `at.d` floats (16-byte aligned) and
    /// as many log-sum-exps; `col < at.d / 4`.
    #[inline(always)]
    unsafe fn add_splits<const N: usize>(
        &mut self,
        part_o: *const f32,
        part_lse: *const f32,
        at: &MergeRow,
        col: usize,
        (first, step, splits): (usize, usize, usize),
    ) {
        let mut s = first;
        while s < splits {
            // A split that saw no key (lse = -inf) may have left its partial unwritten: loaded
            // with the others (inside the workspace), never added.
            let mut lse = [f32::NEG_INFINITY; N];
            let mut v = [[0.0f32; MERGE_VECTOR]; N];
            unroll::<N>(|k| {
                let sk = s + k * step;
                if sk < splits {
                    let r = sk * at.rows_per_split + at.row;
                    lse[k] = *part_lse.add(r);
                    v[k] = load_vec(part_o.add(r * at.d + col * MERGE_VECTOR));
                }
            });
            let mut m_new = self.m;
            unroll::<N>(|k| m_new = max_f32(m_new, lse[k]));
            if m_new != f32::NEG_INFINITY {
                // exp2(-inf) = 0: the first splits that saw keys start the sums.
                let rescale = exp2_approx((self.m - m_new) * LOG2_E);
                self.wsum *= rescale;
                unroll::<MERGE_VECTOR>(|e| self.acc[e] *= rescale);
                unroll::<N>(|k| {
                    if lse[k] != f32::NEG_INFINITY {
                        let w = exp2_approx((lse[k] - m_new) * LOG2_E);
                        self.wsum += w;
                        unroll::<MERGE_VECTOR>(|e| self.acc[e] += w * v[k][e]);
                    }
                });
                self.m = m_new;
            }
            s += N * step;
        }
    }
}

/// Counts this block in at its (row, head chunk)'s split counter and returns the count with it
/// (counted in the low 16 bits of a [`launch_tagged_word`]: a grid's blocks of one chunk, at most
/// 65535). A word of another tag, or of none, is taken as 0 by the first block to count; the last
/// of the chunk's merge blocks to count ([`merge_block`]) leaves the word at a count of 0 under the
/// tag, for a launch that reuses the tag (a replayed CUDA graph).
///
/// One atomic add where the word carries the tag already (every block but the first ones): the
/// splits of a chunk finish nearly together, and a compare-and-swap loop for every block
/// serialized them, a failed attempt and an L2 round trip each (1 x 8k, 32 splits: 11 µs, in the
/// last-block merge this replaced, benchmarks/NOTES.md "v15"). Only a block that reads a word
/// without the tag swaps the tagged count of 1 in; if another block's swap came first, it adds
/// instead. Adds never carry out of the count (at most the chunk's blocks of them). `seen`: the
/// word as this block read it, at any time before (a stale read is harmless: a tag, once in,
/// stays; a swap from a stale value fails).
///
/// # Safety
/// `counter` is an 8-byte aligned global word that only this grid's blocks of that (row, head
/// chunk) touch while it runs.
#[inline(always)]
unsafe fn count_split_in(counter: *mut u64, seen: u64, tag: u32) -> u64 {
    use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let counter = AtomicU64::from_ptr(counter);
    let zero = launch_tagged_word(tag, 0);
    if !is_tagged(seen, tag) {
        // Else another block's swap (or add) came first: the word carries the tag now.
        if counter.compare_exchange(seen, zero + 1, Relaxed, Relaxed).is_ok() {
            return 1;
        }
    }
    (counter.fetch_add(1, Relaxed) & SPLIT_COUNT) + 1
}

/// The count bits of a split counter ([`count_split_in`]).
const SPLIT_COUNT: u64 = 0xffff;

/// Whether a split counter's `word` carries `tag` ([`launch_tagged_word`]).
#[inline(always)]
fn is_tagged(word: u64, tag: u32) -> bool {
    word & !SPLIT_COUNT == launch_tagged_word(tag, 0)
}

/// Leaves a split counter at a count of 0 under `tag`, for the next launch that reuses the tag.
///
/// # Safety
/// As [`count_split_in`]; its last count.
#[inline(always)]
unsafe fn reset_split_counter(counter: *mut u64, tag: u32) {
    core::sync::atomic::AtomicU64::from_ptr(counter)
        .store(launch_tagged_word(tag, 0), core::sync::atomic::Ordering::Relaxed);
}

/// The merge blocks' split counter of row `t`'s head chunk `chunk` (grid y).
///
/// # Safety
/// The workspace holds the counters after the log-sum-exps ([`split_counters_offset`]).
#[inline(always)]
unsafe fn split_counter<Q, KV>(ptr: &RpaPointers<Q, KV>, p: &RpaParams, t: u32, chunk: u32) -> *mut u64 {
    let lse_count = p.num_splits as usize * p.max_tokens as usize * p.num_q_heads as usize;
    let counters = ptr.part_lse.add(split_counters_offset(lse_count)) as *mut u64;
    counters.add(t as usize * grid_dim_y() as usize + chunk as usize)
}

/// Reads a split counter ahead of the block's count (thread 0; 0 elsewhere), so that the read's
/// round trip overlaps the partial's stores.
///
/// # Safety
/// As [`split_counter`].
#[inline(always)]
unsafe fn preload_split_counter<Q, KV>(ptr: &RpaPointers<Q, KV>, p: &RpaParams, t: u32, chunk: u32) -> u64 {
    if thread_idx_x() == 0 {
        core::sync::atomic::AtomicU64::from_ptr(split_counter(ptr, p, t, chunk))
            .load(core::sync::atomic::Ordering::Relaxed)
    } else {
        0
    }
}

/// A merge block of the pipelined kernel's grid (`RpaParams::merge_blocks`): block (row `t`,
/// head chunk, `num_splits + j`) merges the partials of the chunk's query head `j` (if the chunk
/// has it) into the output, as a merge kernel's block does, once the chunk's split blocks have
/// all counted in ([`count_split_in`]). A split call is then one launch, and its merge is spread
/// over a block per (row, query head) as the merge kernel's; the last-block merge it replaced
/// had one per chunk, after a longer chain (benchmarks/NOTES.md "v15", "v27"). On an H200 it
/// costs ~0.65 µs more device time than the merge kernel on the single-row split cells (the
/// poll's chain is longer than the programmatic launch's wait for the grid), so the host takes
/// it where the launch it saves is what the call waits for: short calls enqueued outside stream
/// capture by default, every split call with `XGK_RPA_MERGE_MODE=3` ("v28").
///
/// Thread 0 waits until the chunk's counter carries the tag and every split's count
/// ([`gpu_scope::wait_until_u64`]: the partials, stored before each split's count, are seen after
/// it); after the merge it counts the merge block in on
/// top, and the last of the `merge_blocks` counts leaves the word at 0 under the tag. Every block
/// of a chunk counts in, with or without a head to merge.
///
/// No deadlock: blocks are dispatched in grid order (the merge slices last), so every split
/// block has its multiprocessor before a merge block waits for it.
///
/// # Safety
/// Every thread of a block whose z index is at least `num_splits` calls it, after the grid
/// dependency wait; the workspace holds the partials and the counters after the log-sum-exps
/// ([`split_counters_offset`]); the dynamic shared memory holds [`rpa_combine_shared_bytes`].
#[inline(always)]
pub(crate) unsafe fn merge_block<Q: Element, KV>(ptr: &RpaPointers<Q, KV>, p: &RpaParams, heads_per_chunk: u32) {
    let (t, chunk, splits) = (block_idx_x(), block_idx_y(), p.num_splits);
    let counter = split_counter(ptr, p, t, chunk);
    if thread_idx_x() == 0 {
        gpu_scope::wait_until_u64(counter, |w| is_tagged(w, p.launch_tag) && w & SPLIT_COUNT >= splits as u64);
    }
    sync_threads();
    let heads = BlockHeads::of(p, heads_per_chunk, WholeBlock);
    let j = (block_idx_z() - splits) as usize;
    if j < heads.hc {
        let at = MergeRow::of(p, t as usize, heads.h0 as usize + j);
        if splits <= LOOP_MERGE_MAX_SPLITS {
            merge_loop(ptr.part_o, ptr.part_lse, ptr.out, splits, &at);
        } else {
            merge_groups(ptr.part_o, ptr.part_lse, ptr.out, splits, &at);
        }
    }
    // Counted in after the merge, off its path (benchmarks/NOTES.md "v27.2"): the word is free for
    // the next launch once every merge block has passed its wait.
    if thread_idx_x() == 0
        && count_split_in(counter, launch_tagged_word(p.launch_tag, 0), p.launch_tag)
            == (splits + p.merge_blocks) as u64
    {
        reset_split_counter(counter, p.launch_tag);
    }
}

/// Merges the `num_splits` partial outputs of one (row, query head), as [`rpa_combine`] does, for
/// many splits (the host takes it above `LOOP_MERGE_MAX_SPLITS`).
///
/// Latency-bound (a few KiB per row), so every load is in flight at once: the block's threads
/// form groups of `head_dim / 4`, each group a share of the splits, each thread 16 bytes of a
/// partial row and the split's log-sum-exp per split, [`MERGE_LOADS_IN_FLIGHT`] splits loaded
/// before any is added; each group keeps an online softmax merge (running maximum, weight sum,
/// sums), and the groups' states meet in shared memory after one barrier. One L2 round trip
/// for up to eight splits per group. On an H200 (benchmarks/NOTES.md "v14") it merged 47 splits
/// (1 x 32k) in 4.5 µs where the loop took 7.3, and ran 1 x 8k 1.5 µs faster; but with 8 to 16
/// splits the loop kernel's calls were 0.4-0.6 µs shorter (its fixed cost is lower; the
/// shared-memory carveout was measured not to be why).
///
/// # Safety
/// As the merge kernel that calls it (`merge_kernels`' `# Safety`), with
/// [`rpa_combine_shared_bytes`] of dynamic shared memory.
#[inline(always)]
unsafe fn rpa_combine_groups<Q: Element>(part_o: *const f32, part_lse: *const f32, out: *mut Q, p: RpaParams) {
    merge_groups(part_o, part_lse, out, p.num_splits, &merge_row(&p))
}

/// [`rpa_combine_groups`]'s merge of row `at` (a merge kernel's block, or a merge block of the
/// pipelined kernel).
///
/// # Safety
/// `splits` partials and log-sum-exps of `at`'s shape, the partials 16-byte aligned; `out` shaped
/// like q; [`rpa_combine_shared_bytes`] of dynamic shared memory; every thread of a 128-thread
/// block calls it.
#[inline(always)]
unsafe fn merge_groups<Q: Element>(part_o: *const f32, part_lse: *const f32, out: *mut Q, splits: u32, at: &MergeRow) {
    let (row, d) = (at.row, at.d);
    let splits = splits as usize;
    let tid = thread_idx_x() as usize;
    let lanes = d / MERGE_VECTOR;
    let groups = (RPA_THREADS as usize / lanes).min(MAX_MERGE_GROUPS);
    let (group, part) = (tid / lanes, tid % lanes);
    let states = dynamic_shared_mem::<f32>();
    let sums = states.add(2 * MAX_MERGE_GROUPS);

    if group < groups {
        let mut c = ColumnMerge::EMPTY;
        c.add_splits::<MERGE_LOADS_IN_FLIGHT>(part_o, part_lse, at, part, (group, groups, splits));
        if part == 0 {
            *states.add(2 * group) = c.m;
            *states.add(2 * group + 1) = c.wsum;
        }
        store_vec(sums.add(group * d + part * MERGE_VECTOR), c.acc);
    }
    sync_threads();

    let mut m_all = f32::NEG_INFINITY;
    for g in 0..groups {
        m_all = max_f32(m_all, *states.add(2 * g));
    }
    let mut dim = tid;
    while dim < d {
        let (mut o, mut wsum) = (0.0f32, 0.0f32);
        if m_all != f32::NEG_INFINITY {
            for g in 0..groups {
                let m = *states.add(2 * g);
                if m != f32::NEG_INFINITY {
                    let scale = exp2_approx((m - m_all) * LOG2_E);
                    o += scale * *sums.add(g * d + dim);
                    wsum += scale * *states.add(2 * g + 1);
                }
            }
        }
        *out.add(row * d + dim) = Q::from_f32(if wsum > 0.0 { o / wsum } else { 0.0 });
        dim += RPA_THREADS as usize;
    }
}

/// Merges the `num_splits` partial outputs of one (row, query head): softmax-weighted by their
/// log-sum-exp, one output element per thread, a loop over the splits. Rows where every split
/// saw no key are written as zeros. The host takes it up to `LOOP_MERGE_MAX_SPLITS` splits, and
/// [`rpa_combine_groups`] above.
///
/// # Safety
/// As the merge kernel that calls it (`merge_kernels`' `# Safety`).
#[inline(always)]
unsafe fn rpa_combine<Q: Element>(part_o: *const f32, part_lse: *const f32, out: *mut Q, p: RpaParams) {
    merge_loop(part_o, part_lse, out, p.num_splits, &merge_row(&p))
}

/// [`rpa_combine`]'s merge of row `at` (a merge kernel's block, or a merge block of the
/// pipelined kernel).
///
/// # Safety
/// `splits` partials and log-sum-exps of `at`'s shape; `out` shaped like q; every thread of a
/// 128-thread block calls it.
#[inline(always)]
unsafe fn merge_loop<Q: Element>(part_o: *const f32, part_lse: *const f32, out: *mut Q, splits: u32, at: &MergeRow) {
    let MergeRow { row, rows_per_split, d } = *at;
    let mut m_all = f32::NEG_INFINITY;
    for s in 0..splits as usize {
        m_all = max_f32(m_all, *part_lse.add(s * rows_per_split + row));
    }
    let mut dim = thread_idx_x() as usize;
    while dim < d {
        let mut merge = SplitMerge::new(m_all);
        if merge.any() {
            for s in 0..splits as usize {
                let lse = *part_lse.add(s * rows_per_split + row);
                // A split that saw no key may have left its partial unwritten: read only those
                // that weigh.
                if lse != f32::NEG_INFINITY {
                    merge.add(lse, *part_o.add((s * rows_per_split + row) * d + dim));
                }
            }
        }
        *out.add(row * d + dim) = Q::from_f32(merge.value());
        dim += RPA_THREADS as usize;
    }
}

/// Declares the split merge kernels: `name: q type => merge function`.
macro_rules! merge_kernels {
    ($( $name:ident: $q:ty => $merge:ident; )*) => {$(
        /// Merges split partials into the output (see the merge function it calls).
        ///
        /// # Safety
        /// Grid `(max_tokens, num_q_heads)`, 128 threads, the dynamic shared memory the merge
        /// needs ([`rpa_combine_shared_bytes`] for `rpa_combine_groups`, none for `rpa_combine`);
        /// `part_o`/`part_lse` written by the attention kernel of the same launch with the same
        /// `params` (`part_o` 16-byte aligned); `out` shaped like q.
        #[kernel]
        pub unsafe fn $name(part_o: *const f32, part_lse: *const f32, out: *mut $q, params: RpaParams) {
            $merge::<$q>(part_o, part_lse, out, params)
        }
    )*};
}

merge_kernels! {
    rpa_combine_f32: f32 => rpa_combine;
    rpa_combine_f16: f16 => rpa_combine;
    rpa_combine_bf16: Bf16 => rpa_combine;
    rpa_combine_groups_f32: f32 => rpa_combine_groups;
    rpa_combine_groups_f16: f16 => rpa_combine_groups;
    rpa_combine_groups_bf16: Bf16 => rpa_combine_groups;
}
