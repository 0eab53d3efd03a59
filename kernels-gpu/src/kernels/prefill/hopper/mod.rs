//! Ragged paged attention over 128-row query tiles with warp specialization (sm_90a image): the
//! prefill kernel on Hopper, FlashAttention 3's structure for a paged KV cache.
//!
//! The work items are the tiled kernel's ([`crate::kernels::prefill::tiled::plan_items`], with
//! [`ws_tile_rows`] query rows per tile item: 128 M rows). At head dims 64 and 128 a call is one
//! launch where the blocks are persistent ([`ws_plans_itself`]): block 0 builds the plan in the
//! workspace while the others wait for it ([`plan_or_wait`]); a call whose
//! decode sequences run apart is two launches, the pipelined decode kernel first, this kernel's
//! block 0 planning once the decode kernel's first block says the inputs are written. Otherwise
//! (head_dim 256, one block per pair) [`rpa_plan_ws`] plans first; with decode
//! sequences apart at head dims 64 and 128 it publishes the plan under the call's tag. The call's
//! K/V, Q and output tensor maps ([`crate::tma`]) are the kernel's parameters, read where they
//! lie ([`WsMaps`]). With decode
//! sequences apart (and `XGK_RPA_DECODE_APART=2`, the default) this kernel's blocks wait for the
//! published plan rather than for the decode kernel, which they run beside.
//! A block of [`ws_threads`] threads is a producer warpgroup and two consumer warpgroups (three at
//! head_dim 64 with 16-bit KV, [`ws_consumers`]: 192-row tiles) with different jobs and register
//! budgets ([`crate::warpgroup`]):
//! - warpgroup 0, the *producer*: its warps 0 and 1 load the K and the V tiles of [`ws_keys`]
//!   keys (128; 64 at head_dim 256) into shared-memory rings (two K stages, three V stages: a V stage is released a tile
//!   after its K stage) with the tensor memory accelerator, one bulk copy per (16-key page block,
//!   64-dim column block), lanes 0-7 one 16-key block each, completing the bytes on the stage's
//!   *full* mbarrier; its warps 2 and 3 load each item's Q tile (with one thread's bulk copies
//!   through the call's Q tensor map where a consumer's rows are one box, [`ws_q_by_tma`]; else
//!   `cp.async`, rows past the item zero-filled) into a two-slot ring (one slot at head_dim 256,
//!   always `cp.async`), so the next item's Q is in
//!   place when the consumers finish an item; it runs on 48 registers, the consumers on 224 (24 and
//!   240 at head_dim 256; 32 and 160 with three consumers);
//! - warpgroups 1, 2 (and 3), the *consumers*, own 64 M rows each: per tile S = Q Kᵀ (`wgmma`
//!   `m64n128k16`, or `m64n64k16` for 64-key tiles, Q and K from shared memory), the mask and
//!   online softmax, and O += P V
//!   (`wgmma`, P from registers), in FA3's order (S of tile i issued before the P V of tile i - 1,
//!   the softmax of tile i while that P V runs), releasing each stage on its *empty* mbarrier as
//!   soon as they are done reading it. With `RpaParams::consumer_schedule` 1 the consumers
//!   take turns to issue their products (FA3's ping-pong, a named barrier each, in a round), so
//!   one's softmax runs under the others' matrix products; with 0 they issue freely. At an item's end each
//!   consumer warp stages its rows of O in its own Q tile (`stmatrix`, head dims 64 and 128; at
//!   256, whose Q ring has one slot, they are stored from registers): where Q came by its map and
//!   all 64 of the consumer's rows are in the item, in the map's layout, and one thread writes the
//!   tile with bulk tensor stores through the output's map; else each warp reads its rows back
//!   and writes them with 16-byte stores.
//!
//! With fp8 KV (e4m3 / e5m2, head dims 64 and 128) the tensor cores take f16 operands
//! ([`StagedKv::Operand`], the pipelined kernel's too): the producer's warp 0 copies each tile's
//! raw K and V bytes into two staging rings (one bulk copy per 16-key block, unswizzled), warp 1
//! loads Q, and warps 2 and 3 ([`converter`]) widen
//! the staged tiles into the K and V rings; each consumer warp rewrites its rows of the Q tile as
//! f16 scaled into range, and the KV scales apply in f32 (`k_scale` on the logits, `v_scale` on
//! O). The Q ring has one slot and the V ring two stages there, to make room for the staging.
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

mod consumer;
mod converter;
mod epilogue;
mod layout;
mod producer;
pub mod scheduler;
pub mod trace;

use crate::attention::RpaParams;
use crate::barrier::{self, ids};
use crate::kernel;
use crate::kernels::kv_operand::StagedKv;
use crate::mma::MmaElement;
use crate::num::{Bf16, F8E4M3, F8E5M2};
use crate::shared::{align_swizzle_128b, dynamic_shared_mem, shared_address, SWIZZLE_128B_ALIGN};
use crate::thread::{sync_threads, thread_idx_x};
use crate::tma::{self, TensorMapImage};
use crate::warp::WARP_SIZE;
use crate::warpgroup;

use crate::attention::planner::{plan_bytes, plan_items, TiledPointers, NO_SEQUENCE, PLAN_THREADS};
use crate::kernels::prefill::tiled::TILE_M;
use consumer::consume_item;
use converter::convert_item;
use layout::{data_bytes, tail_bytes, SharedLayout, STAGING_STAGES};
use producer::{load_q_item, load_q_item_tma, produce_item, produce_item_fp8};
use scheduler::{count_block_done, for_each_pair, plan_or_wait, publish_plan, TileBlocks, WholeGrid};

/// Consumer warpgroups of a block at a head dim, with fp8 KV or not ([`rpa_tile_ws_kernels`]'s
/// kernels): three at head_dim 64 with 16-bit KV, as FlashAttention 3 runs it (a tile's products
/// are half head_dim 128's while its softmax is the same, so two consumers' turns leave the tensor
/// cores idle: benchmarks/NOTES.md "v36", "v37"); else two (at head_dim 128 and 256 the consumers'
/// registers hold no third; with fp8 KV the converters take the producer's budget). A mix's tile
/// blocks have two ([`crate::kernels::mix`]).
pub const fn ws_consumers(head_dim: u32, fp8: bool) -> u32 {
    if head_dim == 64 && !fp8 {
        3
    } else {
        2
    }
}
/// Most consumer warpgroups of a block ([`ws_consumers`]).
pub const MAX_CONSUMERS: u32 = 3;
/// Fewest consumer warpgroups of a block: the plan's capacity with [`ws_tile_rows`] of this many
/// bounds every kernel's.
pub const MIN_CONSUMERS: u32 = 2;
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
/// (64 KiB a slot), where shared memory holds no second, and with fp8 KV at head_dim 128, whose
/// staging rings take the second slot's room (at head_dim 64 the block's 112 KiB leave room:
/// two slots there measured level with one released at the item's end, where one released
/// after the last S was ~2 % slower; benchmarks/NOTES.md "v46").
pub const fn ws_q_slots(head_dim: u32, fp8: bool) -> u32 {
    if head_dim > 128 || (fp8 && head_dim > 64) {
        1
    } else {
        MAX_Q_SLOTS
    }
}

/// Stages of the V ring: [`WS_V_STAGES`], or two with fp8 KV (whose staging rings give the
/// copies their lead instead).
pub const fn ws_v_stages(fp8: bool) -> u32 {
    if fp8 {
        2
    } else {
        WS_V_STAGES
    }
}

/// Whether this kernel covers fp8 KV (e4m3 / e5m2, scaled or not, with f16 or bf16 q) at a head
/// dim: 64 and 128 (at 256 the consumers' registers hold no room for Q's conversion).
pub const fn ws_supports_fp8(head_dim: u32) -> bool {
    head_dim == 64 || head_dim == 128
}

/// Threads per block: the producer warpgroup and `consumers` consumer warpgroups
/// ([`ws_consumers`]).
pub const fn ws_threads(consumers: u32) -> u32 {
    WARPGROUP * (1 + consumers)
}
/// Stages of the K ring and of the V ring (a stage of K or V is 32 KiB at head_dim 128). V gets
/// one more: with K(i) and V(i) loaded together, a V stage is released a tile later than its K
/// stage (after P V, not after S), and a third stage gives its copy a tile more of lead.
pub const WS_K_STAGES: u32 = 2;
pub const WS_V_STAGES: u32 = 3;
/// Most slots of the Q ring ([`ws_q_slots`]; the barriers are laid out for this many).
const MAX_Q_SLOTS: u32 = 2;
/// Threads of the producer warpgroup that load Q: its warps 2 and 3 (warps 0 and 1 load K and V).
/// With fp8 KV warp 0 loads K and V, warp 1 Q, and warps 2 and 3 widen the staged tiles (the
/// converters): a warp that waits for an item's Q slot (`mbarrier.try_wait` suspends it) must
/// not hold lanes that convert.
const Q_LOADERS: u32 = WARPGROUP - 2 * WARP_SIZE;
const Q_LOADERS_FP8: u32 = WARP_SIZE;
/// Threads of the converters (fp8 KV): the producer warpgroup's warps 2 and 3.
pub(super) const CONVERTERS: u32 = 2 * WARP_SIZE;
/// Chunks each converter has loaded ahead of the one it widens ([`converter`]) at head dim `d`;
/// the registers they take are in [`PRODUCER_REGISTERS_FP8_D128`] / [`PRODUCER_REGISTERS_FP8`].
/// At head_dim 128 the converters waited on their loads (their slowest step: ncu's short
/// scoreboard, ~55 % of their samples) and the consumers 15 % of their time on converted tiles:
/// four in flight took 5 % off fp8 1 x 8k; at head_dim 64 (8 chunks a converter a tile) four
/// were 1-3 % slower (benchmarks/NOTES.md "v42.6").
pub(super) const fn converter_loads_ahead(d: u32) -> usize {
    if d == 128 {
        4
    } else {
        2
    }
}
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
/// With fp8 KV the producer's warps 2 and 3 widen the staged tiles, each with
/// [`converter_loads_ahead`] chunks in flight: two at head_dim 64, 128 x 72 + 256 x 216 = 384 x
/// 168 (at 48 / 224 ptxas 13.0 spilled 16-24 bytes; at 56 / 216 none with one chunk ahead, some
/// with two); four at head_dim 128, 128 x 80 + 256 x 208 (ptxas spills 12 bytes there, 36-48 at
/// 72 / 216, 60 at 88 / 200; the consumers' 8 fewer registers cost ~2.5 %, the loads gain ~8 %).
const PRODUCER_REGISTERS_FP8: u32 = 72;
const CONSUMER_REGISTERS_FP8: u32 = 216;
const PRODUCER_REGISTERS_FP8_D128: u32 = 80;
const CONSUMER_REGISTERS_FP8_D128: u32 = 208;
/// At head_dim 256 (O alone is 128 registers): 128 x 24 + 256 x 240 = 384 x 168.
const PRODUCER_REGISTERS_D256: u32 = 24;
const CONSUMER_REGISTERS_D256: u32 = 240;
/// Three consumers (head_dim 64, 16-bit KV; 512 threads, at most 128 registers each at launch):
/// 128 x 32 + 384 x 160 = 512 x 128, FA3's budgets. A consumer's S (64), O (32) and P (32) leave
/// it 32 for the softmax and addresses: with ptxas 13.0 it spills a few words (6 local loads and
/// stores a tile), the producer some of its walk's; at 48 / 152 ptxas serialized the consumers'
/// `wgmma`s instead (a wait after each), at 24 / 160 the producer spilled twice as much.
const PRODUCER_REGISTERS_3C: u32 = 32;
const CONSUMER_REGISTERS_3C: u32 = 160;
/// Arrivals that fill a stage: the producer's lane 0, announcing the stage's bytes.
const FULL_ARRIVALS: u32 = 1;
/// Arrivals that empty a stage (or a Q slot): every consumer thread, once it has read it.
const fn empty_arrivals(consumers: u32) -> u32 {
    consumers * WARPGROUP
}
/// Mbarriers: full and empty for each K and V stage, each Q slot, each schedule slot and each
/// fp8 staging stage (K and V).
const BARRIERS: u32 = 2 * (WS_K_STAGES + WS_V_STAGES) + 2 * MAX_Q_SLOTS + 2 * SCHED_SLOTS + 4 * STAGING_STAGES;

/// Whether this kernel covers a head size and GQA group (16-bit KV of q's dtype): head_dim 64,
/// 128 or 256, the tiled kernel's groups.
pub const fn ws_supports(head_dim: u32, group: u32) -> bool {
    matches!(head_dim, 64 | 128 | 256) && group >= 1 && group <= TILE_M
}

/// Query rows per tile item of a block of `consumers` consumer warpgroups for a GQA group (64 M
/// rows, query row x query head pairs, per consumer).
pub const fn ws_tile_rows(group: u32, consumers: u32) -> u32 {
    consumers * CONSUMER_M / group
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

/// The generic addresses of a call's tensor maps, which are the kernel's parameters
/// ([`crate::tma::param_address!`]): the KV pool's (the producer's K and V copies), the queries'
/// (where [`ws_q_by_tma`]) and the output's, Q's layout at `out` (the epilogue's bulk stores,
/// where [`ws_q_by_tma`]; else the host's map is unused).
#[derive(Clone, Copy)]
pub(crate) struct WsMaps {
    pub kv: u64,
    pub q: u64,
    pub out: u64,
}

/// Bytes of scratch the kernel needs: the plan.
pub const fn ws_scratch_bytes(plan_capacity: u64) -> u64 {
    plan_bytes(plan_capacity)
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
/// ring (the `consumers`' Q tiles per slot), the K and V rings (with fp8 KV, the staging rings),
/// then the mbarriers, the presence masks (with K) and the schedule ring. At head_dim 128 and
/// 256: 225 KiB (one block per multiprocessor, as its registers allow anyway; 227 KiB is the most
/// a block may take).
pub const fn ws_shared_bytes(head_dim: u32, fp8: bool, consumers: u32) -> u32 {
    SWIZZLE_128B_ALIGN + data_bytes(head_dim, fp8, consumers) + 8 * BARRIERS + tail_bytes(head_dim)
}

/// The warp-specialized kernel's body (see the module docs) as block `grid.block` of
/// `grid.blocks` tile blocks: the whole grid (`rpa_tile_ws_*`), or the tile blocks of a mix's one
/// launch (`kernels::mix`).
///
/// # Safety
/// Every thread of the block calls it once, on the launch of the kernel that calls it: the
/// warp-specialized tile kernel (its `# Safety`; `grid` the whole grid) or the mix kernel's tile
/// blocks (`rpa_mix_kernels`' `# Safety`; `grid` those blocks), with that kernel's `ptr`, `p` and
/// `maps`.
#[inline(always)]
pub(crate) unsafe fn rpa_tiled_ws<
    Q: MmaElement,
    KV: StagedKv,
    const D: usize,
    const KSTEPS: usize,
    const NTILES: usize,
    const KN: usize,
    const KSP: usize,
    const PW: usize,
    const C: u32,
    G: TileBlocks,
>(
    ptr: TiledPointers<Q>,
    p: RpaParams,
    maps: WsMaps,
    grid: G,
) {
    const {
        // Two consumers, or three at head_dim 64 with 16-bit KV (their registers: `_3C`).
        assert!(C == 2 || (C == 3 && D == 64 && !KV::FP8), "consumer warpgroups");
        // A named barrier per consumer where each syncs alone or in its turn (benchmarks/NOTES.md
        // "v44": three fp8 consumers on WS_Q_CONVERT's two ids gave wrong rows).
        assert!(ids::one_each(ids::WS_PINGPONG, C) && ids::one_each(ids::WS_EPILOGUE, C), "a barrier id per consumer");
        assert!(!KV::FP8 || ids::one_each(ids::WS_Q_CONVERT, C), "a Q-conversion barrier id per fp8 consumer");
        assert!(NTILES * 8 == D && KSTEPS * 16 == D && (D == 64 || D == 128 || D == 256), "head_dim 64, 128 or 256");
        // S n-tiles, P k-steps and presence words of a tile of `ws_keys(D)` keys.
        assert!(KN * 8 == ws_keys(D as u32) as usize && KSP * 16 == KN * 8 && PW * 32 == KN * 8, "tile shape");
        // fp8 KV: at head dims 64 and 128 (f16 operands, `StagedKv::Operand`); else q's own.
        assert!(!KV::FP8 || ws_supports_fp8(D as u32), "fp8 KV: head dims 64 and 128");
    };
    let fp8 = KV::FP8;
    // Launched programmatically (sm_90 image): the kernel after this one may launch once every
    // block has started; it waits for this grid's end before touching what this one does.
    crate::grid_dependency::launch_dependents();
    if trace::ENABLED && thread_idx_x() == 0 {
        trace::mark(ptr.plan, p.plan_capacity, trace::Point::Entry);
    }
    // A plan published under a tag (a nonzero tag; never at head_dim 256, whose kernels keep no
    // code for it): built by block 0 (`plan_or_wait`), or with decode rows apart and one block
    // per pair by the planning kernel; with decode rows apart, no wait for the decode kernel
    // between.
    let tagged_plan = ws_plans_itself(D as u32) && p.launch_tag != 0;
    let q_by_tma = ws_q_by_tma(D as u32, p.num_q_heads / p.num_kv_heads.max(1));
    let raw = dynamic_shared_mem::<u8>();
    let raw_address = shared_address(raw);
    let base = align_swizzle_128b(raw_address);
    let smem =
        SharedLayout { base, base_ptr: raw.add((base - raw_address) as usize), head_dim: D as u32, fp8, consumers: C };
    let tid = thread_idx_x();
    if tid == WARP_SIZE {
        // The K/V copies' map, fetched while the block plans (the copier of V, warp 1's lane 0,
        // is idle until then).
        tma::prefetch_map(maps.kv);
    }
    if tid == 0 {
        // With fp8 KV the converters fill the K and V stages (each of them arrives), and the
        // bulk copies the staging stages, which the converters empty.
        let kv_fill = if fp8 { CONVERTERS } else { FULL_ARRIVALS };
        smem.k_ring().init(kv_fill, empty_arrivals(C));
        smem.v_ring().init(kv_fill, empty_arrivals(C));
        let q_loaders = if fp8 { Q_LOADERS_FP8 } else { Q_LOADERS };
        smem.q_ring().init(if q_by_tma { 1 } else { q_loaders }, empty_arrivals(C));
        smem.sched_ring().init(1, ws_threads(C));
        if fp8 {
            smem.k8_ring().init(FULL_ARRIVALS, CONVERTERS);
            smem.v8_ring().init(FULL_ARRIVALS, CONVERTERS);
        }
    }
    if tagged_plan {
        // (Its block barriers order the mbarriers' initialization before their use too.)
        plan_or_wait(&ptr, &p, grid, ws_threads(C));
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
        } else if C == 3 {
            warpgroup::release_registers::<PRODUCER_REGISTERS_3C>();
        } else if fp8 && D == 128 {
            warpgroup::release_registers::<PRODUCER_REGISTERS_FP8_D128>();
        } else if fp8 {
            warpgroup::release_registers::<PRODUCER_REGISTERS_FP8>();
        } else {
            warpgroup::release_registers::<PRODUCER_REGISTERS>();
        }
        if trace::ENABLED && tid == 0 {
            trace::mark(ptr.plan, p.plan_capacity, trace::Point::RolesSplit);
        }
        if fp8 {
            produce_fp8::<Q, KV, D, PW, C, G>(&ptr, &p, smem, grid, maps, q_by_tma, &mut tiles, &mut items);
        } else if tid < 2 * WARP_SIZE {
            let map = maps.kv;
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
            let q_map = maps.q;
            if issuer {
                tma::prefetch_map(q_map);
            }
            for_each_pair(
                &ptr,
                &p,
                smem,
                grid,
                #[inline(always)]
                |seq, r0, _, g| {
                    if seq != NO_SEQUENCE && issuer {
                        load_q_item_tma::<D, C>(&p, smem, q_map, &mut items, r0, g);
                        if trace::ENABLED && items == 1 {
                            trace::mark(ptr.plan, p.plan_capacity, trace::Point::FirstQIssued);
                        }
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
                        load_q_item::<Q, D, C>(&ptr, &p, smem, tid - 2 * WARP_SIZE, Q_LOADERS, &mut items, r0, rc, g)
                    }
                },
            );
        }
    } else {
        if D > 128 {
            warpgroup::claim_registers::<CONSUMER_REGISTERS_D256>();
        } else if C == 3 {
            warpgroup::claim_registers::<CONSUMER_REGISTERS_3C>();
        } else if fp8 && D == 128 {
            warpgroup::claim_registers::<CONSUMER_REGISTERS_FP8_D128>();
        } else if fp8 {
            warpgroup::claim_registers::<CONSUMER_REGISTERS_FP8>();
        } else {
            warpgroup::claim_registers::<CONSUMER_REGISTERS>();
        }
        let consumer = role - 1;
        // The output's tensor map, for the epilogue's bulk stores of whole consumer tiles
        // (`store_rows_tma`); 0 where Q is not loaded by the map (another layout).
        let o_map = if q_by_tma { maps.out } else { 0 };
        // The consumer's thread 0.
        let issuer = tid.is_multiple_of(WARPGROUP);
        // Ping-pong turns (see `consume_item`): consumer 0 goes first, the last consumer's
        // arrival on its barrier opening the first turn.
        let pingpong = p.consumer_schedule != 0;
        if pingpong && consumer == C - 1 {
            barrier::arrive_named::<{ ids::WS_PINGPONG.start }>(2 * WARPGROUP);
        }
        for_each_pair(
            &ptr,
            &p,
            smem,
            grid,
            #[inline(always)]
            |seq, r0, rc, g| {
                consume_item::<Q, KV, D, KSTEPS, NTILES, KN, KSP, PW, C>(
                    &ptr, &p, smem, consumer, o_map, &mut tiles, &mut items, seq, r0, rc, g,
                )
            },
        );
        if trace::ENABLED && tid == WARPGROUP {
            trace::mark(ptr.plan, p.plan_capacity, trace::Point::ConsumerDone);
        }
        // The last bulk stores' writes done before the block ends.
        if o_map != 0 && issuer {
            tma::bulk_wait_group::<0>();
        }
        // The last consumer's last turn ended with an arrival on consumer 0's barrier.
        if pingpong && consumer == 0 {
            barrier::sync_named::<{ ids::WS_PINGPONG.start }>(2 * WARPGROUP);
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

/// The producer warpgroup with fp8 KV (see [`Q_LOADERS`]): warp 0 copies K and V into the staging
/// rings, warp 1 loads each item's Q (the tiles of all `C` consumers), warps 2 and 3 widen the
/// staged tiles into the K and V rings ([`convert_item`]).
///
/// # Safety
/// Every thread of the producer warpgroup calls it once, after the block's rings are initialized
/// and the plan is ready ([`rpa_tiled_ws`]), with the pointers and maps of the kernel's call.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn produce_fp8<Q: MmaElement, KV: StagedKv, const D: usize, const PW: usize, const C: u32, G: TileBlocks>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    smem: SharedLayout,
    grid: G,
    maps: WsMaps,
    q_by_tma: bool,
    tiles: &mut u32,
    items: &mut u32,
) {
    let tid = thread_idx_x();
    let warp = tid / WARP_SIZE;
    if warp == 0 {
        let map = maps.kv;
        for_each_pair(
            ptr,
            p,
            smem,
            grid,
            #[inline(always)]
            |seq, r0, rc, g| {
                if seq != NO_SEQUENCE {
                    produce_item_fp8::<Q, D, PW>(ptr, p, smem, map, tiles, seq, r0, rc, g)
                }
            },
        );
    } else if warp == 1 {
        let lane = tid % WARP_SIZE;
        let q_map = maps.q;
        if q_by_tma && lane == 0 {
            tma::prefetch_map(q_map);
        }
        for_each_pair(
            ptr,
            p,
            smem,
            grid,
            #[inline(always)]
            |seq, r0, rc, g| {
                if seq != NO_SEQUENCE {
                    if q_by_tma {
                        if lane == 0 {
                            load_q_item_tma::<D, C>(p, smem, q_map, items, r0, g)
                        }
                    } else {
                        load_q_item::<Q, D, C>(ptr, p, smem, lane, Q_LOADERS_FP8, items, r0, rc, g)
                    }
                }
            },
        );
    } else {
        for_each_pair(
            ptr,
            p,
            smem,
            grid,
            #[inline(always)]
            |seq, r0, rc, _| {
                if seq != NO_SEQUENCE {
                    convert_item::<Q, KV, D, PW>(ptr, p, smem, tid - 2 * WARP_SIZE, tiles, seq, r0, rc)
                }
            },
        );
    }
}

/// The plan of the warp-specialized kernel ([`plan_items`] with [`ws_tile_rows`] rows per tile
/// item): launched before it where the kernel does not plan itself (see [`ws_plans_itself`]). A
/// nonzero `params.launch_tag` (decode rows apart, one block per pair) publishes the plan under it
/// ([`plan_or_wait`]).
///
/// # Safety
/// As `rpa_plan`; `plan` holds [`ws_scratch_bytes`]`(params.plan_capacity)` bytes (16-byte
/// aligned).
#[cfg(any(xgk_sm90, not(target_arch = "nvptx64")))]
#[kernel]
pub unsafe fn rpa_plan_ws(cu_q_lens: *const i32, num_seqs: *const i32, plan: *mut u32, params: RpaParams) {
    // Programmatic dependent launch (sm_90 image): the tile kernel launches while this one runs
    // and waits for the plan before reading it.
    crate::grid_dependency::launch_dependents();
    crate::grid_dependency::wait_for_prerequisites();
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

/// One warp-specialized kernel per (q dtype, KV dtype, head_dim): `rpa_tile_ws_<q>_<kv>_d<D>`,
/// with the head dim's keys per tile ([`ws_keys`]), consumer warpgroups ([`ws_consumers`]) and
/// threads ([`ws_threads`]).
macro_rules! rpa_tile_ws_kernels {
    ($( $name:ident: $q:ty, $kv:ty, $d:literal, $keys:literal, $consumers:literal, $threads:literal; )*) => {$(
        const _: () = assert!(
            $consumers == ws_consumers($d, <$kv as StagedKv>::FP8) && $threads == ws_threads($consumers),
            "a kernel's consumers and threads are its head dim's"
        );
        /// The warp-specialized tile kernel (see the module docs), with [`ws_tile_rows`] rows
        /// per tile item: one launch per call where it plans itself (a nonzero
        /// `params.launch_tag` with `params.decode_apart` 0, see [`ws_plans_itself`]; after the
        /// pipelined decode kernel, beside which it runs, with `decode_apart` 2), else after
        /// [`rpa_plan_ws`] (and the pipelined decode kernel where `params.decode_apart` is 1,
        /// beside which it runs under a nonzero tag).
        ///
        /// # Safety
        /// Grid `(n, 1)` with n at most `params.plan_capacity * num_kv_heads` (whose triple, and
        /// that of `max_tokens * num_kv_heads`, fit in a `u32`), [`ws_threads`] threads and
        /// [`ws_shared_bytes`] of dynamic shared memory (both of [`ws_consumers`]); every pointer a device buffer of the
        /// shape `params` describes, `plan` [`ws_scratch_bytes`]`(params.plan_capacity)` bytes
        /// (16-byte aligned) that only this grid writes while it runs (with decode rows apart, the
        /// planning kernel before it may still be writing it, or the decode kernel its inputs
        /// word): written by [`rpa_plan_ws`] with the same `params` (the maps unused; with a
        /// nonzero `params.launch_tag` only where `params.decode_apart` is 1), or of any contents
        /// where the kernel plans itself (a nonzero tag, `params.decode_apart` 0, or 2 after the
        /// decode kernel launched with the same tag), with the grid at most one block per
        /// multiprocessor, `map` describing `kv` (`tiled_ws_supports` on the host),
        /// `q_map` the queries and `o_map` the output (dims x query heads x `max_tokens`, boxes
        /// [`ws_q_box`]) where [`ws_q_by_tma`] (the copies read them in the parameter space).
        /// Metadata values may be anything: they never lead outside the buffers.
        #[kernel(max_threads = $threads)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $name(
            q: *const $q, kv: *const $kv, kv_lens: *const i32, page_indices: *const i32,
            cu_q_lens: *const i32, num_seqs: *const i32, plan: *const u32, out: *mut $q,
            params: RpaParams, map: TensorMapImage, q_map: TensorMapImage, o_map: TensorMapImage,
        ) {
            // The maps are read where they lie, by their parameters' addresses (below).
            let _ = (map, q_map, o_map);
            rpa_tiled_ws::<
                $q, $kv, $d, { $d / 16 }, { $d / 8 }, { $keys / 8 }, { $keys / 16 }, { $keys / 32 }, $consumers, WholeGrid
            >(
                // The kernel reads K/V through the tensor map alone.
                TiledPointers { q, kv: kv as *const $q, kv_lens, page_indices, cu_q_lens, num_seqs, plan, out },
                params,
                // Parameters 9, 10 and 11 (`tests/ptx.rs` checks them).
                WsMaps {
                    kv: crate::tma::param_address!(concat!(stringify!($name), "_param_9")),
                    q: crate::tma::param_address!(concat!(stringify!($name), "_param_10")),
                    out: crate::tma::param_address!(concat!(stringify!($name), "_param_11")),
                },
                WholeGrid,
            )
        }
    )*};
}

#[cfg(any(xgk_sm90, not(target_arch = "nvptx64")))]
rpa_tile_ws_kernels! {
    rpa_tile_ws_f16_f16_d64: f16, f16, 64, 128, 3, 512;
    rpa_tile_ws_f16_f16_d128: f16, f16, 128, 128, 2, 384;
    rpa_tile_ws_f16_f16_d256: f16, f16, 256, 64, 2, 384;
    rpa_tile_ws_bf16_bf16_d64: Bf16, Bf16, 64, 128, 3, 512;
    rpa_tile_ws_bf16_bf16_d128: Bf16, Bf16, 128, 128, 2, 384;
    rpa_tile_ws_bf16_bf16_d256: Bf16, Bf16, 256, 64, 2, 384;
    rpa_tile_ws_f16_e4m3_d64: f16, F8E4M3, 64, 128, 2, 384;
    rpa_tile_ws_f16_e4m3_d128: f16, F8E4M3, 128, 128, 2, 384;
    rpa_tile_ws_f16_e5m2_d64: f16, F8E5M2, 64, 128, 2, 384;
    rpa_tile_ws_f16_e5m2_d128: f16, F8E5M2, 128, 128, 2, 384;
    rpa_tile_ws_bf16_e4m3_d64: Bf16, F8E4M3, 64, 128, 2, 384;
    rpa_tile_ws_bf16_e4m3_d128: Bf16, F8E4M3, 128, 128, 2, 384;
    rpa_tile_ws_bf16_e5m2_d64: Bf16, F8E5M2, 64, 128, 2, 384;
    rpa_tile_ws_bf16_e5m2_d128: Bf16, F8E5M2, 128, 128, 2, 384;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_fits_a_hopper_block() {
        // 227 KiB is the most a block may take on sm_90.
        for fp8 in [false, true] {
            for d in [64, 128, 256] {
                if fp8 && !ws_supports_fp8(d) {
                    continue;
                }
                let bytes = ws_shared_bytes(d, fp8, ws_consumers(d, fp8));
                assert!(bytes <= 227 * 1024, "head_dim {d}, fp8 {fp8}: {bytes}");
            }
        }
        // A mix's tile blocks: two consumers at head_dim 64 too.
        assert!(ws_shared_bytes(64, false, 2) <= ws_shared_bytes(64, false, 3));
    }

    #[test]
    fn register_budgets_fit_the_pool() {
        // 65536 registers per multiprocessor: 384 threads get at most 168 each, 512 at most 128
        // (multiples of 8).
        const fn fits(producer: u32, consumer: u32, consumers: u32) -> bool {
            let pool = 65536 / ws_threads(consumers) / 8 * 8;
            producer.is_multiple_of(8)
                && consumer.is_multiple_of(8)
                && WARPGROUP * producer + consumers * WARPGROUP * consumer <= ws_threads(consumers) * pool
        }
        const { assert!(fits(PRODUCER_REGISTERS, CONSUMER_REGISTERS, 2)) };
        const { assert!(fits(PRODUCER_REGISTERS_FP8, CONSUMER_REGISTERS_FP8, 2)) };
        const { assert!(fits(PRODUCER_REGISTERS_FP8_D128, CONSUMER_REGISTERS_FP8_D128, 2)) };
        const { assert!(fits(PRODUCER_REGISTERS_D256, CONSUMER_REGISTERS_D256, 2)) };
        const { assert!(fits(PRODUCER_REGISTERS_3C, CONSUMER_REGISTERS_3C, 3)) };
        assert_eq!((ws_threads(2), ws_threads(3)), (384, 512));
        assert!(ws_consumers(64, false) <= MAX_CONSUMERS && ws_consumers(128, true) >= MIN_CONSUMERS);
    }
}
