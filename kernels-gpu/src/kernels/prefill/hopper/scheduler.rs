//! The tile scheduler: which block runs which (item, KV head) pair, and when. The grid
//! ([`TileBlocks`]: a whole grid, or a mix's tile blocks) and its size ([`ws_grid_blocks`]), the
//! walk over pairs ([`for_each_pair`]: static snake order or a dynamic counter), and the plan's
//! hand-off ([`plan_or_wait`]: block 0 plans while the others wait, or all wait for a published
//! plan).

use super::layout::SharedLayout;
use super::trace::{self, Point};
use super::WARPGROUP;
use crate::attention::planner::{
    inputs_ready_word, plan_items, PlanView, TiledPointers, PLAN_BLOCKS_DONE_WORD, PLAN_FALLBACK_WORD,
    PLAN_INPUTS_READY_WORD, PLAN_STATE_WORD, PLAN_WORK_COUNTER_WORD,
};
use crate::attention::{launch_tagged_word, RpaParams};
use crate::gpu_scope;
use crate::thread::{block_idx_x, grid_dim_x, sync_threads, thread_idx_x};
use crate::tma;
use crate::wgmma;
use core::sync::atomic::AtomicU64;
use core::sync::atomic::{AtomicU32, Ordering};

/// The plan state word's value once the plan is published under `tag` ([`plan_or_wait`]): ready
/// (1) under the tag ([`launch_tagged_word`]); any other value (the workspace's earlier contents,
/// 0 as the last block leaves it) means not yet.
#[inline(always)]
pub(super) const fn plan_ready_word(tag: u32) -> u64 {
    launch_tagged_word(tag, 1)
}

/// Publishes the plan at `plan` under a launch's tag ([`plan_ready_word`]): zeroes the
/// count of blocks done, then, after a GPU-scope fence (the plan's writes before it),
/// stores the plan's state word (word 32: a 128-byte line apart from the header's first words,
/// shared with the count of blocks done and the first items, which the planning kernel writes
/// while the tile kernel's blocks may poll: a cost in speed only).
///
/// # Safety
/// One thread calls it, after every write of the plan is ordered before it (a block
/// barrier); `plan` holds the plan header.
#[inline(always)]
pub(super) unsafe fn publish_plan(plan: *mut u32, tag: u32) {
    *plan.add(PLAN_BLOCKS_DONE_WORD) = 0;
    gpu_scope::publish_u64(plan.add(PLAN_STATE_WORD) as *mut u64, plan_ready_word(tag));
}

/// A tile block's place among the tile blocks: the grid's own block index and size
/// ([`WholeGrid`]), or in a mix's one launch those of the grid's tile blocks alone ([`TileGrid`]).
pub(crate) trait TileBlocks: Copy {
    /// Whether the tile blocks share the grid with a mix's decode blocks (`kernels::mix`,
    /// `RpaParams::decode_apart` 3): a constant, so the whole-grid kernels compile as before.
    const MIX: bool;
    fn block(self) -> u32;
    fn blocks(self) -> u32;
}

/// The whole grid's blocks are tile blocks (`rpa_tile_ws_*`).
#[derive(Clone, Copy)]
pub(crate) struct WholeGrid;

impl TileBlocks for WholeGrid {
    const MIX: bool = false;
    #[inline(always)]
    fn block(self) -> u32 {
        block_idx_x()
    }
    #[inline(always)]
    fn blocks(self) -> u32 {
        grid_dim_x()
    }
}

/// The tile blocks of a mix's one launch (`kernels::mix`): the grid's blocks after its
/// first `decode_blocks` (a kernel parameter: the producer, on 48 registers, keeps no index of
/// its own but the hardware's and the constant bank's, as with [`WholeGrid`]).
#[derive(Clone, Copy)]
pub(crate) struct TileGrid {
    pub decode_blocks: u32,
}

impl TileBlocks for TileGrid {
    const MIX: bool = true;
    #[inline(always)]
    fn block(self) -> u32 {
        block_idx_x() - self.decode_blocks
    }
    #[inline(always)]
    fn blocks(self) -> u32 {
        grid_dim_x() - self.decode_blocks
    }
}

/// Makes the call's plan ready for this block where it is published under a
/// tag (a nonzero `RpaParams::launch_tag`): where the kernel plans itself ([`ws_plans_itself`],
/// persistent blocks; `RpaParams::decode_apart` 0, 2 or 3), tile block 0 builds them and every
/// other tile block waits until they are published; with a mixed batch's decode rows apart and
/// one block per pair (`decode_apart` 1), [`rpa_plan_ws`] has built and publishes them and every
/// block waits. With 3 (a mix in one launch, `kernels::mix`) every block of the grid has
/// waited for the kernel before already, the tile blocks are the grid's last and at most one per
/// multiprocessor, and the decode blocks, which never wait, stand down themselves where the plan
/// falls back: no inputs word, no wait here.
/// One launch per prefill call, two per mix, instead of a planning kernel before (a launch is
/// ~2.5 µs of the host's time, benchmarks/NOTES.md "v24"); with decode rows apart, a grid that
/// need not wait for the decode kernel between (see [`rpa_tiled_ws`]).
///
/// Block 0's threads build the plan ([`plan_items`], with the block's dynamic shared memory, not
/// yet in use, for the scan), then thread 0 publishes it ([`publish_plan`]: the workspace may hold
/// anything before); every waiting block's thread 0 polls the state word with acquire loads until it reads
/// the launch's. A block barrier ends it. The waiters need the builder running: where block 0
/// builds, the grid is at most one block per multiprocessor, and a programmatic dependent grid
/// starts only once every block has; the host plans apart for a grid of one block per pair (more
/// blocks than fit, in an order the hardware does not promise). [`count_block_done`] leaves the
/// word at 0 after the grid's last block, for a replay of the launch under the same tag (a
/// captured CUDA graph).
///
/// The grid dependency: with no decode rows apart, every block waits for the kernel before (the
/// plan reads its inputs, and the other blocks' acquire then orders them too). With decode rows
/// apart none waits here (the decode kernel's rows are not this kernel's): with `decode_apart` 2
/// block 0's thread 0 first polls the plan header's inputs word until the decode kernel's block (0,
/// 0, 0) has published it under the tag after its own wait (`publish_inputs_ready`), then frees it
/// for a replay; with 1 the published plan, written after the planning kernel's own wait, orders
/// the inputs. That step relies on the earlier kernels' writes having reached L2 (they have
/// completed) and on acquire-release carrying them from the publishing thread to this grid; PTX
/// promises the wait's visibility to the waiting grid only (benchmarks/NOTES.md "v25", review).
/// Every thread then fences its generic view of global memory before the bulk (async-proxy) loads
/// of Q and K/V (`fence.proxy.async.global`). The decode kernel never reads the plan: where it
/// falls back (a decreasing `cu_q_lens`, every row the plan's), every block waits for the decode
/// grid before it writes. With decode rows apart the waiters are live: this grid starts only once
/// every decode block has (block (0, 0, 0), the inputs' publisher, among them), and with 1 the
/// decode grid only once the planning kernel's one block has, so the publisher is running or done.
///
/// # Safety
/// Every thread of the block calls it once, before anything else uses the block's shared memory
/// or reads the plan; `p.launch_tag` nonzero; where `p.decode_apart` is 0 or 2 every
/// block of the grid resident together once running (with 2 after the decode kernel launched
/// with the same tag and `decode_apart`), with 3 the tile blocks at most one per multiprocessor
/// after blocks that never wait (`kernels::mix`), with 1 [`rpa_plan_ws`] launched before with the same
/// `p`; `ptr.plan` holds [`ws_scratch_bytes`]`(p.plan_capacity)` bytes, 16-byte aligned, that
/// only this grid (and where it publishes, the planning kernel) touches while it runs;
/// `block_threads` the block's threads.
#[inline(always)]
pub(super) unsafe fn plan_or_wait<Q, G: TileBlocks>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    grid: G,
    block_threads: u32,
) {
    let plan = ptr.plan as *mut u32;
    let state = plan.add(PLAN_STATE_WORD) as *mut u64;
    let ready = plan_ready_word(p.launch_tag);
    // 0: a prefill call; 2: a mix whose decode kernel publishes the inputs word; 1: a mix whose
    // planning kernel publishes the plan; 3: a mix in one launch, whose every block has waited
    // for the kernel before (`kernels::mix`).
    let plans_here = p.decode_apart != 1;
    let inputs_word = !G::MIX && p.decode_apart != 0;
    if p.decode_apart == 0 {
        crate::grid_dependency::wait_for_prerequisites();
        if trace::ENABLED && thread_idx_x() == 0 {
            trace::mark(ptr.plan, p.plan_capacity, Point::Prerequisites);
        }
    }
    if plans_here && grid.block() == 0 {
        if inputs_word {
            if thread_idx_x() == 0 {
                // The decode kernel's first block has passed its grid dependency wait: the
                // kernels that write the call's inputs have completed. Then the word is left
                // free for a replay under the same tag (the next writer, that replay's decode
                // kernel, waits for this grid's end first).
                let inputs = plan.add(PLAN_INPUTS_READY_WORD) as *mut u64;
                gpu_scope::wait_for_u64(inputs, inputs_ready_word(p.launch_tag));
                AtomicU64::from_ptr(inputs).store(0, Ordering::Relaxed);
            }
            // The metadata's loads after thread 0's acquire.
            sync_threads();
        }
        plan_items(ptr.cu_q_lens, ptr.num_seqs, plan, *p, block_threads);
        if trace::ENABLED && thread_idx_x() == 0 {
            trace::mark(ptr.plan, p.plan_capacity, Point::PlanItemsDone);
        }
        // The scan's generic writes before the copies (async proxy) into the same shared memory.
        wgmma::fence_proxy_async_shared();
        // Every thread's plan writes before thread 0 publishes them.
        sync_threads();
        if thread_idx_x() == 0 {
            trace::mark(ptr.plan, p.plan_capacity, Point::PlanWritten);
            publish_plan(plan, p.launch_tag);
        }
    } else if thread_idx_x() == 0 {
        gpu_scope::wait_for_u64(state, ready);
    }
    if trace::ENABLED && thread_idx_x() == 0 {
        trace::mark(ptr.plan, p.plan_capacity, Point::PlanReady);
    }
    sync_threads();
    if p.decode_apart != 0 {
        // Q's and K/V's bulk copies (the async proxy) after the acquire above, which no grid
        // dependency wait backs with decode rows apart. (With none apart, every block has
        // waited for the grids that write the inputs, which orders them before any proxy's
        // reads in this grid.)
        tma::fence_proxy_async_global();
    }
    if !G::MIX && p.decode_apart != 0 && *plan.add(PLAN_FALLBACK_WORD) != 0 {
        // A decreasing `cu_q_lens`: the plan's rows are every row, the decode kernel's too, which
        // wrote them as it found them; write them after it. (In one launch the decode blocks
        // stand down instead, `resolve_sequence_block`.)
        crate::grid_dependency::wait_for_prerequisites();
    }
}

/// Counts the block out of the plan once every thread is done with it (a block barrier first);
/// the last of the grid's blocks leaves the plan's state word free ([`plan_or_wait`]). The first
/// consumer's thread 0 counts (the producer runs on few registers).
///
/// # Safety
/// Every thread of the block calls it, after [`plan_or_wait`] and its last read of the plan.
#[inline(always)]
pub(super) unsafe fn count_block_done<Q>(ptr: &TiledPointers<Q>, grid: impl TileBlocks) {
    sync_threads();
    if thread_idx_x() == WARPGROUP {
        let plan = ptr.plan as *mut u32;
        let done = AtomicU32::from_ptr(plan.add(PLAN_BLOCKS_DONE_WORD)).fetch_add(1, Ordering::Relaxed);
        if done + 1 == grid.blocks() {
            AtomicU64::from_ptr(plan.add(PLAN_STATE_WORD) as *mut u64).store(0, Ordering::Relaxed);
        }
    }
}

/// Calls `f(seq, first row, rows, KV head)` for the block's (item, KV head) pairs, every role of
/// the block seeing the same sequence. Pair `w` is item `w / num_kv_heads` ([`PlanView::item`])
/// for KV head `w % num_kv_heads` (heads fastest: the heaviest items first). The block's `n`-th
/// pair: with `p.dynamic_pairs` 0, the snake order (`n G + b` for even n, `n G + G - 1 - b` for
/// odd n, G blocks, b = `blockIdx.x`: persistent blocks' loads even out; a grid of one block per
/// pair takes one each); with 1, the next value of the plan's work counter, fetched by thread 0
/// into the schedule ring (its full barrier releases the slot to every thread, whose arrivals on
/// the empty barrier let thread 0 reuse it), except that outside a mix's one launch a block's
/// first pair is b and the counter's values follow G (no atomic on the way to the first tiles;
/// in a mix's launch the counter's order measured 0.3 % faster: benchmarks/NOTES.md "v38").
/// Block-uniform.
///
/// # Safety
/// As [`PlanView::item`]; every thread of the block calls it (the schedule ring's barriers count
/// them all); the pair indices, with a grid's width of slack, fit in a `u32` (on the host,
/// `ws_work_indices_fit`).
#[inline(always)]
pub(super) unsafe fn for_each_pair<Q, G: TileBlocks>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    smem: SharedLayout,
    grid: G,
    mut f: impl FnMut(u32, u32, u32, u32),
) {
    let plan = PlanView::load(ptr);
    let heads = p.num_kv_heads.max(1);
    let (blocks, block) = (grid.blocks(), grid.block());
    let dynamic = p.dynamic_pairs != 0;
    let mut n = 0u32;
    loop {
        let w = if dynamic {
            let ring = smem.sched_ring();
            let stage = ring.stage(n);
            if thread_idx_x() == 0 {
                ring.acquire(stage);
                // The counter is zeroed with the plan; see above for the first pair.
                let own_first = !G::MIX;
                *smem.sched(stage.index) = if own_first && n == 0 {
                    block
                } else {
                    let counter = AtomicU32::from_ptr(ptr.plan.add(PLAN_WORK_COUNTER_WORD) as *mut u32);
                    let after = if own_first { blocks } else { 0 };
                    after + counter.fetch_add(1, Ordering::Relaxed)
                };
                ring.commit(stage);
            }
            ring.wait(stage);
            let w = *smem.sched(stage.index);
            ring.release(stage);
            if trace::ENABLED && n == 0 && thread_idx_x() == 0 {
                trace::mark(ptr.plan, p.plan_capacity, Point::PairTaken);
            }
            w
        } else {
            n * blocks + if n.is_multiple_of(2) { block } else { blocks - 1 - block }
        };
        let Some((seq, r0, rc)) = plan.item(ptr, p, w / heads) else { break };
        f(seq, r0, rc, w % heads);
        n += 1;
    }
}

/// The grid's width (blocks in its one row) for `pairs` (item, KV head) pairs: one block per
/// pair, or with `persistent` at most one block per multiprocessor (one block fits on each),
/// [`for_each_pair`] walking each block over its share. Persistent blocks need not restart per
/// item (block launch, barrier setup), their producer loads the next item's Q and first tiles
/// under the consumers' last tiles and epilogue, and every multiprocessor works to the end (no
/// tail of a partly filled wave).
pub const fn ws_grid_blocks(pairs: u32, multiprocessors: u32, persistent: bool) -> u32 {
    let blocks = if multiprocessors > 1 { multiprocessors } else { 1 };
    if persistent && pairs > blocks {
        blocks
    } else {
        pairs
    }
}
