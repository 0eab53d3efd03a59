//! A mixed batch (prefill and decode rows) in one launch (sm_90a image): the warp-specialized tile
//! kernel's blocks ([`crate::kernels::prefill::hopper`]) and the pipelined decode kernel's blocks
//! on a grid of sequences ([`crate::kernels::decode::pipelined`], key-rows layout), in one grid.
//!
//! Why: a mix with its decode rows apart was two launches (the decode kernel, then the tile
//! kernel beside it), and a launch costs the host ~2.5 µs (benchmarks/NOTES.md "v24", issue 9's
//! host budget of 5 µs per call). One function means one block size and one shared-memory size:
//! the tile kernel's with two consumers ([`MIX_CONSUMERS`]: 384 threads, ~225 KiB at head_dim
//! 128, one block per multiprocessor; the tile kernel launched alone has three at head_dim 64). A
//! decode block is 128 threads on two stages (64 KiB at head_dim 128), so a block of this grid
//! holds three of them, each a [`GroupSlot`]: its own grid position, its third of the threads, a
//! named barrier, its share of the shared memory. Three decode blocks of two stages
//! ([`MIX_DECODE_STAGES`]) to a multiprocessor keep 96 KiB of K/V in flight per SM, where the
//! decode twin launched apart (`rpa_pipe_kr_seq_*`) takes three stages at two blocks per SM (128
//! KiB): on an H100 the mixes ran as fast or faster (benchmarks/NOTES.md "v32").
//!
//! The grid, in block order (blocks are dispatched in grid order):
//! - blocks `0 .. decode_blocks` ([`mix_decode_blocks`]): the decode blocks, three groups each,
//!   group `k` of block `b` the decode twin's block `v = 3 b + k` at grid position
//!   `(v % max_num_seqs, v / max_num_seqs)` (none past the twin's grid): the decode rows are most
//!   of a mix's bytes, and start first, as the decode kernel did in two launches;
//! - the rest: tile blocks 0, 1, ... ([`TileGrid`]; persistent: at most one per multiprocessor),
//!   tile block 0 building the plan and publishing it (`plan_or_wait`), on the multiprocessors
//!   the decode blocks' last wave frees, as the tile kernel did in two launches.
//!
//! Every block waits for the kernel before it first (the inputs). Nothing else orders the two
//! roles: the decode rows are not the plan's, and where the plan falls back (a decreasing
//! `cu_q_lens`: every row the tile blocks') the decode blocks find that themselves and write
//! nothing (`resolve_sequence_block`). The tile blocks that wait for tile block 0's plan need it
//! running: it is dispatched before them, and the blocks waiting for it hold at most one
//! multiprocessor less than the tile blocks, which are at most the multiprocessors; the decode
//! blocks never wait, so a multiprocessor frees for tile block 0 whatever the order.

use crate::attention::RpaParams;
use crate::kernel;
use crate::mma::MmaElement;
use crate::num::Bf16;
use crate::shared::dynamic_shared_mem;
use crate::thread::{block_idx_x, thread_idx_x};
use crate::tma::TensorMapImage;

use crate::attention::planner::TiledPointers;
use crate::kernels::block_slot::{GroupSlot, GROUP_THREADS};
use crate::kernels::decode::general::RpaPointers;
use crate::kernels::decode::mma::MMA_HEADS_PER_BLOCK;
use crate::kernels::decode::pipelined::layout::{pipelined_shared_bytes, pipelined_tile_keys};
use crate::kernels::decode::pipelined::rpa_pipelined_on;
use crate::kernels::kv_operand::StagedKv;
use crate::kernels::prefill::hopper::scheduler::TileGrid;
use crate::kernels::prefill::hopper::{rpa_tiled_ws, ws_shared_bytes, ws_threads, WsMaps};

/// Consumer warpgroups of a mix's tile blocks: two at both head dims (the one-launch grid's blocks
/// all have [`MIX_THREADS`], which its decode blocks fill with [`MIX_GROUPS`] groups).
pub const MIX_CONSUMERS: u32 = 2;
/// Threads of a mix block.
pub const MIX_THREADS: u32 = ws_threads(MIX_CONSUMERS);
/// Decode blocks ([`GroupSlot`]s) per block of the grid.
pub const MIX_GROUPS: u32 = MIX_THREADS / GROUP_THREADS;
const _: () = assert!(MIX_THREADS == 384, "the mix kernels' max_threads");
const _: () = assert!(
    MIX_GROUPS == crate::barrier::ids::MIX_DECODE_GROUPS.end - crate::barrier::ids::MIX_DECODE_GROUPS.start,
    "a named barrier per decode group"
);

/// K/V stages of a decode block in the mix kernel (the host passes it as the decode parameters'
/// `pipe_stages`): [`MIX_GROUPS`] of them fit the tile kernel's shared memory at both head dims.
pub const MIX_DECODE_STAGES: u32 = 2;

const _: () = assert!(
    MIX_GROUPS * mix_group_shared_bytes(64, MIX_DECODE_STAGES) <= ws_shared_bytes(64, false, MIX_CONSUMERS)
        && MIX_GROUPS * mix_group_shared_bytes(128, MIX_DECODE_STAGES) <= ws_shared_bytes(128, false, MIX_CONSUMERS)
);

/// Blocks of the decode twin's grid (sequences x KV heads x head chunks of
/// [`MMA_HEADS_PER_BLOCK`], one split) for a call's static shapes.
pub const fn mix_decode_slots(max_num_seqs: u32, num_q_heads: u32, num_kv_heads: u32) -> u32 {
    let kv_heads = if num_kv_heads == 0 { 1 } else { num_kv_heads };
    max_num_seqs * kv_heads * (num_q_heads / kv_heads).div_ceil(MMA_HEADS_PER_BLOCK)
}

/// Blocks of the grid that run decode blocks, [`MIX_GROUPS`] each.
pub const fn mix_decode_blocks(max_num_seqs: u32, num_q_heads: u32, num_kv_heads: u32) -> u32 {
    mix_decode_slots(max_num_seqs, num_q_heads, num_kv_heads).div_ceil(MIX_GROUPS)
}

/// Shared memory of one decode group with `stages` stages of 16-bit KV (128-byte multiples, so
/// every group's stages keep the first's alignment).
pub const fn mix_group_shared_bytes(head_dim: u32, stages: u32) -> u32 {
    pipelined_shared_bytes(head_dim, 2, pipelined_tile_keys(head_dim), stages).next_multiple_of(128)
}

/// The one-launch mix's body (see the module docs): the first `decode_blocks` blocks run
/// [`MIX_GROUPS`] pipelined decode groups each, the rest are the warp-specialized tile kernel's blocks.
///
/// # Safety
/// As the mix kernel that calls it (`rpa_mix_kernels`' `# Safety`); every thread of the block calls it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rpa_mix<
    Q: MmaElement + StagedKv,
    const D: usize,
    const KSTEPS: usize,
    const NTILES: usize,
    const KN: usize,
    const KSP: usize,
    const PW: usize,
>(
    tiles: TiledPointers<Q>,
    tile_params: RpaParams,
    decode_params: RpaParams,
    decode_blocks: u32,
    maps: WsMaps,
) {
    // Programmatic dependent launch: both roles read the inputs, so every block waits for the
    // kernel before (the tile body's and the decode body's own calls then return at once).
    crate::grid_dependency::launch_dependents();
    crate::grid_dependency::wait_for_prerequisites();
    let b = block_idx_x();
    if b >= decode_blocks {
        rpa_tiled_ws::<Q, Q, D, KSTEPS, NTILES, KN, KSP, PW, MIX_CONSUMERS, TileGrid>(
            tiles,
            tile_params,
            maps,
            TileGrid { decode_blocks },
        );
        return;
    }
    let d = &decode_params;
    let group = thread_idx_x() / GROUP_THREADS;
    let v = b * MIX_GROUPS + group;
    let seqs = d.max_num_seqs.max(1);
    if v >= mix_decode_slots(d.max_num_seqs, d.num_q_heads, d.num_kv_heads) {
        return;
    }
    let shared = dynamic_shared_mem::<u8>().add((group * mix_group_shared_bytes(D as u32, d.pipe_stages)) as usize);
    let slot = GroupSlot { x: v % seqs, y: v / seqs, group, shared };
    let ptr = RpaPointers::<Q, Q> {
        q: tiles.q,
        kv: tiles.kv,
        kv_lens: tiles.kv_lens,
        page_indices: tiles.page_indices,
        cu_q_lens: tiles.cu_q_lens,
        num_seqs: tiles.num_seqs,
        out: tiles.out,
        part_o: core::ptr::null_mut(),
        part_lse: core::ptr::null_mut(),
        plan: tiles.plan,
    };
    rpa_pipelined_on::<Q, Q, Q::Operand<Q>, D, KSTEPS, NTILES, 1, true, true, GroupSlot>(ptr, decode_params, slot);
}

/// One mix kernel per (q dtype = KV dtype, head_dim): `rpa_mix_<q>_<q>_d<D>`.
macro_rules! rpa_mix_kernels {
    ($( $name:ident: $q:ty, $d:literal, $keys:literal; )*) => {$(
        /// A mixed batch in one launch (see the module docs).
        ///
        /// # Safety
        /// Grid `(decode_blocks + T, 1)` with `decode_blocks` [`mix_decode_blocks`] of the shapes
        /// and `T` tile blocks, at most one per multiprocessor and at most
        /// `tile_params.plan_capacity * num_kv_heads`, [`MIX_THREADS`]
        /// threads, `ws_shared_bytes(D, false, MIX_CONSUMERS)` of dynamic shared memory (the tile
        /// plan's rows `ws_tile_rows(group, MIX_CONSUMERS)`), at least [`MIX_GROUPS`]
        /// `mix_group_shared_bytes(D, decode_params.pipe_stages)`; `tile_params` as the
        /// warp-specialized kernel's where it plans itself (a nonzero `launch_tag`) and
        /// `decode_params` as the pipelined twin's on a grid of `max_num_seqs` sequences with one
        /// split, both with `decode_apart` [`crate::attention::DECODE_APART_ONE_LAUNCH`] and the
        /// same shapes; the buffers as `rpa_tile_ws_*` takes them, `plan` the call's workspace.
        #[kernel(max_threads = 384)] // MIX_THREADS
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $name(
            q: *const $q, kv: *const $q, kv_lens: *const i32, page_indices: *const i32,
            cu_q_lens: *const i32, num_seqs: *const i32, plan: *const u32, out: *mut $q,
            tile_params: RpaParams, decode_params: RpaParams, decode_blocks: u32, map: TensorMapImage,
            q_map: TensorMapImage, o_map: TensorMapImage,
        ) {
            // The maps are read where they lie, by their parameters' addresses (below).
            let _ = (map, q_map, o_map);
            rpa_mix::<$q, $d, { $d / 16 }, { $d / 8 }, { $keys / 8 }, { $keys / 16 }, { $keys / 32 }>(
                TiledPointers { q, kv, kv_lens, page_indices, cu_q_lens, num_seqs, plan, out },
                tile_params,
                decode_params,
                decode_blocks,
                // Parameters 11, 12 and 13 (`tests/ptx.rs` checks them).
                WsMaps {
                    kv: crate::tma::param_address!(concat!(stringify!($name), "_param_11")),
                    q: crate::tma::param_address!(concat!(stringify!($name), "_param_12")),
                    out: crate::tma::param_address!(concat!(stringify!($name), "_param_13")),
                },
            )
        }
    )*};
}

#[cfg(any(xgk_sm90, not(target_arch = "nvptx64")))]
rpa_mix_kernels! {
    rpa_mix_f16_f16_d64: f16, 64, 128;
    rpa_mix_f16_f16_d128: f16, 128, 128;
    rpa_mix_bf16_bf16_d64: Bf16, 64, 128;
    rpa_mix_bf16_bf16_d128: Bf16, 128, 128;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_decode_groups_of_two_stages_fit_the_tile_kernels_shared_memory() {
        assert_eq!(MIX_GROUPS, 3);
        for d in [64, 128] {
            assert!(
                MIX_GROUPS * mix_group_shared_bytes(d, MIX_DECODE_STAGES) <= ws_shared_bytes(d, false, MIX_CONSUMERS),
                "head_dim {d}"
            );
        }
    }

    #[test]
    fn decode_blocks_cover_the_twins_grid() {
        // 4 sequences, 32 query heads over 8 KV heads (one chunk each): 32 decode blocks, 11 blocks.
        assert_eq!(mix_decode_slots(4, 32, 8), 32);
        assert_eq!(mix_decode_blocks(4, 32, 8), 11);
        // A GQA group of 32: two chunks of 16 heads per KV head.
        assert_eq!(mix_decode_slots(3, 64, 2), 12);
    }
}
