//! Ragged paged attention over 128-row query tiles with warp specialization (sm_90a image): the
//! prefill kernel on Hopper.
//!
//! The work items are the tiled kernel's ([`super::paged_attention_tiled::rpa_plan`], with
//! [`ws_tile_rows`] query rows per tile item: 128 M rows). A block of [`WS_THREADS`] threads is
//! three warpgroups with different jobs and register budgets ([`crate::warpgroup`]):
//! - warpgroup 0, the *producer*, copies K/V tiles of 64 keys into shared-memory rings with
//!   `cp.async` (warps 0-1 the K rows, one token per thread; warps 2-3 the V rows) and signals
//!   each stage's *full* mbarrier when its copies land; it never touches the tensor cores;
//! - warpgroups 1 and 2, the *consumers*, own 64 M rows each: per tile S = Q Kᵀ (`wgmma`, Q and K
//!   from shared memory), the mask and online softmax, and O += P V (`wgmma`, P from registers),
//!   releasing each stage on its *empty* mbarrier as soon as they are done reading it.
//!
//! Against the one-warpgroup tile kernel (`rpa_tile_wg_*`), the consumers issue no copies, load no
//! page-table entries and wait at no block barrier: their instruction stream is the attention math
//! (benchmarks/NOTES.md "v4b": copies and page lookups were about a fifth of it), the producer runs
//! up to [`WS_STAGES`] tiles ahead, and each K/V tile in shared memory serves 128 M rows instead
//! of 64. The two consumers are not synchronized with each other, so one's softmax overlaps the
//! other's matrix products (FlashAttention 3's inter-warpgroup overlap, left to the schedulers).
//!
//! Key presence (a key on a page outside the pool counts as absent) travels with the K tile: the
//! K producers write a 64-bit mask per stage, released by the stage's full barrier.

use crate::attention::{page_is_valid, RpaParams};
use crate::barrier;
use crate::copy::{commit_group, cp_async_16, wait_all, wait_group, CopyHint};
use crate::kernel;
use crate::math::FastDiv;
use crate::mma::MmaElement;
use crate::num::Bf16;
use crate::shared::{dynamic_shared_mem, shared_address};
use crate::thread::{block_idx_y, sync_threads, thread_idx_x};
use crate::warp::{lane_id, warp_ballot, WARP_SIZE};
use crate::{warpgroup, wgmma};

use super::paged_attention_mma::{online_softmax_weights_f32, pack_weights};
use super::paged_attention_tiled::{
    for_each_item, keep_o, mask_logits, store_rows, wgmma_pv_issue, zero_item_rows, ItemRows, LogitScale,
    TiledPointers, NO_SEQUENCE, TILE_KEYS,
};
use super::unroll;

/// M rows (query row × query head pairs) of a tile item: 64 per consumer warpgroup.
pub const WS_TILE_M: u32 = 128;
/// Threads per block: the producer warpgroup and two consumer warpgroups.
pub const WS_THREADS: u32 = 384;
/// Stages of each of the K and V rings.
pub const WS_STAGES: u32 = 4;
/// Threads of a warpgroup.
const WARPGROUP: u32 = 128;
/// M rows of one consumer warpgroup.
const CONSUMER_M: u32 = 64;
/// Registers per thread of the producer and of the consumers: the block's pool (at most 168 per
/// thread for 384 threads) split 40 / 232 (128 x 40 + 256 x 232 = 384 x 168).
const PRODUCER_REGISTERS: u32 = 40;
const CONSUMER_REGISTERS: u32 = 232;
/// Arrivals that fill a stage: one per copying thread (64 for K, 64 for V) once its copies have
/// landed and been fenced for the tensor cores.
const FULL_ARRIVALS: u32 = 64;
/// Arrivals that empty a stage: every consumer thread, once it has read the stage.
const EMPTY_ARRIVALS: u32 = 2 * WARPGROUP;
/// Tiles a producer thread keeps in flight before it waits for the oldest and signals it.
const SIGNAL_LAG: u32 = 2;

/// Query rows per tile item of this kernel for a GQA group.
pub const fn ws_tile_rows(group: u32) -> u32 {
    WS_TILE_M / group
}

/// Dynamic shared memory: 1 KiB to align the data to the 128-byte swizzle's 1024 bytes, the two
/// consumers' Q tiles, the K and V rings, then the mbarriers (four per stage) and the presence
/// masks (8 bytes per stage). At head_dim 128: 165 KiB (one block per multiprocessor, as its
/// registers allow anyway).
pub const fn ws_shared_bytes(head_dim: u32) -> u32 {
    1024 + 2 * q_tile_bytes(head_dim) + 2 * WS_STAGES * stage_bytes(head_dim) + 5 * WS_STAGES * 8
}

const fn q_tile_bytes(head_dim: u32) -> u32 {
    CONSUMER_M * head_dim * 2
}

const fn stage_bytes(head_dim: u32) -> u32 {
    TILE_KEYS * head_dim * 2
}

/// Shared addresses of the block's buffers (see [`ws_shared_bytes`]).
#[derive(Clone, Copy)]
struct SharedLayout {
    /// 1024-byte aligned start of the data.
    base: u32,
    /// The generic pointer to `base` (for plain loads and stores).
    base_ptr: *mut u8,
    head_dim: u32,
}

impl SharedLayout {
    fn q(&self, consumer: u32) -> u32 {
        self.base + consumer * q_tile_bytes(self.head_dim)
    }
    fn k(&self, stage: u32) -> u32 {
        self.base + 2 * q_tile_bytes(self.head_dim) + stage * stage_bytes(self.head_dim)
    }
    fn v(&self, stage: u32) -> u32 {
        self.k(WS_STAGES + stage)
    }
    fn barriers(&self) -> u32 {
        self.k(2 * WS_STAGES)
    }
    fn full_k(&self, stage: u32) -> u32 {
        self.barriers() + 8 * stage
    }
    fn full_v(&self, stage: u32) -> u32 {
        self.barriers() + 8 * (WS_STAGES + stage)
    }
    fn empty_k(&self, stage: u32) -> u32 {
        self.barriers() + 8 * (2 * WS_STAGES + stage)
    }
    fn empty_v(&self, stage: u32) -> u32 {
        self.barriers() + 8 * (3 * WS_STAGES + stage)
    }
    /// Two words: bit k of word w says whether key `32 w + k` of the stage's tile is present.
    fn presence(&self, stage: u32) -> *mut u32 {
        // SAFETY (of the offset): inside the block's dynamic shared memory (`ws_shared_bytes`).
        unsafe { self.base_ptr.add((self.barriers() - self.base + 8 * (4 * WS_STAGES + stage)) as usize) as *mut u32 }
    }
}

/// A position in the rings: the `n`-th tile the block handles (counted across its items) uses
/// stage `n % WS_STAGES` in round `n / WS_STAGES`, whose full phase has parity `round & 1`.
#[derive(Clone, Copy)]
struct RingSlot {
    stage: u32,
    parity: u32,
}

impl RingSlot {
    fn of(n: u32) -> Self {
        RingSlot { stage: n % WS_STAGES, parity: (n / WS_STAGES) & 1 }
    }
}

/// The producer's part of one item: for each of its key tiles, wait until the stage is empty,
/// copy this thread's token (its K row for threads 0-63, its V row for 64-127; zeros for a key
/// past the item's range or on a page outside the pool; the K warps' lanes 0 write the stage's
/// presence mask), and arrive on the stage's full barrier once the copies have landed and are
/// fenced for the tensor cores (one tile later). `tiles`: the block's tile counter.
#[inline(always)]
unsafe fn produce_item<Q, const D: usize>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    smem: SharedLayout,
    tiles: &mut u32,
    seq: u32,
    r0: u32,
    rc: u32,
) {
    let tid = thread_idx_x();
    let (is_v, token) = (tid >= 64, tid % 64);
    // Every role of the block derives its tile count from the item's keys.
    let (lo, hi) = ItemRows::load(ptr, p, seq, r0, rc).keys();
    let num_tiles = (hi - lo).div_ceil(TILE_KEYS);
    let g = block_idx_y() as usize;
    let kv = ptr.kv as *const u8;
    let token_stride = 2 * p.num_kv_heads as usize * D * 2;
    // K rows of head g at 2g, V rows at 2g + 1 (the interleaved layout).
    let head_offset = (2 * g + is_v as usize) * D * 2;
    let page_table = ptr.page_indices.add(seq as usize * p.pages_per_seq as usize);
    let pages = FastDiv::new(p.page_size);
    // Keys of other query tiles of the sequence are read again: no evict-first policy.
    let hint = CopyHint { prefetch_256: true, evict_first: None };
    // This thread's page-table entry for tile i, loaded a tile ahead (its latency off the chain).
    let entry = |i: u32| -> i32 {
        let j = lo + i * TILE_KEYS + token;
        if j < hi {
            *page_table.add(pages.div(j) as usize)
        } else {
            -1
        }
    };
    let mut next_page = entry(0);
    // Full barriers of the tiles issued but not yet signaled, oldest first (shifted, never indexed
    // by a run-time value: that would put the array in local memory).
    const { assert!(SIGNAL_LAG == 2, "the flush below signals two tiles") };
    let mut pending = [0u32; SIGNAL_LAG as usize];
    let mut i = 0;
    while i < num_tiles {
        let slot = RingSlot::of(*tiles);
        *tiles += 1;
        let in_page = pages.div_rem(lo + i * TILE_KEYS + token).1;
        let page = next_page;
        next_page = entry(i + 1);
        let valid = page_is_valid(page, p.total_pages);
        let src = if valid {
            kv.add((page as usize * p.page_size as usize + in_page as usize) * token_stride + head_offset)
        } else {
            kv
        };
        let (full, empty, tile) = if is_v {
            (smem.full_v(slot.stage), smem.empty_v(slot.stage), smem.v(slot.stage))
        } else {
            (smem.full_k(slot.stage), smem.empty_k(slot.stage), smem.k(slot.stage))
        };
        // The stage's previous tile has been read by both consumers.
        barrier::wait_parity(empty, slot.parity ^ 1);
        // Chunk c of the row: 64-dim column block c / 8, chunk c % 8 of its 128-byte row, swizzled.
        unroll::<16>(|c| {
            if c < D / 8 {
                let c = c as u32;
                let dst = tile + (c / 8) * TILE_KEYS * 128 + wgmma::swizzled_128b_offset(token, c % 8);
                cp_async_16(dst, src.add(c as usize * 16), valid, hint);
            }
        });
        commit_group();
        if !is_v {
            let bits = warp_ballot(valid);
            if lane_id() == 0 {
                *smem.presence(slot.stage).add((tid / WARP_SIZE) as usize) = bits;
            }
        }
        // The copies of tile i - 2 have landed: fence them for the tensor cores' reads (async
        // proxy) and signal their stage. Here rather than in the consumers, whose critical path
        // the fence would lengthen; two tiles behind, so two tiles' copies stay in flight while
        // the thread waits (one behind starved the consumers: benchmarks/NOTES.md "v6c"). The
        // consumers' order allows no more: tile i + 3 waits for the V stage of tile i - 1, which
        // is released only after the consumers have waited for tile i.
        if i >= SIGNAL_LAG {
            wait_group::<SIGNAL_LAG>();
            wgmma::fence_proxy_async_shared();
            barrier::arrive(pending[0]);
        }
        pending = [pending[1], full];
        i += 1;
    }
    // The last tiles' signals, oldest first.
    if num_tiles >= 2 {
        wait_group::<1>();
        wgmma::fence_proxy_async_shared();
        barrier::arrive(pending[0]);
    }
    if num_tiles >= 1 {
        wait_all();
        wgmma::fence_proxy_async_shared();
        barrier::arrive(pending[1]);
    }
}

/// A consumer's part of one item: its 64 M rows (`consumer` 0 or 1: M rows `64 consumer ..`),
/// every key tile of the item from the rings (a tile none of its rows sees is waited for and
/// released unread), then its rows of the output. `tiles`: the block's tile counter.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn consume_item<Q: MmaElement, const D: usize, const KSTEPS: usize, const NTILES: usize>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    smem: SharedLayout,
    consumer: u32,
    tiles: &mut u32,
    seq: u32,
    r0: u32,
    rc: u32,
) {
    let g = block_idx_y();
    let group = p.num_q_heads / p.num_kv_heads;
    let nq = p.num_q_heads as usize;
    let ctid = thread_idx_x() - WARPGROUP; // 0..256 over both consumers
    let wtid = ctid % WARPGROUP; // within this consumer
    if seq == NO_SEQUENCE {
        zero_item_rows::<Q, D>(ptr, p, r0, rc, ctid, 2 * WARPGROUP);
        return;
    }

    let warp = wtid / WARP_SIZE;
    let item = ItemRows::load(ptr, p, seq, r0, rc);
    let (lo, hi) = item.keys();
    let num_tiles = (hi - lo).div_ceil(TILE_KEYS);

    // This consumer's rows, and the keys they visit (tiles outside are skipped unread).
    let c_base = consumer * CONSUMER_M;
    let (c_lo, c_hi, _, _) = item.m_rows_keys(c_base, CONSUMER_M, group);
    // Warp w owns M rows c_base + 16w .. + 16; this lane rows lane/4 and lane/4 + 8 of them.
    let (m_rows, rows) = item.warp_rows(c_base + warp * 16, group);

    // Q: this consumer's 64 M rows into its tile, laid out as K is (64-dim column blocks of
    // 128-byte rows, swizzled), rows past the item zero-filled. The barrier before: the previous
    // item's S products (every warp's) are done with the tile.
    let sync_consumer = || {
        if consumer == 0 {
            barrier::sync_named::<1>(WARPGROUP)
        } else {
            barrier::sync_named::<2>(WARPGROUP)
        }
    };
    sync_consumer();
    let q_tile = smem.q(consumer);
    let row_chunks = D as u32 / 8;
    let no_hint = CopyHint { prefetch_256: false, evict_first: None };
    let mut c = wtid;
    while c < CONSUMER_M * row_chunks {
        let (mr, chunk) = (c / row_chunks, c % row_chunks);
        let r = (c_base + mr) / group;
        let h = (g * group + (c_base + mr) % group) as usize;
        let src = if r < rc { ptr.q.add(((r0 + r) as usize * nq + h) * D + chunk as usize * 8) } else { ptr.q };
        let dst = q_tile + (chunk / 8) * CONSUMER_M * 128 + wgmma::swizzled_128b_offset(mr, chunk % 8);
        cp_async_16(dst, src as *const u8, r < rc, no_hint);
        c += WARPGROUP;
    }
    commit_group();
    wait_all();
    wgmma::fence_proxy_async_shared();
    sync_consumer();
    let q_desc = wgmma::descriptor(q_tile, 16, 8 * 128, wgmma::Swizzle::Bytes128);

    let logit = LogitScale::new(p, true);
    let mut o = [[0.0f32; 4]; NTILES];
    let mut m = [f32::NEG_INFINITY; 2];
    let mut l = [0.0f32; 2];
    // The tiles this consumer's rows see, `[ia, ib)` (contiguous: the rows' key ranges are
    // intervals that grow with the row); the others are waited for and released unread.
    let first_tile = *tiles;
    *tiles += num_tiles;
    let slot = |i: u32| RingSlot::of(first_tile + i);
    let tile_base = |i: u32| lo + i * TILE_KEYS;
    let (ia, ib) = if c_lo < c_hi {
        let ia = (c_lo.max(lo) - lo) / TILE_KEYS;
        (ia, (c_hi - lo).div_ceil(TILE_KEYS).min(num_tiles).max(ia))
    } else {
        (0, 0)
    };
    let skip = |i: u32| {
        let t = slot(i);
        barrier::wait_parity(smem.full_k(t.stage), t.parity);
        barrier::arrive(smem.empty_k(t.stage));
        barrier::wait_parity(smem.full_v(t.stage), t.parity);
        barrier::arrive(smem.empty_v(t.stage));
    };
    for i in 0..ia {
        skip(i);
    }
    // S = Q Kᵀ of tile i issued (the tensor cores run it while the warps go on).
    let issue_s = |i: u32, s: &mut [[f32; 4]; 8]| {
        let t = slot(i);
        barrier::wait_parity(smem.full_k(t.stage), t.parity);
        let acc = &mut *(s.as_mut_ptr() as *mut [f32; 32]);
        wgmma::keep_accumulator(acc);
        wgmma::fence();
        // K-major A and B: k-steps of 16 dims are 32 bytes apart inside a 64-dim block.
        let k_desc = wgmma::descriptor(smem.k(t.stage), 16, 8 * 128, wgmma::Swizzle::Bytes128);
        unroll::<KSTEPS>(|k| {
            let step = (k as u32 % 4) * 32;
            let kd = wgmma::advance(k_desc, (k as u32 / 4) * TILE_KEYS * 128 + step);
            let qd = wgmma::advance(q_desc, (k as u32 / 4) * CONSUMER_M * 128 + step);
            wgmma::mma_m64n64k16_ss::<Q, 0>(acc, qd, kd, k > 0);
        });
        wgmma::commit_group();
    };
    // The tile's presence bits, its logit transform, masks and softmax weights (f32, in `s`;
    // packed into P by the caller once no wgmma is in flight); returns the rescale O still needs.
    let softmax = |i: u32, s: &mut [[f32; 4]; 8], m: &mut [f32; 2], l: &mut [f32; 2]| {
        let presence = smem.presence(slot(i).stage);
        let present = [*presence, *presence.add(1)];
        // K is read: the producer may refill its stage.
        barrier::arrive(smem.empty_k(slot(i).stage));
        mask_logits(s, tile_base(i), present, &rows, &logit, p);
        online_softmax_weights_f32::<8>(s, logit.exp_scale, m, l)
    };
    // The FA3 order: S of tile i is issued, then O += P V of tile i - 1 behind it; the softmax of
    // tile i runs while that P V does. Tile ia is peeled off the loop so that inside it every tile
    // issues both products unconditionally (with the P V behind a branch ptxas cannot tell which
    // group a `wait_group 1` retires and serializes every wgmma: benchmarks/NOTES.md "v5").
    let mut pa = [[0u32; 4]; 4];
    if ia < ib {
        let mut s = [[0.0f32; 4]; 8];
        issue_s(ia, &mut s);
        wgmma::wait_group::<0>();
        wgmma::keep_accumulator(&mut *(s.as_mut_ptr() as *mut [f32; 32]));
        let rescale = softmax(ia, &mut s, &mut m, &mut l);
        rescale.apply(&mut o);
        pack_weights::<Q, 8, 4>(&s, &mut pa);
    }
    let mut i = ia + 1;
    while i < ib {
        let mut s = [[0.0f32; 4]; 8];
        issue_s(i, &mut s);
        let prev = slot(i - 1);
        barrier::wait_parity(smem.full_v(prev.stage), prev.parity);
        wgmma_pv_issue::<Q, NTILES>(&mut o, &pa, smem.v(prev.stage));
        // S done; the P V may still run.
        wgmma::wait_group::<1>();
        wgmma::keep_accumulator(&mut *(s.as_mut_ptr() as *mut [f32; 32]));
        let rescale = softmax(i, &mut s, &mut m, &mut l);
        // The P V of tile i - 1 has finished writing O and reading its stage and P.
        wgmma::wait_group::<0>();
        keep_o(&mut o);
        wgmma::keep_fragments(&mut pa);
        barrier::arrive(smem.empty_v(prev.stage));
        rescale.apply(&mut o);
        pack_weights::<Q, 8, 4>(&s, &mut pa);
        i += 1;
    }
    if ia < ib {
        let last = slot(ib - 1);
        barrier::wait_parity(smem.full_v(last.stage), last.parity);
        wgmma_pv_issue::<Q, NTILES>(&mut o, &pa, smem.v(last.stage));
        wgmma::wait_group::<0>();
        keep_o(&mut o);
        wgmma::keep_fragments(&mut pa);
        barrier::arrive(smem.empty_v(last.stage));
    }
    for i in ib..num_tiles {
        skip(i);
    }

    // Each warp owns its rows: normalize and write them.
    store_rows::<Q, D, NTILES>(ptr, p, r0, rc, m_rows, &l, &o);
}

#[inline(always)]
unsafe fn rpa_tiled_ws<Q: MmaElement, const D: usize, const KSTEPS: usize, const NTILES: usize>(
    ptr: TiledPointers<Q>,
    p: RpaParams,
) {
    const { assert!(NTILES * 8 == D && KSTEPS * 16 == D && (D == 64 || D == 128), "head_dim 64 or 128") };
    // Launched programmatically after `rpa_plan` (sm_90 image): the plan is readable after the wait.
    crate::grid_dependency::launch_dependents();
    crate::grid_dependency::wait_for_prerequisites();
    let raw = dynamic_shared_mem::<u8>();
    let raw_address = shared_address(raw);
    let base = (raw_address + 1023) & !1023;
    let smem = SharedLayout { base, base_ptr: raw.add((base - raw_address) as usize), head_dim: D as u32 };
    let tid = thread_idx_x();
    if tid == 0 {
        for stage in 0..WS_STAGES {
            barrier::init(smem.full_k(stage), FULL_ARRIVALS);
            barrier::init(smem.full_v(stage), FULL_ARRIVALS);
            barrier::init(smem.empty_k(stage), EMPTY_ARRIVALS);
            barrier::init(smem.empty_v(stage), EMPTY_ARRIVALS);
        }
    }
    sync_threads();
    // Every role walks the same items and tiles, counting tiles the same way.
    let mut tiles = 0u32;
    let role = tid / WARPGROUP;
    if role == 0 {
        warpgroup::release_registers::<PRODUCER_REGISTERS>();
        for_each_item(&ptr, &p, |seq, r0, rc| {
            if seq != NO_SEQUENCE {
                produce_item::<Q, D>(&ptr, &p, smem, &mut tiles, seq, r0, rc)
            }
        });
        // The block's shared memory outlives the copies only while a thread waits for them.
        wait_all();
    } else {
        warpgroup::claim_registers::<CONSUMER_REGISTERS>();
        for_each_item(&ptr, &p, |seq, r0, rc| {
            consume_item::<Q, D, KSTEPS, NTILES>(&ptr, &p, smem, role - 1, &mut tiles, seq, r0, rc)
        });
    }
}

/// One warp-specialized kernel per (q dtype = KV dtype, head_dim): `rpa_tile_ws_<q>_<q>_d<D>`.
macro_rules! rpa_tile_ws_kernels {
    ($( $name:ident: $q:ty, $d:literal; )*) => {$(
        /// The warp-specialized tile kernel (see the module docs); launched by the host after
        /// `rpa_plan` with [`ws_tile_rows`] rows per tile item.
        ///
        /// # Safety
        /// Grid `(params.plan_capacity, num_kv_heads)`, [`WS_THREADS`] threads and
        /// [`ws_shared_bytes`] of dynamic shared memory; every pointer a device buffer of the
        /// shape `params` describes, `plan` written by `rpa_plan` with the same `params`.
        /// Metadata values may be anything: they never lead outside the buffers.
        #[kernel(max_threads = 384)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $name(
            q: *const $q, kv: *const $q, kv_lens: *const i32, page_indices: *const i32,
            cu_q_lens: *const i32, num_seqs: *const i32, plan: *const u32, out: *mut $q,
            params: RpaParams,
        ) {
            rpa_tiled_ws::<$q, $d, { $d / 16 }, { $d / 8 }>(
                TiledPointers { q, kv, kv_lens, page_indices, cu_q_lens, num_seqs, plan, out },
                params,
            )
        }
    )*};
}

#[cfg(any(xgk_sm90, not(target_arch = "nvptx64")))]
rpa_tile_ws_kernels! {
    rpa_tile_ws_f16_f16_d64: f16, 64;
    rpa_tile_ws_f16_f16_d128: f16, 128;
    rpa_tile_ws_bf16_bf16_d64: Bf16, 64;
    rpa_tile_ws_bf16_bf16_d128: Bf16, 128;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_fits_a_hopper_block() {
        // 227 KiB is the most a block may take on sm_90.
        assert!(ws_shared_bytes(128) <= 227 * 1024);
        assert!(ws_shared_bytes(64) <= ws_shared_bytes(128));
    }

    #[test]
    fn register_budgets_fill_the_pool_of_384_threads() {
        // 65536 registers per multiprocessor; 384 threads get at most 168 each (a multiple of 8).
        assert_eq!(WARPGROUP * PRODUCER_REGISTERS + 2 * WARPGROUP * CONSUMER_REGISTERS, WS_THREADS * 168);
        assert_eq!(WS_THREADS, 3 * WARPGROUP);
    }

    #[test]
    fn ring_slots_alternate_parity_per_round() {
        let slots: [(u32, u32); 9] = core::array::from_fn(|n| {
            let s = RingSlot::of(n as u32);
            (s.stage, s.parity)
        });
        assert_eq!(slots[0], (0, 0));
        assert_eq!(slots[WS_STAGES as usize - 1], (WS_STAGES - 1, 0));
        assert_eq!(slots[WS_STAGES as usize], (0, 1));
        assert_eq!(slots[2 * WS_STAGES as usize], (0, 0));
    }
}
