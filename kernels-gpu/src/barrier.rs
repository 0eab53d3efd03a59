//! Barriers beyond `bar.sync` of the whole block, through inline PTX: shared-memory *mbarriers*
//! (sm_80+; the producer/consumer handshakes of a warp-specialized pipeline) and *named* barriers
//! (a subset of the block's warps, such as one warpgroup, synchronizing among themselves).
//!
//! An mbarrier is a 64-bit word in shared memory that counts arrivals. It is initialized with the
//! number of arrivals that complete a *phase*; when that many have arrived, the phase completes
//! and the next one begins with the count restored. Waiters name the phase they wait for by its
//! parity (phase `k` has parity `k & 1`): [`wait_parity`] returns once the phase of that parity has
//! completed. A producer that fills a ring of stages waits on each stage's *empty* barrier with the
//! parity of the round before (the first wait passes at once: the barrier counts as having
//! completed the phase before phase 0) and consumers on its *full* barrier with the round's
//! parity. Arrivals release and waits acquire (PTX's defaults, `.release.cta` / `.acquire.cta`), so
//! what a thread wrote before arriving is visible to a thread whose wait the phase completed.

/// Initializes the mbarrier at shared address `bar` to complete a phase after `count` arrivals.
///
/// # Safety
/// `bar` must be an 8-byte aligned shared-memory address of the block; no thread may use the
/// barrier until a block barrier (`bar.sync`) after the initialization.
#[inline(always)]
pub unsafe fn init(bar: u32, count: u32) {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!("mbarrier.init.shared::cta.b64 [{bar}], {count};", bar = in(reg32) bar, count = in(reg32) count,
        options(nostack));
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (bar, count);
        crate::gpu_only!("barrier::init")
    }
}

/// One arrival on the mbarrier at `bar` (release: this thread's earlier writes are visible to the
/// threads whose wait the phase completes).
///
/// # Safety
/// `bar` must be an initialized mbarrier whose current phase still expects an arrival.
#[inline(always)]
pub unsafe fn arrive(bar: u32) {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!("mbarrier.arrive.shared::cta.b64 _, [{bar}];", bar = in(reg32) bar, options(nostack));
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = bar;
        crate::gpu_only!("barrier::arrive")
    }
}

/// One arrival on the mbarrier at `bar` that also announces `bytes` more bytes for its current
/// phase (`mbarrier.arrive.expect_tx`): the phase completes once its arrivals are in *and* that
/// many bytes of asynchronous copies ([`crate::tma::load_3d`]) have completed on it.
///
/// # Safety
/// As [`arrive`]; the copies that complete the bytes must be issued for this phase.
#[inline(always)]
pub unsafe fn arrive_expect_tx(bar: u32, bytes: u32) {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!("mbarrier.arrive.expect_tx.shared::cta.b64 _, [{bar}], {bytes};", bar = in(reg32) bar,
        bytes = in(reg32) bytes, options(nostack));
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (bar, bytes);
        crate::gpu_only!("barrier::arrive_expect_tx")
    }
}

/// One arrival on the mbarrier at `bar` once every `cp.async` this thread issued before has landed
/// (`cp.async.mbarrier.arrive.noinc`: the arrival counts against the initialized count, so a
/// consumer whose wait completes sees the copied bytes).
///
/// # Safety
/// As [`arrive`].
#[inline(always)]
pub unsafe fn arrive_after_copies(bar: u32) {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [{bar}];", bar = in(reg32) bar, options(nostack));
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = bar;
        crate::gpu_only!("barrier::arrive_after_copies")
    }
}

/// Waits until the phase of parity `parity` (0 or 1) of the mbarrier at `bar` has completed
/// (acquire: the writes released by its arrivals are visible afterwards).
///
/// # Safety
/// `bar` must be an initialized mbarrier; the phase must complete eventually, or the thread hangs.
#[inline(always)]
pub unsafe fn wait_parity(bar: u32, parity: u32) {
    // `try_wait` suspends the thread for a while (hardware-chosen) before it gives up; the loop
    // retries until the phase completes.
    while !try_wait_parity(bar, parity) {}
}

/// Whether the phase of parity `parity` of the mbarrier at `bar` has completed, after waiting a
/// hardware-chosen time for it (`mbarrier.try_wait.parity`; acquire when it returns true).
///
/// # Safety
/// `bar` must be an initialized mbarrier.
#[inline(always)]
pub unsafe fn try_wait_parity(bar: u32, parity: u32) -> bool {
    #[cfg(target_arch = "nvptx64")]
    {
        let done: u32;
        core::arch::asm!(
            "{{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [{bar}], {parity};\nselp.u32 {done}, 1, 0, p;\n}}",
            bar = in(reg32) bar, parity = in(reg32) parity, done = out(reg32) done, options(nostack));
        done != 0
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (bar, parity);
        crate::gpu_only!("barrier::try_wait_parity")
    }
}

/// Synchronizes the `threads` threads (a multiple of 32) that execute `bar.sync id` with the same
/// `id`: a barrier for a subset of the block's warps, such as one warpgroup. Id 0 is the block
/// barrier of [`crate::thread::sync_threads`]; ids go up to 15.
///
/// # Safety
/// Exactly `threads` threads, whole warps, must reach it with the same id and count.
#[inline(always)]
pub unsafe fn sync_named<const ID: u32>(threads: u32) {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!("bar.sync {id}, {n};", id = const ID, n = in(reg32) threads, options(nostack));
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = threads;
        crate::gpu_only!("barrier::sync_named")
    }
}

/// [`sync_named`] with the barrier id in a register: one `bar.sync` instruction for warps that
/// pick different barriers (say, one per pair of warps), where a branch over const ids would
/// put each warp's barrier in a different instruction of a divergent region.
///
/// # Safety
/// As [`sync_named`]: exactly `threads` threads, whole warps, must reach it with the same `id`
/// (at most 15) and count, and `id` must not be a barrier other threads use differently.
#[inline(always)]
pub unsafe fn sync_named_id(id: u32, threads: u32) {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!("bar.sync {id}, {n};", id = in(reg32) id, n = in(reg32) threads, options(nostack));
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (id, threads);
        crate::gpu_only!("barrier::sync_named_id")
    }
}

/// [`sync_named_id`] that also ORs a predicate over the `threads` threads (`bar.red.or.pred`):
/// every one of them gets whether any passed `pred` true. A block barrier with a vote for a
/// subset of the block's warps (`__syncthreads_or` of a group).
///
/// # Safety
/// As [`sync_named_id`].
#[inline(always)]
pub unsafe fn sync_named_any(id: u32, threads: u32, pred: bool) -> bool {
    #[cfg(target_arch = "nvptx64")]
    {
        let any: u32;
        core::arch::asm!(
            "{{\n.reg .pred pin, pout;\nsetp.ne.u32 pin, {v}, 0;\nbar.red.or.pred pout, {id}, {n}, pin;\nselp.u32 {any}, 1, 0, pout;\n}}",
            v = in(reg32) pred as u32, id = in(reg32) id, n = in(reg32) threads, any = out(reg32) any,
            options(nostack));
        any != 0
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (id, threads, pred);
        crate::gpu_only!("barrier::sync_named_any")
    }
}

/// Arrives at named barrier `ID` for `threads` threads without waiting (`bar.arrive`): the
/// threads that `bar.sync` on it ([`sync_named`]) proceed once `threads` have arrived or synced.
/// A producer-consumer handshake between warps (one side arrives, the other syncs).
///
/// # Safety
/// As [`sync_named`]; the barrier's syncing side must count this thread's warp in `threads`.
#[inline(always)]
pub unsafe fn arrive_named<const ID: u32>(threads: u32) {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!("bar.arrive {id}, {n};", id = const ID, n = in(reg32) threads, options(nostack));
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = threads;
        crate::gpu_only!("barrier::arrive_named")
    }
}

/// Every named barrier id (the `id` of `bar.sync` / `bar.arrive`, 0-15) the kernels use, in one
/// table. Ids are a thread block's own, so only the roles that can share a block must not
/// overlap; the assertions below check that at compile time.
pub mod ids {
    use core::ops::Range;

    /// Id 0: the whole block (`bar.sync 0`, [`crate::thread::sync_threads`]; a block-wide vote).
    pub const BLOCK: Range<u32> = 0..1;
    /// The pipelined decode kernel at head_dim 256: one per pair of warps sharing a 16-key group
    /// (`1 + key group`).
    pub const DECODE_KEY_PAIRS: Range<u32> = 1..3;
    /// The warp-specialized prefill's consumers (up to three) taking turns to issue their
    /// products (FlashAttention 3's ping-pong): consumer `c` waits on `3 + c`, the consumer
    /// before it in the round arrives on it.
    pub const WS_PINGPONG: Range<u32> = 3..6;
    /// The warp-specialized prefill's epilogue: consumer `c`'s warpgroup alone, `6 + c`.
    pub const WS_EPILOGUE: Range<u32> = 6..9;
    /// The warp-specialized prefill with fp8 KV (up to three consumers): consumer `c`'s warpgroup
    /// alone, once its warps have rewritten their rows of Q as f16 operands, `9 + c`.
    pub const WS_Q_CONVERT: Range<u32> = 9..12;
    /// A mixed batch's decode blocks: each of the block's three 128-thread groups has its own
    /// (`4 + group`). A mix block runs decode groups or the tile role, never both.
    pub const MIX_DECODE_GROUPS: Range<u32> = 4..7;
    /// The device planner's threads (`attention::planner::plan_items`): a planning kernel's
    /// block, or a warp-specialized (or mix tile) block's 0 but its last warp, which stores the
    /// call's tensor maps meanwhile.
    pub const PLAN: Range<u32> = 12..13;
    /// The `wgmma` queue probe (`kernels::hgmma_queue_probe`): its second warpgroup waits until
    /// the first's issue has returned.
    pub const PROBE_TURN: Range<u32> = 13..14;

    /// Whether `set` holds an id for each of `users` (a block's consumers, say): two users of one
    /// id with a count of one user's threads would complete the barrier with a mix of both.
    pub const fn one_each(set: Range<u32>, users: u32) -> bool {
        set.end - set.start >= users
    }

    const fn disjoint(sets: &[Range<u32>]) -> bool {
        let mut i = 0;
        while i < sets.len() {
            if sets[i].end > 16 || sets[i].start >= sets[i].end {
                return false;
            }
            let mut j = i + 1;
            while j < sets.len() {
                if sets[i].start < sets[j].end && sets[j].start < sets[i].end {
                    return false;
                }
                j += 1;
            }
            i += 1;
        }
        true
    }

    // The roles that share a block.
    const _: () =
        assert!(disjoint(&[BLOCK, WS_PINGPONG, WS_EPILOGUE, WS_Q_CONVERT, PLAN]), "a warp-specialized prefill block");
    const _: () = assert!(disjoint(&[BLOCK, DECODE_KEY_PAIRS]), "a pipelined decode block");
    const _: () = assert!(disjoint(&[BLOCK, DECODE_KEY_PAIRS, MIX_DECODE_GROUPS]), "a mix's decode block");
    const _: () = assert!(disjoint(&[BLOCK, PROBE_TURN]), "the wgmma queue probe's block");
}
