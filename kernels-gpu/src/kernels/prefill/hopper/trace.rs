//! A trace of the warp-specialized kernel's start, for builds made to measure it (`XGK_TRACE=1`
//! at build time: the root build.rs then compiles the images with `--cfg xgk_trace`). In every
//! other build [`mark`] compiles to nothing, so the shipped images do not change.
//!
//! Where a call's time goes before its first tiles is a chain of dependent steps (the grid
//! dependency, block 0's plan, the other blocks' wait for it, the item, its rows, the first
//! copies, the consumers' first waits): a profiler shows the kernel's total, not the chain.
//! Each [`Point`] is marked once per block, by one thread, as a pair of 64-bit words: the
//! GPU-wide `%globaltimer` (nanoseconds, comparable across blocks) and the multiprocessor's
//! `%clock64` (cycles, finer, comparable within a block). The pairs follow the workspace the
//! host sized for the call ([`super::ws_scratch_bytes`]) from its next 128-byte boundary,
//! [`POINTS`] pairs per block in block order: the caller passes a workspace of that many more
//! bytes (`benchmarks/start_trace.py`) and reads them back.
//!
//! The consumers' main loop is traced too ([`mark_tile`]): the first [`TRACED_TILES`] tiles of a
//! block, per consumer, one `%clock64` word per [`TileEvent`] (the turn, the products' issue and
//! completions, the softmax), after the blocks' points: where a tile's time goes between the
//! two consumers and the tensor cores, which a profiler's per-instruction samples do not order.

/// The marked steps, in the order they happen in a block.
#[derive(Clone, Copy)]
pub(crate) enum Point {
    /// The block's thread 0 is running.
    Entry = 0,
    /// Thread 0 has passed the grid dependency wait (the inputs are written).
    Prerequisites = 1,
    /// Block 0: every thread's plan writes are done (before the publication).
    PlanWritten = 2,
    /// Thread 0 has published the plan (block 0) or read it published (the others).
    PlanReady = 3,
    /// The K copier's lane 0 has its first pair (the item read from the plan).
    FirstPair = 4,
    /// The K copier's lane 0 has the first item's rows and keys (`ItemRows::load`).
    ItemRows = 5,
    /// The K copier's lane 0 has issued the first tile's copies.
    FirstKIssued = 6,
    /// The Q loader has issued the first item's Q.
    FirstQIssued = 7,
    /// Consumer 0's thread 0 has the first item's Q in shared memory.
    FirstQReady = 8,
    /// Consumer 0's thread 0 has the first K tile in shared memory.
    FirstKReady = 9,
    /// Consumer 0's thread 0 has the first tile's S.
    FirstS = 10,
    /// Consumer 0's thread 0 has finished the first item (its output issued).
    FirstItemDone = 11,
    /// Consumer 0's thread 0 has finished its last item.
    ConsumerDone = 12,
    /// The K copier's lane 0 has released its registers (the roles split).
    RolesSplit = 13,
    /// Block 0's thread 0 is done with its part of the plan's items (before the block barrier).
    PlanItemsDone = 14,
    /// Thread 0 (the K copier's lane 0) has its first pair from the schedule ring.
    PairTaken = 15,
}

/// A consumer's steps through one tile of its main loop ([`mark_tile`]).
#[derive(Clone, Copy)]
pub(crate) enum TileEvent {
    /// The consumer's turn has begun (it may issue its products).
    TurnBegun = 0,
    /// The tile's S and the previous tile's P V are issued, and the turn has ended.
    Issued = 1,
    /// The tile's S has completed.
    SReady = 2,
    /// The tile's softmax is done.
    SoftmaxDone = 3,
    /// The previous tile's P V has completed.
    PvDone = 4,
    /// An item's first tile (the consumer's peeled one): the consumer has its pair (the previous
    /// item's last P V and stores done).
    ItemEntered = 5,
    /// An item's first tile: the consumer has the item's rows and its tiles' range.
    RowsReady = 6,
    /// An item's first tile: the item's Q is ready (with fp8 KV, converted).
    QReady = 7,
    /// An item's first tile: its K is in the K ring.
    KReady = 8,
    /// The K copier's lane 0 has issued the tile's K copies (marked in consumer 0's record).
    KIssued = 9,
    /// fp8 KV: converter 0 has committed the tile's widened K (marked in consumer 0's record).
    KConverted = 10,
    /// An item's last tile: the consumer's last P V has completed.
    LastPvDone = 11,
    /// An item's last tile: the consumer's rows of the output are written (or their bulk stores
    /// issued).
    StoresDone = 12,
}

/// Words per traced tile and consumer (one per [`TileEvent`]; `benchmarks/start_trace.py` reads
/// them with the same count).
pub const TILE_EVENTS: u32 = 13;
/// The block's first tiles traced, per consumer.
pub const TRACED_TILES: u32 = 64;
/// Consumers a block has room for (three at head_dim 64).
pub const TRACED_CONSUMERS: u32 = 3;

/// Whether this build records the trace: where false (every build but a trace build), callers'
/// conditions fold away with their marks, and the images are those of a build without them.
pub(crate) const ENABLED: bool = cfg!(all(target_arch = "nvptx64", xgk_trace));

/// Pairs of words per block (room for every [`Point`]).
pub const POINTS: u32 = 16;

/// Bytes of trace after the workspace for `blocks` blocks.
pub const fn trace_bytes(blocks: u32) -> u64 {
    blocks as u64 * POINTS as u64 * 16
}

/// Blocks whose points the tile trace follows: it starts after [`trace_bytes`] of this many
/// blocks, whatever the grid, so that a reader finds it without the launch's grid size.
pub const TILE_TRACE_AFTER_BLOCKS: u32 = 1024;
/// Blocks whose tiles are traced (the grid's first).
pub const TILE_TRACED_BLOCKS: u32 = 256;

/// Where the trace starts: after the call's workspace of [`super::ws_scratch_bytes`]`(plan_capacity)`
/// bytes at `plan`, from its next 128-byte boundary.
#[cfg(all(target_arch = "nvptx64", xgk_trace))]
#[inline(always)]
fn trace_base(plan: *const u32, plan_capacity: u32) -> u64 {
    (plan as u64 + super::ws_scratch_bytes(plan_capacity as u64)).next_multiple_of(128)
}

/// Marks `event` of the block's tile `tile` (its tile counter) for consumer `consumer` (one thread
/// calls it): the `%clock64` word. Only the first [`TILE_TRACED_BLOCKS`] blocks' first
/// [`TRACED_TILES`] tiles are kept (callers need not check). A no-op unless built with
/// `--cfg xgk_trace`.
///
/// # Safety
/// As [`mark`], with the points' room for [`TILE_TRACE_AFTER_BLOCKS`] blocks and, after them,
/// [`TRACED_CONSUMERS`] x [`TRACED_TILES`] x [`TILE_EVENTS`] words for each of the first
/// [`TILE_TRACED_BLOCKS`] blocks.
#[inline(always)]
pub(crate) unsafe fn mark_tile(plan: *const u32, plan_capacity: u32, consumer: u32, tile: u32, event: TileEvent) {
    mark_tile_at(plan, plan_capacity, consumer, tile, event, now());
}

/// The `%clock64` word a later [`mark_tile_at`] records (0 unless built with `--cfg xgk_trace`).
#[inline(always)]
pub(crate) fn now() -> u64 {
    #[cfg(all(target_arch = "nvptx64", xgk_trace))]
    return crate::thread::clock64();
    #[cfg(not(all(target_arch = "nvptx64", xgk_trace)))]
    0
}

/// As [`mark_tile`], with the `%clock64` word `cycles` read earlier ([`now`]): for steps whose
/// tile is known only later.
///
/// # Safety
/// As [`mark_tile`].
#[inline(always)]
pub(crate) unsafe fn mark_tile_at(
    plan: *const u32,
    plan_capacity: u32,
    consumer: u32,
    tile: u32,
    event: TileEvent,
    cycles: u64,
) {
    #[cfg(all(target_arch = "nvptx64", xgk_trace))]
    // SAFETY: the store lands in the caller's trace (see above).
    unsafe {
        if crate::thread::block_idx_x() >= TILE_TRACED_BLOCKS || tile >= TRACED_TILES {
            return;
        }
        let points = trace_base(plan, plan_capacity) + trace_bytes(TILE_TRACE_AFTER_BLOCKS);
        let slot = ((crate::thread::block_idx_x() * TRACED_CONSUMERS + consumer) * TRACED_TILES + tile) * TILE_EVENTS
            + event as u32;
        (points as *mut u64).add(slot as usize).write_volatile(cycles);
    }
    #[cfg(not(all(target_arch = "nvptx64", xgk_trace)))]
    let _ = (plan, plan_capacity, consumer, tile, event, cycles);
}

/// Marks `point` for this block (one thread calls it, once per point): a no-op unless built with
/// `--cfg xgk_trace`.
///
/// # Safety
/// In a trace build, `plan` is the call's workspace of [`super::ws_scratch_bytes`]`(plan_capacity)`
/// bytes followed, from the next 128-byte boundary, by [`trace_bytes`] for the grid's blocks.
#[inline(always)]
pub(crate) unsafe fn mark(plan: *const u32, plan_capacity: u32, point: Point) {
    #[cfg(all(target_arch = "nvptx64", xgk_trace))]
    // SAFETY: reading two special registers; the store lands in the caller's trace (see above).
    unsafe {
        let ns: u64;
        core::arch::asm!("mov.u64 {}, %globaltimer;", out(reg64) ns, options(nostack, nomem));
        let cycles = crate::thread::clock64();
        let base = trace_base(plan, plan_capacity) as *mut u64;
        let slot = base.add(2 * (crate::thread::block_idx_x() * POINTS + point as u32) as usize);
        slot.write_volatile(ns);
        slot.add(1).write_volatile(cycles);
    }
    #[cfg(not(all(target_arch = "nvptx64", xgk_trace)))]
    let _ = (plan, plan_capacity, point);
}
