//! Ragged paged attention over 128-row query tiles with warp specialization (sm_90a image): the
//! prefill kernel on Hopper, FlashAttention 3's structure for a paged KV cache.
//!
//! The work items are the tiled kernel's ([`super::paged_attention_tiled::plan_items`], with
//! [`ws_tile_rows`] query rows per tile item: 128 M rows). At head dims 64 and 128 a call is one
//! launch where the blocks are persistent ([`ws_plans_itself`]): block 0 builds the plan in the
//! workspace and stores the call's K/V, Q and output tensor maps ([`crate::tma`]) after it
//! ([`ws_tensor_map_address`]) while the others wait for it ([`plan_or_wait`]); a call whose
//! decode sequences run apart is two launches, the pipelined decode kernel first, this kernel's
//! block 0 planning once the decode kernel's first block says the inputs are written. Otherwise
//! (head_dim 256, one block per pair) [`rpa_plan_ws`] plans and stores the maps first; with decode
//! sequences apart at head dims 64 and 128 it publishes them under the call's tag. With decode
//! sequences apart (and `XGK_RPA_DECODE_APART=2`, the default) this kernel's blocks wait for the
//! published plan rather than for the decode kernel, which they run beside.
//! A block of [`WS_THREADS`] threads is three warpgroups with different jobs and register budgets ([`crate::warpgroup`]):
//! - warpgroup 0, the *producer*: its warps 0 and 1 load the K and the V tiles of [`ws_keys`]
//!   keys (128; 64 at head_dim 256) into shared-memory rings (two K stages, three V stages: a V stage is released a tile
//!   after its K stage) with the tensor memory accelerator, one bulk copy per (16-key page block,
//!   64-dim column block), lanes 0-7 one 16-key block each, completing the bytes on the stage's
//!   *full* mbarrier; its warps 2 and 3 load each item's Q tile (with one thread's bulk copies
//!   through the call's Q tensor map where a consumer's rows are one box, [`ws_q_by_tma`]; else
//!   `cp.async`, rows past the item zero-filled) into a two-slot ring (one slot at head_dim 256,
//!   always `cp.async`), so the next item's Q is in
//!   place when the consumers finish an item; it runs on 48 registers, the consumers on 224 (24 and
//!   240 at head_dim 256);
//! - warpgroups 1 and 2, the *consumers*, own 64 M rows each: per tile S = Q Kᵀ (`wgmma`
//!   `m64n128k16`, or `m64n64k16` for 64-key tiles, Q and K from shared memory), the mask and
//!   online softmax, and O += P V
//!   (`wgmma`, P from registers), in FA3's order (S of tile i issued before the P V of tile i - 1,
//!   the softmax of tile i while that P V runs), releasing each stage on its *empty* mbarrier as
//!   soon as they are done reading it. With `RpaParams::consumer_schedule` 1 the two consumers
//!   take turns to issue their products (FA3's ping-pong, two named barriers), so one's softmax
//!   runs under the other's matrix products; with 0 they issue freely. At an item's end each
//!   consumer warp stages its rows of O in its own Q tile (`stmatrix`, head dims 64 and 128; at
//!   256, whose Q ring has one slot, they are stored from registers): where Q came by its map and
//!   all 64 of the consumer's rows are in the item, in the map's layout, and one thread writes the
//!   tile with bulk tensor stores through the output's map; else each warp reads its rows back
//!   and writes them with 16-byte stores.
//!
//! Keys are visited from the item's first key rounded down to a multiple of 16 (the copies move
//! whole 16-key blocks of a page; the keys before the first are masked as for any row that cannot
//! see them). A block on a page outside the pool, or past the item's keys, is copied from
//! coordinates outside the tensor: zeros. Key presence (on a page of the pool, before the item's
//! end) travels with the K tile: the producer writes one 32-bit mask per 32 keys of a stage,
//! released by the stage's full barrier.
//!
//! The grid is one row of blocks walking the (item, KV head) pairs ([`for_each_pair`]): one block
//! per pair, or persistent blocks, as many as there are multiprocessors, whose producer loads the
//! next item's Q and first tiles under the consumers' last tiles and epilogue. Persistent blocks
//! take their pairs in a fixed snake order or, with `RpaParams::dynamic_pairs`, from a counter in
//! the plan's header, fetched by thread 0 and passed to the block through a shared-memory ring.
//!
//! Needs page sizes that are multiples of 16 and a KV pool the tensor map can describe (checked on
//! the host, `tiled_ws_applies`).

use crate::attention::{launch_tagged_word, page_is_valid, RpaParams};
use crate::barrier;
use crate::copy::{commit_group, cp_async_16, wait_all, CopyHint};
use crate::kernel;
use crate::math::inverse_or_zero;
use crate::mma::{stmatrix_x4, MmaElement};
use crate::num::Bf16;
use crate::shared::{self, dynamic_shared_mem, shared_address};
use crate::thread::{block_idx_x, grid_dim_x, sync_threads, thread_idx_x};
use crate::tma::{self, TensorMapImage};
use crate::warp::{lane_id, sync_warp, warp_ballot, WARP_SIZE};
use crate::{warpgroup, wgmma};
use core::sync::atomic::{AtomicU32, Ordering};

use super::paged_attention_mma::{mask_logits, online_softmax_weights_f32, pack_weights, quad_sum, LogitScale};
use super::paged_attention_tiled::{
    inputs_ready_word, keep_o, plan_bytes, plan_items, store_rows, wgmma_pv_issue, zero_item_rows, ItemRows, PlanView,
    TiledPointers, NO_SEQUENCE, PLAN_BLOCKS_DONE_WORD, PLAN_FALLBACK_WORD, PLAN_INPUTS_READY_WORD, PLAN_STATE_WORD,
    PLAN_THREADS, PLAN_WORK_COUNTER_WORD, TILE_M,
};
use super::unroll;
use crate::gpu_scope;
use core::sync::atomic::AtomicU64;

/// M rows (query row × query head pairs) of a tile item: 64 per consumer warpgroup.
pub const WS_TILE_M: u32 = 128;
/// Keys per K/V tile at head_dim 64 and 128 (S of a consumer is 64 x 128: 64 f32 registers per
/// thread); 64 at head_dim 256, where O takes 128 registers ([`ws_keys`]).
pub const WS_KEYS: u32 = 128;

/// Keys per K/V tile for a head dim: a K or V stage is 32 KiB at 128 and 256, 16 KiB at 64.
pub const fn ws_keys(head_dim: u32) -> u32 {
    if head_dim > 128 {
        64
    } else {
        WS_KEYS
    }
}

/// Slots of the Q ring for a head dim (a slot holds both consumers' Q tiles: 32 KiB at head_dim
/// 128): two, so that the next item's Q lands while the current one runs; one at head_dim 256
/// (64 KiB a slot), where shared memory holds no second.
pub const fn ws_q_slots(head_dim: u32) -> u32 {
    if head_dim > 128 {
        1
    } else {
        MAX_Q_SLOTS
    }
}
/// Threads per block: the producer warpgroup and two consumer warpgroups.
pub const WS_THREADS: u32 = 384;
/// Stages of the K ring and of the V ring (a stage of K or V is 32 KiB at head_dim 128). V gets
/// one more: with K(i) and V(i) loaded together, a V stage is released a tile later than its K
/// stage (after P V, not after S), and a third stage gives its copy a tile more of lead.
pub const WS_K_STAGES: u32 = 2;
pub const WS_V_STAGES: u32 = 3;
/// Stages of both rings.
const KV_STAGES: u32 = WS_K_STAGES + WS_V_STAGES;
/// Most slots of the Q ring ([`ws_q_slots`]; the barriers are laid out for this many).
const MAX_Q_SLOTS: u32 = 2;
/// Threads of the producer warpgroup that load Q: its warps 2 and 3 (warps 0 and 1 load K and V).
const Q_LOADERS: u32 = WARPGROUP - 2 * WARP_SIZE;
/// Slots of the schedule ring (pair indices thread 0 fetched, read by every thread).
const SCHED_SLOTS: u32 = 4;
/// Keys of one bulk copy: a 16-key block of one page (page sizes are multiples of 16).
pub const WS_BLOCK_KEYS: u32 = 16;
/// Threads of a warpgroup.
const WARPGROUP: u32 = 128;
/// M rows of one consumer warpgroup.
pub const CONSUMER_M: u32 = 64;
/// Registers per thread of the producer and of the consumers, within the block's pool (168 per
/// thread for 384 threads: 128 x 48 + 256 x 224 <= 384 x 168; budgets are multiples of 8). S
/// (64), O (64) and P (32) of a consumer thread fit with room for the softmax (at head_dim 256:
/// S 32, O 128, P 16); FA3's 24 / 240, and
/// 40 / 232, left the producer (its walk over (item, KV head) pairs, its Q loaders) spilling
/// with ptxas 13.0.
const PRODUCER_REGISTERS: u32 = 48;
const CONSUMER_REGISTERS: u32 = 224;
/// At head_dim 256 (O alone is 128 registers): 128 x 24 + 256 x 240 = 384 x 168.
const PRODUCER_REGISTERS_D256: u32 = 24;
const CONSUMER_REGISTERS_D256: u32 = 240;
/// Arrivals that fill a stage: the producer's lane 0, announcing the stage's bytes.
const FULL_ARRIVALS: u32 = 1;
/// Arrivals that empty a stage (or a Q slot): every consumer thread, once it has read it.
const EMPTY_ARRIVALS: u32 = 2 * WARPGROUP;
/// Mbarriers: full and empty for each K and V stage, each Q slot and each schedule slot.
const BARRIERS: u32 = 2 * KV_STAGES + 2 * MAX_Q_SLOTS + 2 * SCHED_SLOTS;

/// Whether this kernel covers a head size and GQA group (16-bit KV of q's dtype): head_dim 64,
/// 128 or 256, the tiled kernel's groups.
pub const fn ws_supports(head_dim: u32, group: u32) -> bool {
    matches!(head_dim, 64 | 128 | 256) && group >= 1 && group <= TILE_M
}

/// Query rows per tile item of this kernel for a GQA group.
pub const fn ws_tile_rows(group: u32) -> u32 {
    WS_TILE_M / group
}

/// Whether the kernel can build its own plan at a head dim, or wait for one published under a tag
/// ([`plan_or_wait`]): the host then passes a nonzero `RpaParams::launch_tag` and launches no
/// [`rpa_plan_ws`] before it, where its blocks are persistent (after the decode kernel with decode
/// rows apart); or, with decode rows apart and one block per pair, launches [`rpa_plan_ws`] with
/// the tag. Not at 256: the
/// protocol's code before the roles made ptxas spill ~4x more of the producer's 24 registers there
/// (benchmarks/NOTES.md "v24"), so those kernels have none.
pub const fn ws_plans_itself(head_dim: u32) -> bool {
    head_dim <= 128
}

/// The tensor maps stored after the plan ([`plan_or_wait`], [`rpa_plan_ws`]), in this order.
#[derive(Clone, Copy)]
pub enum WsMap {
    /// The KV pool's (the producer's K and V copies).
    KeysValues = 0,
    /// The queries' (where [`ws_q_by_tma`]).
    Queries = 1,
    /// The output's, Q's layout at `out` (the epilogue's bulk stores, where [`ws_q_by_tma`]).
    Output = 2,
}

/// Global address of tensor map `map` in the scratch buffer at `plan`: the maps follow the plan
/// from its next 128-byte boundary (a tensor map must be 64-byte aligned; the scratch is only
/// 16-byte aligned), in [`WsMap`]'s order.
pub const fn ws_tensor_map_address(plan: u64, plan_capacity: u64, map: WsMap) -> u64 {
    (plan + plan_bytes(plan_capacity)).next_multiple_of(tma::MAP_BYTES as u64) + map as u64 * tma::MAP_BYTES as u64
}

/// Bytes of scratch the kernel needs: the plan, up to 112 bytes of alignment, the K/V, the Q and
/// the output tensor maps.
pub const fn ws_scratch_bytes(plan_capacity: u64) -> u64 {
    plan_bytes(plan_capacity) + 4 * tma::MAP_BYTES as u64
}

/// Whether the producer loads Q through the call's Q tensor map (one bulk copy per consumer and
/// 64-dim column block): where a consumer's 64 M rows are one box ([`ws_q_box`]: `group` heads
/// of `64 / group` tokens, so `group` divides 64) and at head_dim 64 and 128 (at 256 the
/// producer's 24 registers keep the `cp.async` loaders). Other groups' rows straddle tokens. The
/// host encodes the map only where this holds.
pub const fn ws_q_by_tma(head_dim: u32, group: u32) -> bool {
    head_dim <= 128 && group >= 1 && group <= CONSUMER_M && CONSUMER_M.is_multiple_of(group)
}

/// The box of the Q tensor map (dims x heads x tokens) for a GQA group where [`ws_q_by_tma`].
pub const fn ws_q_box(group: u32) -> [u32; 3] {
    [64, group, CONSUMER_M / group]
}

/// Dynamic shared memory: 1 KiB to align the data to the 128-byte swizzle's 1024 bytes, the Q
/// ring (two consumers' Q tiles per slot), the K and V rings, then the mbarriers, the presence
/// masks (with K) and the schedule ring. At head_dim 128 and 256: 225 KiB (one block per
/// multiprocessor, as its registers allow anyway; 227 KiB is the most a block may take).
pub const fn ws_shared_bytes(head_dim: u32) -> u32 {
    1024 + 2 * ws_q_slots(head_dim) * q_tile_bytes(head_dim)
        + KV_STAGES * stage_bytes(head_dim)
        + 8 * BARRIERS
        + WS_K_STAGES * (ws_keys(head_dim) / 8)
        + 4 * SCHED_SLOTS
}

const fn q_tile_bytes(head_dim: u32) -> u32 {
    CONSUMER_M * head_dim * 2
}

const fn stage_bytes(head_dim: u32) -> u32 {
    ws_keys(head_dim) * head_dim * 2
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
    fn q(&self, slot: u32, consumer: u32) -> u32 {
        self.base + (2 * slot + consumer) * q_tile_bytes(self.head_dim)
    }
    fn k(&self, stage: u32) -> u32 {
        self.base + 2 * ws_q_slots(self.head_dim) * q_tile_bytes(self.head_dim) + stage * stage_bytes(self.head_dim)
    }
    /// Words of a stage's presence masks (32 keys each).
    fn presence_words(&self) -> u32 {
        ws_keys(self.head_dim) / 32
    }
    fn v(&self, stage: u32) -> u32 {
        self.k(WS_K_STAGES + stage)
    }
    fn barriers(&self) -> u32 {
        self.k(KV_STAGES)
    }
    fn full_k(&self, stage: u32) -> u32 {
        self.barriers() + 8 * stage
    }
    fn full_v(&self, stage: u32) -> u32 {
        self.barriers() + 8 * (WS_K_STAGES + stage)
    }
    fn empty_k(&self, stage: u32) -> u32 {
        self.barriers() + 8 * (KV_STAGES + stage)
    }
    fn empty_v(&self, stage: u32) -> u32 {
        self.barriers() + 8 * (KV_STAGES + WS_K_STAGES + stage)
    }
    fn full_q(&self, slot: u32) -> u32 {
        self.barriers() + 8 * (2 * KV_STAGES + slot)
    }
    fn empty_q(&self, slot: u32) -> u32 {
        self.barriers() + 8 * (2 * KV_STAGES + MAX_Q_SLOTS + slot)
    }
    fn full_sched(&self, slot: u32) -> u32 {
        self.barriers() + 8 * (2 * KV_STAGES + 2 * MAX_Q_SLOTS + slot)
    }
    fn empty_sched(&self, slot: u32) -> u32 {
        self.barriers() + 8 * (2 * KV_STAGES + 2 * MAX_Q_SLOTS + SCHED_SLOTS + slot)
    }
    /// The pair index in schedule slot `slot`.
    fn sched(&self, slot: u32) -> *mut u32 {
        let offset = self.barriers() - self.base + 8 * BARRIERS + WS_K_STAGES * 4 * self.presence_words() + 4 * slot;
        // SAFETY (of the offset): inside the block's dynamic shared memory (`ws_shared_bytes`).
        unsafe { self.base_ptr.add(offset as usize) as *mut u32 }
    }
    /// `keys / 32` words: bit k of word w says whether key `32 w + k` of the stage's tile is
    /// present.
    fn presence(&self, stage: u32) -> *mut u32 {
        let offset = self.barriers() - self.base + 8 * BARRIERS + stage * 4 * self.presence_words();
        // SAFETY (of the offset): inside the block's dynamic shared memory (`ws_shared_bytes`).
        unsafe { self.base_ptr.add(offset as usize) as *mut u32 }
    }
}

/// A position in a ring: the block's `n`-th use of a ring of S slots (for K and V: its `n`-th
/// tile, counted across its items) takes slot `n % S` in round `n / S`, whose full phase has
/// parity `round & 1`.
#[derive(Clone, Copy)]
struct RingSlot {
    stage: u32,
    parity: u32,
}

impl RingSlot {
    const fn in_ring(n: u32, slots: u32) -> Self {
        RingSlot { stage: n % slots, parity: (n / slots) & 1 }
    }
    /// The K ring's stage of the block's `n`-th tile.
    fn k_of(n: u32) -> Self {
        Self::in_ring(n, WS_K_STAGES)
    }
    /// The V ring's stage of the block's `n`-th tile.
    fn v_of(n: u32) -> Self {
        Self::in_ring(n, WS_V_STAGES)
    }
    /// The Q ring's slot of the block's `n`-th item (of a sequence: zero-fill items take none)
    /// in a ring of `slots`.
    fn q_of(n: u32, slots: u32) -> Self {
        Self::in_ring(n, slots)
    }
    /// The schedule ring's slot of the block's `n`-th pair.
    fn sched_of(n: u32) -> Self {
        Self::in_ring(n, SCHED_SLOTS)
    }
}

/// Keys `[lo, hi)` the block visits for an item: the item's, `lo` rounded down to a whole 16-key
/// block (every role derives its tile count from this).
#[inline(always)]
fn item_keys(item: &ItemRows) -> (u32, u32) {
    let (lo, hi) = item.keys();
    (lo & !(WS_BLOCK_KEYS - 1), hi)
}

/// Bit k set for the keys `base + k` (k < 32) below `keys`.
#[inline(always)]
fn keys_below(keys: u32, base: u32) -> u32 {
    let n = keys.saturating_sub(base);
    if n >= 32 {
        u32::MAX
    } else {
        (1u32 << n) - 1
    }
}

/// One producer warp's part of one item: for each key tile, K (`VALUES` false: the producer's
/// warp 0) or V (`VALUES` true: its warp 1): wait until the tile's stage is empty, for K write
/// the presence masks, announce the stage's bytes and copy, lane `b` < 8 its 16-key block `b`
/// (page-table entry, then one bulk copy per 64-dim column block). Two warps, so that K and V
/// each have a warp to issue their copies: a copy's coordinates are per lane, and ptxas issues
/// the lanes' copies one after another (a loop of lane election, moves to uniform registers and
/// the copy), which one warp for both K and V could not keep ahead of the consumers. `tiles`: the
/// block's tile counter; `map`: the K/V tensor map (global address, acquired).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn produce_item<Q, const D: usize, const VALUES: bool, const PW: usize>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    smem: SharedLayout,
    map: u64,
    tiles: &mut u32,
    seq: u32,
    r0: u32,
    rc: u32,
    g: u32,
) {
    let lane = lane_id();
    let (lo, hi) = item_keys(&ItemRows::load(ptr, p, seq, r0, rc));
    let keys = ws_keys(D as u32);
    let num_tiles = (hi - lo).div_ceil(keys);
    // K rows of head g at index 2g of a token, V rows at 2g + 1 (the interleaved layout).
    let k_head = 2 * g as i32;
    let tile_bytes = keys * D as u32 * 2;
    // 16-key blocks per tile: lane b < blocks copies block b.
    let blocks = keys / WS_BLOCK_KEYS;
    let first_tile = *tiles;
    *tiles += num_tiles;
    let block_offset = lane * WS_BLOCK_KEYS * 128;
    // Copies one K or V tile (`row`: K or V row index of the token) into `tile` on barrier `full`.
    let copy_tile = #[inline(always)]
    |tile: u32, row: i32, token: i32, full: u32| {
        if lane < blocks {
            unroll::<4>(|c| {
                if c < D / 64 {
                    tma::load_3d(tile + c as u32 * keys * 128 + block_offset, map, 64 * c as i32, row, token, full);
                }
            });
        }
    };
    for i in 0..num_tiles {
        let n = first_tile + i;
        // This lane's 16-key block: the token of its first key in the pool, or -16 (a box wholly
        // outside the tensor: zeros) for a block on an invalid page or past the keys.
        let tile_base = lo + i * keys;
        let j = tile_base + lane * WS_BLOCK_KEYS;
        let mut token = -(WS_BLOCK_KEYS as i32);
        if lane < blocks && j < hi {
            // A plain division (the parameter is read from the constant bank): the producer
            // runs on few registers, where a multiply-high divider would hold two more.
            let (slot_index, in_page) = (j / p.page_size, j % p.page_size);
            let page = *ptr.page_indices.add(seq as usize * p.pages_per_seq as usize + slot_index as usize);
            if page_is_valid(page, p.total_pages) {
                // < 2^31: total_pages * page_size is checked on the host.
                token = (page as u32 * p.page_size + in_page) as i32;
            }
        }
        if VALUES {
            let slot = RingSlot::v_of(n);
            let v_full = smem.full_v(slot.stage);
            barrier::wait_parity(smem.empty_v(slot.stage), slot.parity ^ 1);
            if lane == 0 {
                barrier::arrive_expect_tx(v_full, tile_bytes);
            }
            // The copies complete on the barrier once lane 0 has announced their bytes.
            sync_warp();
            copy_tile(smem.v(slot.stage), k_head + 1, token, v_full);
        } else {
            let slot = RingSlot::k_of(n);
            // Bit b: block b is on a valid page (and starts before the item's end).
            let valid_blocks = warp_ballot(token >= 0);
            let k_full = smem.full_k(slot.stage);
            barrier::wait_parity(smem.empty_k(slot.stage), slot.parity ^ 1);
            if lane == 0 {
                // Key k of the tile is present when its block is valid and k is before the
                // item's end. Lane 0 writes the words and its arrival releases them: the
                // consumers' reads are ordered after the writes by the full barrier alone.
                let keys = hi - tile_base;
                unroll::<PW>(|w| {
                    let blocks = (valid_blocks >> (2 * w)) & 3;
                    let spread = ((blocks & 1) * 0xffff) | ((blocks >> 1) * 0xffff_0000);
                    *smem.presence(slot.stage).add(w) = spread & keys_below(keys, 32 * w as u32);
                });
                barrier::arrive_expect_tx(k_full, tile_bytes);
            }
            sync_warp();
            copy_tile(smem.k(slot.stage), k_head, token, k_full);
        }
    }
}

/// The Q loaders' part of one item (the producer warpgroup's warps 2 and 3, `loader` 0..64): once the
/// item's Q slot is empty, both consumers' 64 M rows into their tiles, laid out as K is (64-dim
/// column blocks of 128-byte rows, swizzled), rows past the item zero-filled; then each loader
/// waits for its copies, makes them visible to the tensor cores' async proxy and arrives on the
/// slot's full barrier. `items`: the block's count of sequence items.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn load_q_item<Q, const D: usize>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    smem: SharedLayout,
    loader: u32,
    items: &mut u32,
    r0: u32,
    rc: u32,
    g: u32,
) {
    let slot = RingSlot::q_of(*items, ws_q_slots(D as u32));
    *items += 1;
    let group = p.num_q_heads / p.num_kv_heads;
    let nq = p.num_q_heads as usize;
    let row_chunks = D as u32 / 8;
    let no_hint = CopyHint { prefetch_256: false };
    barrier::wait_parity(smem.empty_q(slot.stage), slot.parity ^ 1);
    let mut c = loader;
    while c < 2 * CONSUMER_M * row_chunks {
        // M row `m` (of the item's 128) and its 16-byte chunk; consumer m / 64 holds it.
        let (m, chunk) = (c / row_chunks, c % row_chunks);
        let (r, h) = (m / group, g * group + m % group);
        let src =
            if r < rc { ptr.q.add(((r0 + r) as usize * nq + h as usize) * D + chunk as usize * 8) } else { ptr.q };
        let tile = smem.q(slot.stage, m / CONSUMER_M);
        let dst = tile + (chunk / 8) * CONSUMER_M * 128 + wgmma::swizzled_128b_offset(m % CONSUMER_M, chunk % 8);
        cp_async_16(dst, src as *const u8, r < rc, no_hint);
        c += Q_LOADERS;
    }
    commit_group();
    wait_all();
    // The tile is read by `wgmma` (the async proxy): order the copies' writes before it.
    wgmma::fence_proxy_async_shared();
    barrier::arrive(smem.full_q(slot.stage));
}

/// The Q loaders' part of one item where a consumer's 64 M rows are one box of the Q tensor map
/// `map` ([`ws_q_by_tma`]; one thread of the loaders calls it): once the item's Q slot is empty,
/// announce both tiles' bytes on the slot's full barrier and copy, per consumer and 64-dim column
/// block, the box of its `64 / group` tokens' `group` heads, in the 128-byte swizzle that
/// [`load_q_item`] writes by hand. Rows past the item load other tokens' queries (or zeros past
/// the tensor): the consumers never store those rows. `items`: the thread's count of sequence
/// items.
#[inline(always)]
unsafe fn load_q_item_tma<const D: usize>(
    p: &RpaParams,
    smem: SharedLayout,
    map: u64,
    items: &mut u32,
    r0: u32,
    g: u32,
) {
    let slot = RingSlot::q_of(*items, ws_q_slots(D as u32));
    *items += 1;
    let group = p.num_q_heads / p.num_kv_heads;
    barrier::wait_parity(smem.empty_q(slot.stage), slot.parity ^ 1);
    let full = smem.full_q(slot.stage);
    barrier::arrive_expect_tx(full, 2 * q_tile_bytes(D as u32));
    unroll::<2>(|c| {
        // < 2^31: max_tokens is validated on the host.
        let token = (r0 + c as u32 * (CONSUMER_M / group)) as i32;
        unroll::<4>(|j| {
            if j < D / 64 {
                let dst = smem.q(slot.stage, c as u32) + j as u32 * CONSUMER_M * 128;
                tma::load_3d(dst, map, 64 * j as i32, (g * group) as i32, token, full);
            }
        });
    });
}

/// Pins S's registers (64 or 128 keys: 32 or 64 f32) around a `wgmma` that writes them.
#[inline(always)]
fn keep_s<const KN: usize>(s: &mut [[f32; 4]; KN]) {
    const { assert!(KN == 8 || KN == 16, "64- or 128-key tiles") };
    // SAFETY (of the casts): [[f32; 4]; KN] is 4 KN contiguous f32.
    if KN == 16 {
        wgmma::keep_accumulator(unsafe { &mut *(s.as_mut_ptr() as *mut [f32; 64]) });
    } else {
        wgmma::keep_accumulator(unsafe { &mut *(s.as_mut_ptr() as *mut [f32; 32]) });
    }
}

/// A consumer's part of one item: its 64 M rows (`consumer` 0 or 1: M rows `64 consumer ..`),
/// every key tile of the item from the rings (a tile none of its rows sees is waited for and
/// released unread), then its rows of the output. `tiles`: the block's tile counter.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn consume_item<
    Q: MmaElement,
    const D: usize,
    const KSTEPS: usize,
    const NTILES: usize,
    const KN: usize,
    const KSP: usize,
    const PW: usize,
>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    smem: SharedLayout,
    consumer: u32,
    o_map: u64,
    tiles: &mut u32,
    items: &mut u32,
    seq: u32,
    r0: u32,
    rc: u32,
    g: u32,
) {
    let group = p.num_q_heads / p.num_kv_heads;
    let ctid = thread_idx_x() - WARPGROUP; // 0..256 over both consumers
    let wtid = ctid % WARPGROUP; // within this consumer
    if seq == NO_SEQUENCE {
        zero_item_rows::<Q, D>(ptr, p, r0, rc, g, ctid, 2 * WARPGROUP);
        return;
    }

    let warp = wtid / WARP_SIZE;
    let item = ItemRows::load(ptr, p, seq, r0, rc);
    let (lo, hi) = item_keys(&item);
    let keys = ws_keys(D as u32);
    let num_tiles = (hi - lo).div_ceil(keys);

    // This consumer's rows, and the keys they visit (tiles outside are skipped unread).
    let c_base = consumer * CONSUMER_M;
    let (c_lo, c_hi, _, _) = item.m_rows_keys(c_base, CONSUMER_M, group);
    // Warp w owns M rows c_base + 16w .. + 16; this lane rows lane/4 and lane/4 + 8 of them.
    let (m_rows, rows) = item.warp_rows(c_base + warp * 16, group);

    // Q: this consumer's 64 M rows, loaded by the producer's Q loaders (`load_q_item`).
    let q_slot = RingSlot::q_of(*items, ws_q_slots(D as u32));
    *items += 1;
    let q_tile = smem.q(q_slot.stage, consumer);
    barrier::wait_parity(smem.full_q(q_slot.stage), q_slot.parity);
    let q_desc = wgmma::descriptor(q_tile, 16, 8 * 128, wgmma::Swizzle::Bytes128);

    let logit = LogitScale::new(p, true);
    let mut o = [[0.0f32; 4]; NTILES];
    let mut m = [f32::NEG_INFINITY; 2];
    let mut l = [0.0f32; 2];
    // The tiles this consumer's rows see, `[ia, ib)` (contiguous: the rows' key ranges are
    // intervals that grow with the row); the others are waited for and released unread.
    let first_tile = *tiles;
    *tiles += num_tiles;
    let k_slot = |i: u32| RingSlot::k_of(first_tile + i);
    let v_slot = |i: u32| RingSlot::v_of(first_tile + i);
    let tile_base = |i: u32| lo + i * keys;
    let (ia, ib) = if c_lo < c_hi {
        let ia = (c_lo.max(lo) - lo) / keys;
        (ia, (c_hi - lo).div_ceil(keys).min(num_tiles).max(ia))
    } else {
        (0, 0)
    };
    let skip = #[inline(always)]
    |i: u32| {
        let (k, v) = (k_slot(i), v_slot(i));
        barrier::wait_parity(smem.full_k(k.stage), k.parity);
        barrier::arrive(smem.empty_k(k.stage));
        barrier::wait_parity(smem.full_v(v.stage), v.parity);
        barrier::arrive(smem.empty_v(v.stage));
    };
    // Ping-pong (`p.consumer_schedule` 1): the consumers take turns to issue their products, so
    // the tensor cores run one consumer's S and P V while the other computes its softmax, and
    // each one's S is not queued behind the other's. Consumer c's turn starts when it syncs on
    // named barrier 3 + c and ends when it arrives on the other's; consumer 1 arrives once on
    // consumer 0's at the block's start (`rpa_tiled_ws`), consumer 0 syncs once more at its end.
    // Both take a turn for every tile of every item, their rows seeing it or not, so the turns
    // pair up.
    let pingpong = p.consumer_schedule != 0;
    let turn_begin = #[inline(always)]
    || {
        if pingpong {
            if consumer == 0 {
                barrier::sync_named::<3>(2 * WARPGROUP)
            } else {
                barrier::sync_named::<4>(2 * WARPGROUP)
            }
        }
    };
    let turn_end = #[inline(always)]
    || {
        if pingpong {
            if consumer == 0 {
                barrier::arrive_named::<4>(2 * WARPGROUP)
            } else {
                barrier::arrive_named::<3>(2 * WARPGROUP)
            }
        }
    };
    for i in 0..ia {
        skip(i);
        turn_begin();
        turn_end();
    }
    // S = Q Kᵀ of tile i issued (the tensor cores run it while the warps go on).
    let wait_k = #[inline(always)]
    |i: u32| {
        let t = k_slot(i);
        barrier::wait_parity(smem.full_k(t.stage), t.parity);
    };
    let issue_s = #[inline(always)]
    |i: u32, s: &mut [[f32; 4]; KN]| {
        let t = k_slot(i);
        keep_s(s);
        wgmma::fence();
        // K-major A and B: k-steps of 16 dims are 32 bytes apart inside a 64-dim block.
        let k_desc = wgmma::descriptor(smem.k(t.stage), 16, 8 * 128, wgmma::Swizzle::Bytes128);
        let q_desc = wgmma::recompute_here(q_desc);
        unroll::<KSTEPS>(|k| {
            let step = (k as u32 % 4) * 32;
            let kd = wgmma::advance(k_desc, (k as u32 / 4) * keys * 128 + step);
            let qd = wgmma::advance(q_desc, (k as u32 / 4) * CONSUMER_M * 128 + step);
            if KN == 16 {
                wgmma::mma_m64n128k16_ss::<Q, 0>(&mut *(s.as_mut_ptr() as *mut [f32; 64]), qd, kd, k > 0);
            } else {
                wgmma::mma_m64n64k16_ss::<Q, 0>(&mut *(s.as_mut_ptr() as *mut [f32; 32]), qd, kd, k > 0);
            }
        });
        wgmma::commit_group();
    };
    // The tile's presence bits, its logit transform, masks and softmax weights (f32, in `s`;
    // packed into P by the caller once no wgmma is in flight); returns the rescale O still needs.
    let softmax = #[inline(always)]
    |i: u32, s: &mut [[f32; 4]; KN], m: &mut [f32; 2], l: &mut [f32; 2]| {
        let presence = smem.presence(k_slot(i).stage);
        let mut present = [0u32; PW];
        unroll::<PW>(|w| present[w] = *presence.add(w));
        // K is read: the producer may refill its stage.
        barrier::arrive(smem.empty_k(k_slot(i).stage));
        mask_logits(s, tile_base(i), present, &rows, &logit, p);
        online_softmax_weights_f32::<KN>(s, logit.exp_scale, m, l)
    };
    // The FA3 order: S of tile i is issued, then O += P V of tile i - 1 behind it; the softmax of
    // tile i runs while that P V does. Tile ia is peeled off the loop so that inside it every tile
    // issues both products unconditionally (with the P V behind a branch ptxas cannot tell which
    // group a `wait_group 1` retires and serializes every wgmma: benchmarks/NOTES.md "v5").
    let mut pa = [[0u32; 4]; KSP];
    if ia < ib {
        let mut s = [[0.0f32; 4]; KN];
        wait_k(ia);
        turn_begin();
        issue_s(ia, &mut s);
        turn_end();
        wgmma::wait_group::<0>();
        keep_s(&mut s);
        let rescale = softmax(ia, &mut s, &mut m, &mut l);
        rescale.apply(&mut o);
        pack_weights::<Q, KN, KSP>(&s, &mut pa);
    }
    let mut i = ia + 1;
    while i < ib {
        let mut s = [[0.0f32; 4]; KN];
        let prev = v_slot(i - 1);
        wait_k(i);
        barrier::wait_parity(smem.full_v(prev.stage), prev.parity);
        turn_begin();
        issue_s(i, &mut s);
        wgmma_pv_issue::<Q, NTILES, KSP>(&mut o, &pa, smem.v(prev.stage));
        turn_end();
        // S done; the P V may still run.
        wgmma::wait_group::<1>();
        keep_s(&mut s);
        let rescale = softmax(i, &mut s, &mut m, &mut l);
        // The P V of tile i - 1 has finished writing O and reading its stage and P.
        wgmma::wait_group::<0>();
        keep_o(&mut o);
        wgmma::keep_fragments(&mut pa);
        barrier::arrive(smem.empty_v(prev.stage));
        rescale.apply(&mut o);
        pack_weights::<Q, KN, KSP>(&s, &mut pa);
        i += 1;
    }
    if ia < ib {
        let last = v_slot(ib - 1);
        barrier::wait_parity(smem.full_v(last.stage), last.parity);
        wgmma_pv_issue::<Q, NTILES, KSP>(&mut o, &pa, smem.v(last.stage));
        wgmma::wait_group::<0>();
        keep_o(&mut o);
        wgmma::keep_fragments(&mut pa);
        barrier::arrive(smem.empty_v(last.stage));
    }
    for i in ib..num_tiles {
        skip(i);
        turn_begin();
        turn_end();
    }
    // Each warp owns its rows: normalize and write them. Every S product (the Q tile's only
    // reader: each consumer has its own) has completed, so the tile is free until this consumer
    // arrives on the slot's empty barrier, after which the loaders may refill the slot.
    if ws_q_slots(D as u32) > 1 {
        // Staged in the Q tile: the next item's Q is in the ring's other slot. (Not in the last
        // V stage: the other consumer's P V may still read it; benchmarks/NOTES.md "v21".) All
        // 64 rows in the item (this consumer's tokens): one bulk store per column block.
        if o_map != 0 && (c_base + CONSUMER_M) / group <= rc {
            let token = r0 + c_base / group;
            store_rows_tma::<Q, D, NTILES, KSTEPS>(q_tile, warp, wtid, consumer, o_map, token, g * group, &l, &o);
        } else {
            store_rows_staged::<Q, D, NTILES, KSTEPS>(ptr, p, q_tile, warp, c_base, r0, rc, g, &l, &o);
        }
        // The loaders may refill the tile with bulk copies (the async proxy): order this warp's
        // writes and reads of it before them.
        wgmma::fence_proxy_async_shared();
        barrier::arrive(smem.empty_q(q_slot.stage));
    } else {
        // One Q slot at head_dim 256: release it first, so the next item's Q loads under the
        // stores.
        barrier::arrive(smem.empty_q(q_slot.stage));
        store_rows::<Q, D, NTILES>(ptr, p, r0, rc, g, m_rows, &l, &o);
    }
}

/// A warp's 16 M rows of O, normalized by their softmax sums `l` and packed, written with
/// `stmatrix` to shared memory: 16-byte chunk `chunk` (8 dims) of the warp's row `row` at
/// `chunk_at(row, chunk)`. Matrices of one `stmatrix`: n-tiles nt and nt + 1, each as rows 0-7 and
/// rows 8-15; lane `l` addresses row `l % 8` of matrix `l / 8`.
///
/// # Safety
/// Every lane of the warp calls it; `chunk_at` gives 16-byte aligned shared addresses that no other
/// thread reads or writes meanwhile.
#[inline(always)]
unsafe fn stage_rows<Q: MmaElement, const NTILES: usize, const PAIRS: usize>(
    l: &[f32; 2],
    o: &[[f32; 4]; NTILES],
    chunk_at: impl Fn(u32, u32) -> u32,
) {
    let lane = lane_id();
    let inv = [0, 1].map(|ri| inverse_or_zero(quad_sum(l[ri])));
    let (matrix, matrix_row) = (lane / 8, lane % 8);
    let row = matrix_row + 8 * (matrix % 2);
    unroll::<PAIRS>(|pair| {
        let nt = 2 * pair;
        let half = |t: usize, ri: usize| Q::pack2(o[t][2 * ri] * inv[ri], o[t][2 * ri + 1] * inv[ri]);
        stmatrix_x4(
            chunk_at(row, nt as u32 + matrix / 2),
            [half(nt, 0), half(nt, 1), half(nt + 1, 0), half(nt + 1, 1)],
        );
    });
}

/// A consumer's 64 rows of the output where all are in the item and Q came by the map (head_dim 64
/// and 128): each warp's 16 M rows normalized, packed and stored with `stmatrix` into the
/// consumer's Q tile in the layout the Q map's box has (per 64-dim column block, 64 rows of 128
/// bytes in the 128-byte swizzle), then, once the consumer's four warps are done, one thread
/// writes the tile with one bulk tensor store per column block through the output's map (the
/// Q map's layout at `out`) and waits until the copies have read the tile. The stores leave the
/// warps' load/store pipeline to the TMA unit. `token`: the consumer's first token; `head`: its
/// first query head.
///
/// # Safety
/// Every thread of the consumer calls it, in uniform control flow; `tile` is the consumer's Q
/// tile, which no S product reads any more and no other thread reads or writes until this
/// consumer arrives on its slot's empty barrier (after this returns); `o_map` acquired by the
/// consumer's thread 0 (`wtid` 0), whose tensor's tokens `token..token + 64 / group` of heads
/// `head..head + group` no other thread writes.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn store_rows_tma<Q: MmaElement, const D: usize, const NTILES: usize, const PAIRS: usize>(
    tile: u32,
    warp: u32,
    wtid: u32,
    consumer: u32,
    o_map: u64,
    token: u32,
    head: u32,
    l: &[f32; 2],
    o: &[[f32; 4]; NTILES],
) {
    const { assert!(NTILES * 8 == D && PAIRS * 2 == NTILES, "n-tiles of 8 dims, in pairs") };
    // 16-byte chunk `chunk` (8 dims) of M row `m`: column block chunk / 8, swizzled in its row.
    let chunk_at =
        |m: u32, chunk: u32| tile + (chunk / 8) * (CONSUMER_M * 128) + m * 128 + 16 * ((chunk % 8) ^ (m % 8));
    stage_rows::<Q, NTILES, PAIRS>(l, o, |row, chunk| chunk_at(warp * 16 + row, chunk));
    // The tile's generic writes, visible to the bulk copies (the async proxy) after the barrier.
    wgmma::fence_proxy_async_shared();
    barrier::sync_named_id(5 + consumer, WARPGROUP);
    if wtid == 0 {
        unroll::<4>(|j| {
            if j < D / 64 {
                // < 2^31: max_tokens and the heads are validated on the host.
                tma::store_3d(o_map, tile + j as u32 * CONSUMER_M * 128, 64 * j as i32, head as i32, token as i32);
            }
        });
        tma::bulk_commit_group();
        // The caller's arrival on the slot's empty barrier then frees the tile.
        tma::bulk_wait_group_read::<0>();
    }
}

/// 16 bytes, aligned for one vector store.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Chunk([u32; 4]);

/// A consumer warp's rows of the output (head_dim 64 and 128, where the Q ring has two slots):
/// its 16 M rows of O normalized, packed and stored with `stmatrix` into its quarter of the
/// consumer's Q tile `tile` (16 rows of `2 D` bytes; 16-byte chunk `c` of row `r` at chunk
/// `c ^ (r % 8)`: no bank conflicts for the matrix stores or for the row reads), then read back
/// 16 bytes a lane and written with 16-byte stores, whole rows per half warp. From the
/// accumulator's layout a lane holds 4-byte pieces 16 bytes apart: four times the store
/// instructions, and (at 4 x 1k, where an item averages 4.5 key tiles) those stores held the
/// consumers for a tenth of their time (benchmarks/NOTES.md "v21").
///
/// # Safety
/// Every lane of the warp calls it; `tile` is the consumer's Q tile, which no S product reads any
/// more and no other thread reads or writes until this consumer arrives on its slot's empty
/// barrier.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn store_rows_staged<Q: MmaElement, const D: usize, const NTILES: usize, const PAIRS: usize>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    tile: u32,
    warp: u32,
    c_base: u32,
    r0: u32,
    rc: u32,
    g: u32,
    l: &[f32; 2],
    o: &[[f32; 4]; NTILES],
) {
    // PAIRS: n-tile pairs, and 16-byte chunks a lane reads (16 rows of D / 8 chunks, 32 lanes).
    const { assert!(NTILES * 8 == D && PAIRS * 2 == NTILES, "n-tiles of 8 dims, in pairs") };
    let lane = lane_id();
    let row_bytes = 2 * D as u32;
    let region = tile + warp * 16 * row_bytes;
    let chunk_at = |row: u32, chunk: u32| region + row * row_bytes + 16 * (chunk ^ (row % 8));
    stage_rows::<Q, NTILES, PAIRS>(l, o, chunk_at);
    sync_warp();
    let (group, nq) = (p.num_q_heads / p.num_kv_heads, p.num_q_heads as usize);
    // Lane `l`'s k-th chunk: chunk `l % chunks` of row `(32 k + l) / chunks`. The reads are
    // written first, each into registers of its own: a store holds its source registers until
    // it has read them, and one register set for all would make every read wait for a store.
    let chunks = D as u32 / 8;
    let (chunk, row_of) = (lane % chunks, |k: usize| (k as u32 * WARP_SIZE + lane) / chunks);
    let mut v = [[0u32; 4]; PAIRS];
    unroll::<PAIRS>(|k| v[k] = shared::load_v4(chunk_at(row_of(k), chunk)));
    unroll::<PAIRS>(|k| {
        let m_row = c_base + warp * 16 + row_of(k);
        let r = m_row / group;
        if r < rc {
            let h = g * group + m_row % group;
            let dst = ptr.out.add(((r0 + r) as usize * nq + h as usize) * D + chunk as usize * 8);
            *(dst as *mut Chunk) = Chunk(v[k]);
        }
    });
}

/// Stores the call's K/V, Q and output tensor maps (`maps`, in [`WsMap`]'s order) after the plan
/// at `plan` ([`ws_tensor_map_address`]), released to the tensor-map proxy: for the planning
/// kernel, or for block 0 of a kernel that plans itself.
///
/// # Safety
/// One thread calls it; `plan` holds [`ws_scratch_bytes`]`(plan_capacity)` bytes, 16-byte
/// aligned, whose maps nothing reads meanwhile.
#[inline(always)]
unsafe fn store_maps(plan: *mut u32, plan_capacity: u32, maps: [&TensorMapImage; 3]) {
    let at = |m| ws_tensor_map_address(plan as u64, plan_capacity as u64, m) as *mut u64;
    tma::store_map(at(WsMap::KeysValues), maps[0]);
    tma::store_map(at(WsMap::Queries), maps[1]);
    tma::store_map(at(WsMap::Output), maps[2]);
}

/// The plan state word's value once the plan is published under `tag` ([`plan_or_wait`]): ready
/// (1) under the tag ([`launch_tagged_word`]); any other value (the workspace's earlier contents,
/// 0 as the last block leaves it) means not yet.
#[inline(always)]
const fn plan_ready_word(tag: u32) -> u64 {
    launch_tagged_word(tag, 1)
}

/// Publishes the plan at `plan` under a launch's tag ([`plan_ready_word`]): zeroes the
/// count of blocks done, then, after a GPU-scope fence (the plan's and the maps' writes before it),
/// stores the plan's state word (word 32: a 128-byte line apart from the header's first words,
/// shared with the count of blocks done and the first items, which the planning kernel writes
/// while the tile kernel's blocks may poll: a cost in speed only).
///
/// # Safety
/// One thread calls it, after every write of the plan and its maps is ordered before it (a block
/// barrier); `plan` holds the plan header.
#[inline(always)]
unsafe fn publish_plan(plan: *mut u32, tag: u32) {
    *plan.add(PLAN_BLOCKS_DONE_WORD) = 0;
    gpu_scope::publish_u64(plan.add(PLAN_STATE_WORD) as *mut u64, plan_ready_word(tag));
}

/// A tile block's place among the tile blocks: the grid's own block index and size
/// ([`WholeGrid`]), or in a mix's one launch those of the grid's tile blocks alone ([`TileGrid`]).
pub(crate) trait TileBlocks: Copy {
    /// Whether the tile blocks share the grid with a mix's decode blocks (`paged_attention_mix`,
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

/// The tile blocks of a mix's one launch (`paged_attention_mix`): the grid's blocks after its
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

/// Makes the call's plan and tensor maps ready for this block where they are published under a
/// tag (a nonzero `RpaParams::launch_tag`): where the kernel plans itself ([`ws_plans_itself`],
/// persistent blocks; `RpaParams::decode_apart` 0, 2 or 3), tile block 0 builds them and every
/// other tile block waits until they are published; with a mixed batch's decode rows apart and
/// one block per pair (`decode_apart` 1), [`rpa_plan_ws`] has built and publishes them and every
/// block waits. With 3 (a mix in one launch, `paged_attention_mix`) every block of the grid has
/// waited for the kernel before already, the tile blocks are the grid's last and at most one per
/// multiprocessor, and the decode blocks, which never wait, stand down themselves where the plan
/// falls back: no inputs word, no wait here.
/// One launch per prefill call, two per mix, instead of a planning kernel before (a launch is
/// ~2.5 µs of the host's time, benchmarks/NOTES.md "v24"); with decode rows apart, a grid that
/// need not wait for the decode kernel between (see [`rpa_tiled_ws`]).
///
/// Block 0's thread 0 stores the three tensor maps (released to the tensor-map proxy), its
/// threads build the plan ([`plan_items`], with the block's dynamic shared memory, not yet in use,
/// for the scan), then thread 0 publishes it ([`publish_plan`]: the workspace may hold anything
/// before); every waiting block's thread 0 polls the state word with acquire loads until it reads
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
/// or reads the plan or the maps; `p.launch_tag` nonzero; where `p.decode_apart` is 0 or 2 every
/// block of the grid resident together once running (with 2 after the decode kernel launched
/// with the same tag and `decode_apart`), with 3 the tile blocks at most one per multiprocessor
/// after blocks that never wait (`paged_attention_mix`), with 1 [`rpa_plan_ws`] launched before with the same
/// `p`; `ptr.plan` holds [`ws_scratch_bytes`]`(p.plan_capacity)` bytes, 16-byte aligned, that
/// only this grid (and where it publishes, the planning kernel) touches while it runs; `maps` are
/// the call's K/V, Q and output maps ([`WsMap`]'s order).
#[inline(always)]
unsafe fn plan_or_wait<Q, G: TileBlocks>(ptr: &TiledPointers<Q>, p: &RpaParams, maps: [&TensorMapImage; 3], grid: G) {
    let plan = ptr.plan as *mut u32;
    let state = plan.add(PLAN_STATE_WORD) as *mut u64;
    let ready = plan_ready_word(p.launch_tag);
    // 0: a prefill call; 2: a mix whose decode kernel publishes the inputs word; 1: a mix whose
    // planning kernel publishes the plan; 3: a mix in one launch, whose every block has waited
    // for the kernel before (`paged_attention_mix`).
    let plans_here = p.decode_apart != 1;
    let inputs_word = !G::MIX && p.decode_apart != 0;
    if p.decode_apart == 0 {
        crate::grid_dependency::wait_for_prerequisites();
    }
    if plans_here && grid.block() == 0 {
        if thread_idx_x() == 0 {
            if inputs_word {
                // The decode kernel's first block has passed its grid dependency wait: the
                // kernels that write the call's inputs have completed. Then the word is left
                // free for a replay under the same tag (the next writer, that replay's decode
                // kernel, waits for this grid's end first).
                let inputs = plan.add(PLAN_INPUTS_READY_WORD) as *mut u64;
                gpu_scope::wait_for_u64(inputs, inputs_ready_word(p.launch_tag));
                AtomicU64::from_ptr(inputs).store(0, Ordering::Relaxed);
            }
            store_maps(plan, p.plan_capacity, maps);
        }
        if inputs_word {
            // The metadata's loads after thread 0's acquire.
            sync_threads();
        }
        plan_items(ptr.cu_q_lens, ptr.num_seqs, plan, *p, WS_THREADS);
        // The scan's generic writes before the copies (async proxy) into the same shared memory.
        wgmma::fence_proxy_async_shared();
        // Every thread's plan writes before thread 0 publishes them.
        sync_threads();
        if thread_idx_x() == 0 {
            publish_plan(plan, p.launch_tag);
        }
    } else if thread_idx_x() == 0 {
        gpu_scope::wait_for_u64(state, ready);
    }
    sync_threads();
    // Q's and K/V's bulk copies (the async proxy) after the acquire above, which no grid
    // dependency wait backs with decode rows apart.
    tma::fence_proxy_async_global();
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
unsafe fn count_block_done<Q>(ptr: &TiledPointers<Q>, grid: impl TileBlocks) {
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
/// the empty barrier let thread 0 reuse it). Block-uniform.
///
/// # Safety
/// As [`PlanView::item`]; every thread of the block calls it (the schedule ring's barriers count
/// them all); the pair indices, with a grid's width of slack, fit in a `u32` (on the host,
/// `ws_work_indices_fit`).
#[inline(always)]
unsafe fn for_each_pair<Q>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    smem: SharedLayout,
    grid: impl TileBlocks,
    mut f: impl FnMut(u32, u32, u32, u32),
) {
    let plan = PlanView::load(ptr);
    let heads = p.num_kv_heads.max(1);
    let (blocks, block) = (grid.blocks(), grid.block());
    let dynamic = p.dynamic_pairs != 0;
    let mut n = 0u32;
    loop {
        let w = if dynamic {
            let slot = RingSlot::sched_of(n);
            if thread_idx_x() == 0 {
                barrier::wait_parity(smem.empty_sched(slot.stage), slot.parity ^ 1);
                // The counter is zeroed with the plan.
                let counter = AtomicU32::from_ptr(ptr.plan.add(PLAN_WORK_COUNTER_WORD) as *mut u32);
                *smem.sched(slot.stage) = counter.fetch_add(1, Ordering::Relaxed);
                barrier::arrive(smem.full_sched(slot.stage));
            }
            barrier::wait_parity(smem.full_sched(slot.stage), slot.parity);
            let w = *smem.sched(slot.stage);
            barrier::arrive(smem.empty_sched(slot.stage));
            w
        } else {
            n * blocks + if n.is_multiple_of(2) { block } else { blocks - 1 - block }
        };
        let Some((seq, r0, rc)) = plan.item(ptr, p, w / heads) else { break };
        f(seq, r0, rc, w % heads);
        n += 1;
    }
}

/// The warp-specialized kernel's body (see the module docs) as block `grid.block` of
/// `grid.blocks` tile blocks: the whole grid (`rpa_tile_ws_*`), or the tile blocks of a mix's one
/// launch (`paged_attention_mix`).
#[inline(always)]
pub(crate) unsafe fn rpa_tiled_ws<
    Q: MmaElement,
    const D: usize,
    const KSTEPS: usize,
    const NTILES: usize,
    const KN: usize,
    const KSP: usize,
    const PW: usize,
    G: TileBlocks,
>(
    ptr: TiledPointers<Q>,
    p: RpaParams,
    maps: [&TensorMapImage; 3],
    grid: G,
) {
    const {
        assert!(NTILES * 8 == D && KSTEPS * 16 == D && (D == 64 || D == 128 || D == 256), "head_dim 64, 128 or 256");
        // S n-tiles, P k-steps and presence words of a tile of `ws_keys(D)` keys.
        assert!(KN * 8 == ws_keys(D as u32) as usize && KSP * 16 == KN * 8 && PW * 32 == KN * 8, "tile shape");
    };
    // Launched programmatically (sm_90 image): the kernel after this one may launch once every
    // block has started; it waits for this grid's end before touching what this one does.
    crate::grid_dependency::launch_dependents();
    // A plan published under a tag (a nonzero tag; never at head_dim 256, whose kernels keep no
    // code for it): built by block 0 (`plan_or_wait`), or with decode rows apart and one block
    // per pair by the planning kernel; with decode rows apart, no wait for the decode kernel
    // between.
    let tagged_plan = ws_plans_itself(D as u32) && p.launch_tag != 0;
    let q_by_tma = ws_q_by_tma(D as u32, p.num_q_heads / p.num_kv_heads.max(1));
    let raw = dynamic_shared_mem::<u8>();
    let raw_address = shared_address(raw);
    let base = (raw_address + 1023) & !1023;
    let smem = SharedLayout { base, base_ptr: raw.add((base - raw_address) as usize), head_dim: D as u32 };
    let tid = thread_idx_x();
    if tid == 0 {
        for stage in 0..WS_K_STAGES {
            barrier::init(smem.full_k(stage), FULL_ARRIVALS);
            barrier::init(smem.empty_k(stage), EMPTY_ARRIVALS);
        }
        for stage in 0..WS_V_STAGES {
            barrier::init(smem.full_v(stage), FULL_ARRIVALS);
            barrier::init(smem.empty_v(stage), EMPTY_ARRIVALS);
        }
        for slot in 0..MAX_Q_SLOTS {
            barrier::init(smem.full_q(slot), if q_by_tma { 1 } else { Q_LOADERS });
            barrier::init(smem.empty_q(slot), EMPTY_ARRIVALS);
        }
        for slot in 0..SCHED_SLOTS {
            barrier::init(smem.full_sched(slot), 1);
            barrier::init(smem.empty_sched(slot), WS_THREADS);
        }
    }
    if tagged_plan {
        // (Its block barriers order the mbarriers' initialization before their use too.)
        plan_or_wait(&ptr, &p, maps, grid);
    } else {
        // The inputs and the plan (and with decode rows apart, the decode kernel's end) after
        // the wait.
        crate::grid_dependency::wait_for_prerequisites();
        sync_threads();
    }
    // Every role walks the same items and tiles, counting tiles (and sequence items) the same way.
    let mut tiles = 0u32;
    let mut items = 0u32;
    let role = tid / WARPGROUP;
    if role == 0 {
        if D > 128 {
            warpgroup::release_registers::<PRODUCER_REGISTERS_D256>();
        } else {
            warpgroup::release_registers::<PRODUCER_REGISTERS>();
        }
        if tid < 2 * WARP_SIZE {
            let map = ws_tensor_map_address(ptr.plan as u64, p.plan_capacity as u64, WsMap::KeysValues);
            tma::acquire_map(map);
            if tid < WARP_SIZE {
                for_each_pair(
                    &ptr,
                    &p,
                    smem,
                    grid,
                    #[inline(always)]
                    |seq, r0, rc, g| {
                        if seq != NO_SEQUENCE {
                            produce_item::<Q, D, false, PW>(&ptr, &p, smem, map, &mut tiles, seq, r0, rc, g)
                        }
                    },
                );
            } else {
                for_each_pair(
                    &ptr,
                    &p,
                    smem,
                    grid,
                    #[inline(always)]
                    |seq, r0, rc, g| {
                        if seq != NO_SEQUENCE {
                            produce_item::<Q, D, true, PW>(&ptr, &p, smem, map, &mut tiles, seq, r0, rc, g)
                        }
                    },
                );
            }
        } else if q_by_tma {
            let issuer = tid == 2 * WARP_SIZE;
            let q_map = ws_tensor_map_address(ptr.plan as u64, p.plan_capacity as u64, WsMap::Queries);
            if issuer {
                tma::acquire_map(q_map);
            }
            for_each_pair(
                &ptr,
                &p,
                smem,
                grid,
                #[inline(always)]
                |seq, r0, _, g| {
                    if seq != NO_SEQUENCE && issuer {
                        load_q_item_tma::<D>(&p, smem, q_map, &mut items, r0, g)
                    }
                },
            );
        } else {
            for_each_pair(
                &ptr,
                &p,
                smem,
                grid,
                #[inline(always)]
                |seq, r0, rc, g| {
                    if seq != NO_SEQUENCE {
                        load_q_item::<Q, D>(&ptr, &p, smem, tid - 2 * WARP_SIZE, &mut items, r0, rc, g)
                    }
                },
            );
        }
    } else {
        if D > 128 {
            warpgroup::claim_registers::<CONSUMER_REGISTERS_D256>();
        } else {
            warpgroup::claim_registers::<CONSUMER_REGISTERS>();
        }
        let consumer = role - 1;
        // The output's tensor map, for the epilogue's bulk stores of whole consumer tiles
        // (`store_rows_tma`); 0 where Q is not loaded by the map (another layout).
        let o_map =
            if q_by_tma { ws_tensor_map_address(ptr.plan as u64, p.plan_capacity as u64, WsMap::Output) } else { 0 };
        let issuer = tid.is_multiple_of(WARPGROUP); // the consumer's thread 0
        if o_map != 0 && issuer {
            tma::acquire_map(o_map);
        }
        // Ping-pong turns (see `consume_item`): consumer 0 goes first.
        let pingpong = p.consumer_schedule != 0;
        if pingpong && consumer == 1 {
            barrier::arrive_named::<3>(2 * WARPGROUP);
        }
        for_each_pair(
            &ptr,
            &p,
            smem,
            grid,
            #[inline(always)]
            |seq, r0, rc, g| {
                consume_item::<Q, D, KSTEPS, NTILES, KN, KSP, PW>(
                    &ptr, &p, smem, consumer, o_map, &mut tiles, &mut items, seq, r0, rc, g,
                )
            },
        );
        // The last bulk stores' writes done before the block ends.
        if o_map != 0 && issuer {
            tma::bulk_wait_group::<0>();
        }
        // Consumer 1's last turn ended with an arrival on consumer 0's barrier.
        if pingpong && consumer == 0 {
            barrier::sync_named::<3>(2 * WARPGROUP);
        }
    }
    if tagged_plan {
        count_block_done(&ptr, grid);
        if !G::MIX && p.decode_apart != 0 {
            // The decode kernel before this one may still run (its rows are not this kernel's):
            // this grid ends after it, so that the kernels after the call, which wait for this
            // grid only, find the decode rows written too.
            crate::grid_dependency::wait_for_prerequisites();
        }
    }
}

/// The plan of the warp-specialized kernel ([`plan_items`] with [`ws_tile_rows`] rows per tile
/// item), and its K/V, Q and output tensor maps stored after the plan ([`ws_tensor_map_address`]):
/// launched before it where the kernel does not plan itself (see [`ws_plans_itself`]). A nonzero
/// `params.launch_tag` (decode rows apart, one block per pair) publishes the plan under it
/// ([`plan_or_wait`]).
///
/// # Safety
/// As `rpa_plan`; `plan` holds [`ws_scratch_bytes`]`(params.plan_capacity)` bytes (16-byte
/// aligned); `map` describes the call's KV pool (`tiled_ws_supports` on the host), `q_map` its
/// queries and `o_map` its output (dims x query heads x `max_tokens`, boxes [`ws_q_box`]) where
/// [`ws_q_by_tma`], else unused.
#[cfg(any(xgk_sm90, not(target_arch = "nvptx64")))]
#[kernel]
pub unsafe fn rpa_plan_ws(
    cu_q_lens: *const i32,
    num_seqs: *const i32,
    plan: *mut u32,
    params: RpaParams,
    map: TensorMapImage,
    q_map: TensorMapImage,
    o_map: TensorMapImage,
) {
    // Programmatic dependent launch (sm_90 image): the tile kernel launches while this one runs
    // and waits for the plan before reading it.
    crate::grid_dependency::launch_dependents();
    crate::grid_dependency::wait_for_prerequisites();
    if thread_idx_x() == 0 {
        store_maps(plan, params.plan_capacity, [&map, &q_map, &o_map]);
    }
    plan_items(cu_q_lens, num_seqs, plan, params, PLAN_THREADS);
    if params.launch_tag != 0 {
        // With decode rows apart, the tile kernel waits for the plan by its state word, not for
        // this grid's end ([`plan_or_wait`]).
        sync_threads();
        if thread_idx_x() == 0 {
            publish_plan(plan, params.launch_tag);
        }
    }
}

/// One warp-specialized kernel per (q dtype = KV dtype, head_dim): `rpa_tile_ws_<q>_<q>_d<D>`,
/// with the head dim's keys per tile ([`ws_keys`]).
macro_rules! rpa_tile_ws_kernels {
    ($( $name:ident: $q:ty, $d:literal, $keys:literal; )*) => {$(
        /// The warp-specialized tile kernel (see the module docs), with [`ws_tile_rows`] rows
        /// per tile item: one launch per call where it plans itself (a nonzero
        /// `params.launch_tag` with `params.decode_apart` 0, see [`ws_plans_itself`]; after the
        /// pipelined decode kernel, beside which it runs, with `decode_apart` 2), else after
        /// [`rpa_plan_ws`] (and the pipelined decode kernel where `params.decode_apart` is 1,
        /// beside which it runs under a nonzero tag).
        ///
        /// # Safety
        /// Grid `(n, 1)` with n at most `params.plan_capacity * num_kv_heads` (whose triple, and
        /// that of `max_tokens * num_kv_heads`, fit in a `u32`), [`WS_THREADS`] threads and
        /// [`ws_shared_bytes`] of dynamic shared memory; every pointer a device buffer of the
        /// shape `params` describes, `plan` [`ws_scratch_bytes`]`(params.plan_capacity)` bytes
        /// (16-byte aligned) that only this grid writes while it runs (with decode rows apart, the
        /// planning kernel before it may still be writing it, or the decode kernel its inputs
        /// word): written by [`rpa_plan_ws`] with the same `params` (the maps unused; with a
        /// nonzero `params.launch_tag` only where `params.decode_apart` is 1), or of any contents
        /// where the kernel plans itself (a nonzero tag, `params.decode_apart` 0, or 2 after the
        /// decode kernel launched with the same tag), with the grid at most one block per
        /// multiprocessor, `map` describing `kv` (`tiled_ws_supports` on the host),
        /// `q_map` the queries and `o_map` the output (dims x query heads x `max_tokens`, boxes
        /// [`ws_q_box`]) where [`ws_q_by_tma`]. Metadata values may be anything: they never
        /// lead outside the buffers.
        #[kernel(max_threads = 384)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $name(
            q: *const $q, kv: *const $q, kv_lens: *const i32, page_indices: *const i32,
            cu_q_lens: *const i32, num_seqs: *const i32, plan: *const u32, out: *mut $q,
            params: RpaParams, map: TensorMapImage, q_map: TensorMapImage, o_map: TensorMapImage,
        ) {
            rpa_tiled_ws::<$q, $d, { $d / 16 }, { $d / 8 }, { $keys / 8 }, { $keys / 16 }, { $keys / 32 }, WholeGrid>(
                TiledPointers { q, kv, kv_lens, page_indices, cu_q_lens, num_seqs, plan, out },
                params,
                [&map, &q_map, &o_map],
                WholeGrid,
            )
        }
    )*};
}

#[cfg(any(xgk_sm90, not(target_arch = "nvptx64")))]
rpa_tile_ws_kernels! {
    rpa_tile_ws_f16_f16_d64: f16, 64, 128;
    rpa_tile_ws_f16_f16_d128: f16, 128, 128;
    rpa_tile_ws_f16_f16_d256: f16, 256, 64;
    rpa_tile_ws_bf16_bf16_d64: Bf16, 64, 128;
    rpa_tile_ws_bf16_bf16_d128: Bf16, 128, 128;
    rpa_tile_ws_bf16_bf16_d256: Bf16, 256, 64;
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
    fn register_budgets_fit_the_pool_of_384_threads() {
        // 65536 registers per multiprocessor; 384 threads get at most 168 each (a multiple of 8).
        const { assert!(WARPGROUP * PRODUCER_REGISTERS + 2 * WARPGROUP * CONSUMER_REGISTERS <= WS_THREADS * 168) };
        const { assert!(PRODUCER_REGISTERS.is_multiple_of(8) && CONSUMER_REGISTERS.is_multiple_of(8)) };
        assert_eq!(WS_THREADS, 3 * WARPGROUP);
    }

    #[test]
    fn ring_slots_alternate_parity_per_round() {
        for (slots, of) in [(WS_K_STAGES, RingSlot::k_of as fn(u32) -> RingSlot), (WS_V_STAGES, RingSlot::v_of)] {
            let at = |n: u32| {
                let s = of(n);
                (s.stage, s.parity)
            };
            assert_eq!(at(0), (0, 0));
            assert_eq!(at(slots - 1), (slots - 1, 0));
            assert_eq!(at(slots), (0, 1));
            assert_eq!(at(2 * slots), (0, 0));
            assert_eq!(at(2 * slots - 1), (slots - 1, 1));
        }
    }
}
