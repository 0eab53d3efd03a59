//! The producer warpgroup: K and V tiles by TMA into their rings, with the tiles' key presence
//! (warps 0 and 1), and each item's Q tile (warps 2 and 3). With fp8 KV ([`produce_item_fp8`]):
//! K and V raw into the staging rings (warp 0), Q (warp 1), and the converters (warps 2 and 3,
//! [`super::converter`]).

use super::layout::{q_tile_bytes, SharedLayout};
use super::trace::{self, Point};
use super::{ws_keys, CONSUMER_M, MAX_CONSUMERS, WS_BLOCK_KEYS};
use crate::attention::planner::TiledPointers;
use crate::attention::{page_is_valid, RpaParams};
use crate::copy::{commit_group, cp_async_16, wait_all, CopyHint};
use crate::kernels::prefill::item::ItemRows;
use crate::kernels::unroll;
use crate::tma::{self};
use crate::warp::{lane_id, sync_warp, warp_ballot};
use crate::wgmma;

/// Keys `[lo, hi)` the block visits for an item: the item's, `lo` rounded down to a whole 16-key
/// block (every role derives its tile count from this).
#[inline(always)]
pub(super) fn item_keys(item: &ItemRows) -> (u32, u32) {
    let (lo, hi) = item.keys();
    (lo & !(WS_BLOCK_KEYS - 1), hi)
}

/// Bit k set for the keys `base + k` (k < 32) below `keys`.
#[inline(always)]
pub(super) fn keys_below(keys: u32, base: u32) -> u32 {
    let n = keys.saturating_sub(base);
    if n >= 32 {
        u32::MAX
    } else {
        (1u32 << n) - 1
    }
}

/// Lane `lane`'s 16-key block of the tile at `tile_base` (lanes below `blocks` have one): the
/// token of its first key in the pool, or -16 (a box wholly outside the tensor: zeros) for a
/// block on an invalid page or at or past the item's end `hi`.
///
/// # Safety
/// As [`ItemRows::load`]: `seq` a sequence of the call, its page-table row readable.
#[inline(always)]
unsafe fn block_token<Q>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    seq: u32,
    tile_base: u32,
    hi: u32,
    lane: u32,
    blocks: u32,
) -> i32 {
    let j = tile_base + lane * WS_BLOCK_KEYS;
    let mut token = -(WS_BLOCK_KEYS as i32);
    if lane < blocks && j < hi {
        // A plain division (the parameter is read from the constant bank): the producer runs on
        // few registers, where a multiply-high divider would hold two more.
        let (slot_index, in_page) = (j / p.page_size, j % p.page_size);
        let page = *ptr.page_indices.add(seq as usize * p.pages_per_seq as usize + slot_index as usize);
        if page_is_valid(page, p.total_pages) {
            // < 2^31: total_pages * page_size is checked on the host.
            token = (page as u32 * p.page_size + in_page) as i32;
        }
    }
    token
}

/// Writes a tile's presence words at `presence`: key k is present when its 16-key block is valid
/// (bit `k / 16` of `valid_blocks`, the warp's ballot of [`block_token`]s) and k is below `keys`,
/// the keys left in the item from the tile's first.
///
/// # Safety
/// `presence` points to `PW` words of this block's shared memory no one else touches meanwhile.
#[inline(always)]
unsafe fn write_presence<const PW: usize>(presence: *mut u32, valid_blocks: u32, keys: u32) {
    unroll::<PW>(|w| {
        let blocks = (valid_blocks >> (2 * w)) & 3;
        let spread = ((blocks & 1) * 0xffff) | ((blocks >> 1) * 0xffff_0000);
        *presence.add(w) = spread & keys_below(keys, 32 * w as u32);
    });
}

/// One producer warp's part of one item: for each key tile, K (`VALUES` false: the producer's
/// warp 0) or V (`VALUES` true: its warp 1): wait until the tile's stage is empty, for K write
/// the presence masks, announce the stage's bytes and copy, lane `b` < 8 its 16-key block `b`
/// (page-table entry, then one bulk copy per 64-dim column block). Two warps, so that K and V
/// each have a warp to issue their copies: a copy's coordinates are per lane, and ptxas issues
/// the lanes' copies one after another (a loop of lane election, moves to uniform registers and
/// the copy), which one warp for both K and V could not keep ahead of the consumers. `tiles`: the
/// block's tile counter; `map`: the K/V tensor map (global address, acquired).
///
/// # Safety
/// Every lane of the producer's warp 0 (`VALUES` false) or warp 1 (true) calls it for the
/// block's next item in the schedule, with the block's rings initialized in `smem` and `tiles` in
/// step with the consumers' count; `map` the acquired K/V tensor map of `ptr.kv`; `ptr` and `p`
/// as [`super::rpa_tiled_ws`] takes them.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn produce_item<Q, const D: usize, const VALUES: bool, const PW: usize>(
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
    let traced = trace::ENABLED && !VALUES && lane == 0 && *tiles == 0;
    if traced {
        trace::mark(ptr.plan, p.plan_capacity, Point::FirstPair);
    }
    let (lo, hi) = item_keys(&ItemRows::load(ptr, p, seq, r0, rc));
    if traced {
        trace::mark(ptr.plan, p.plan_capacity, Point::ItemRows);
    }
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
        let tile_base = lo + i * keys;
        let token = block_token(ptr, p, seq, tile_base, hi, lane, blocks);
        if VALUES {
            let ring = smem.v_ring();
            let stage = ring.stage(n);
            ring.acquire(stage);
            if lane == 0 {
                ring.commit_bytes(stage, tile_bytes);
            }
            // The copies complete on the barrier once lane 0 has announced their bytes.
            sync_warp();
            copy_tile(smem.v(stage.index), k_head + 1, token, ring.full_barrier(stage));
        } else {
            let ring = smem.k_ring();
            let stage = ring.stage(n);
            // Bit b: block b is on a valid page (and starts before the item's end).
            let valid_blocks = warp_ballot(token >= 0);
            ring.acquire(stage);
            if lane == 0 {
                // Lane 0 writes the words and its arrival releases them: the consumers' reads
                // are ordered after the writes by the full barrier alone.
                write_presence::<PW>(smem.presence(stage.index), valid_blocks, hi - tile_base);
                ring.commit_bytes(stage, tile_bytes);
            }
            sync_warp();
            copy_tile(smem.k(stage.index), k_head, token, ring.full_barrier(stage));
            if traced && i == 0 {
                trace::mark(ptr.plan, p.plan_capacity, Point::FirstKIssued);
            }
            if trace::ENABLED && lane == 0 {
                trace::mark_tile(ptr.plan, p.plan_capacity, 0, n, trace::TileEvent::KIssued);
            }
        }
    }
}

/// The K/V warp's part of one item with fp8 KV (the producer's warp 0): for each key tile, lane
/// `b` < 8 finds its 16-key block's token as [`produce_item`] does; then K (with the presence
/// words, in the K staging stage's slot) and V, each once its staging stage is empty: one bulk
/// copy per block of the raw rows, unswizzled (key `k` of the tile at `k * D` bytes). One warp
/// for both: a copy per block and operand is 16 per tile, as many as one 16-bit warp issues.
///
/// # Safety
/// One whole warp calls it for every item of the block's walk, `map` the
/// call's KV pool map (fp8, bytes) acquired, the staging rings initialized.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn produce_item_fp8<Q, const D: usize, const PW: usize>(
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
    let k_head = 2 * g as i32;
    let tile_bytes = keys * D as u32;
    let blocks = keys / WS_BLOCK_KEYS;
    let first_tile = *tiles;
    *tiles += num_tiles;
    let block_offset = lane * WS_BLOCK_KEYS * D as u32;
    let (k8, v8) = (smem.k8_ring(), smem.v8_ring());
    for i in 0..num_tiles {
        let n = first_tile + i;
        let tile_base = lo + i * keys;
        let token = block_token(ptr, p, seq, tile_base, hi, lane, blocks);
        let valid_blocks = warp_ballot(token >= 0);
        let ks = k8.stage(n);
        k8.acquire(ks);
        if lane == 0 {
            write_presence::<PW>(smem.staged_presence(ks.index), valid_blocks, hi - tile_base);
            k8.commit_bytes(ks, tile_bytes);
        }
        sync_warp();
        if lane < blocks {
            tma::load_3d(smem.k8(ks.index) + block_offset, map, 0, k_head, token, k8.full_barrier(ks));
        }
        if trace::ENABLED && lane == 0 {
            trace::mark_tile(ptr.plan, p.plan_capacity, 0, n, trace::TileEvent::KIssued);
        }
        let vs = v8.stage(n);
        v8.acquire(vs);
        if lane == 0 {
            v8.commit_bytes(vs, tile_bytes);
        }
        sync_warp();
        if lane < blocks {
            tma::load_3d(smem.v8(vs.index) + block_offset, map, 0, k_head + 1, token, v8.full_barrier(vs));
        }
    }
}

/// The Q loaders' part of one item (the producer warpgroup's warps 2 and 3, `loader` 0..64 of
/// `loaders`; with fp8 KV warp 1, 0..32): once the item's Q slot is empty, the `C` consumers' 64 M
/// rows each into their tiles, laid out as K is (64-dim
/// column blocks of 128-byte rows, swizzled), rows past the item zero-filled; then each loader
/// waits for its copies, makes them visible to the tensor cores' async proxy and arrives on the
/// slot's full barrier. `items`: the block's count of sequence items.
///
/// # Safety
/// Each of the `loaders` loader threads calls it (`loader` its index) for the block's next item,
/// with `items` in step with the consumers' Q count; rows `[r0, r0 + rc)` of that item and `g` below
/// `p.num_kv_heads`; `ptr` and `p` as [`super::rpa_tiled_ws`] takes them.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn load_q_item<Q, const D: usize, const C: u32>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    smem: SharedLayout,
    loader: u32,
    loaders: u32,
    items: &mut u32,
    r0: u32,
    rc: u32,
    g: u32,
) {
    let ring = smem.q_ring();
    let stage = ring.stage(*items);
    *items += 1;
    let group = p.num_q_heads / p.num_kv_heads;
    let nq = p.num_q_heads as usize;
    let row_chunks = D as u32 / 8;
    let no_hint = CopyHint { prefetch_256: false };
    ring.acquire(stage);
    let mut c = loader;
    while c < C * CONSUMER_M * row_chunks {
        // M row `m` (of the item's 64 C) and its 16-byte chunk; consumer m / 64 holds it.
        let (m, chunk) = (c / row_chunks, c % row_chunks);
        let (r, h) = (m / group, g * group + m % group);
        let src =
            if r < rc { ptr.q.add(((r0 + r) as usize * nq + h as usize) * D + chunk as usize * 8) } else { ptr.q };
        let tile = smem.q(stage.index, m / CONSUMER_M);
        let dst = tile + (chunk / 8) * CONSUMER_M * 128 + wgmma::swizzled_128b_offset(m % CONSUMER_M, chunk % 8);
        cp_async_16(dst, src as *const u8, r < rc, no_hint);
        c += loaders;
    }
    commit_group();
    wait_all();
    // The tile is read by `wgmma` (the async proxy): order the copies' writes before it.
    wgmma::fence_proxy_async_shared();
    ring.commit(stage);
}

/// The Q loaders' part of one item where a consumer's 64 M rows are one box of the Q tensor map
/// `map` ([`ws_q_by_tma`]; one thread of the loaders calls it): once the item's Q slot is empty,
/// announce the `C` tiles' bytes on the slot's full barrier and copy, per consumer and 64-dim column
/// block, the box of its `64 / group` tokens' `group` heads, in the 128-byte swizzle that
/// [`load_q_item`] writes by hand. Rows past the item load other tokens' queries (or zeros past
/// the tensor): the consumers never store those rows. `items`: the thread's count of sequence
/// items.
///
/// # Safety
/// One thread of the loaders calls it for the block's next item, with `items` in step with the
/// consumers' Q count; `map` the acquired Q tensor map ([`ws_q_by_tma`]); `p` as
/// [`super::rpa_tiled_ws`] takes it.
#[inline(always)]
pub(super) unsafe fn load_q_item_tma<const D: usize, const C: u32>(
    p: &RpaParams,
    smem: SharedLayout,
    map: u64,
    items: &mut u32,
    r0: u32,
    g: u32,
) {
    let ring = smem.q_ring();
    let stage = ring.stage(*items);
    *items += 1;
    let group = p.num_q_heads / p.num_kv_heads;
    ring.acquire(stage);
    let full = ring.full_barrier(stage);
    ring.commit_bytes(stage, C * q_tile_bytes(D as u32));
    unroll::<{ MAX_CONSUMERS as usize }>(|c| {
        if c as u32 >= C {
            return;
        }
        // < 2^31: max_tokens is validated on the host.
        let token = (r0 + c as u32 * (CONSUMER_M / group)) as i32;
        unroll::<4>(|j| {
            if j < D / 64 {
                let dst = smem.q(stage.index, c as u32) + j as u32 * CONSUMER_M * 128;
                tma::load_3d(dst, map, 64 * j as i32, (g * group) as i32, token, full);
            }
        });
    });
}
