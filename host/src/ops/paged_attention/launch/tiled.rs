//! The tiled plans' launches: the plan kernel where it builds the plan, the decode kernel where a
//! mixed batch's decode rows run apart, the tile kernel (or the mix kernel, both in one grid).

use kernels_gpu::attention::planner::{PLAN_SHARED_BYTES, PLAN_THREADS};
use kernels_gpu::kernels::prefill::hopper::scheduler::ws_grid_blocks;
use kernels_gpu::tma::TensorMapImage;

use super::super::params::tile_params;
use super::super::plan::{DecodeApart, TileLaunches, TiledPlan};
use super::super::plan_cache::{settings, ResolvedPlan};
use super::super::PagedAttention;
use super::direct::launch_apart_decode;
use super::mix::mix_decode_arguments;
use super::tensor_maps::{kv_tensor_map, ws_token_tensor_map};
use super::{next_launch_tag, push_inputs, DeviceBuffers};
use crate::error::Result;
use crate::runtime::{ContextModule, KernelArgs, LaunchConfig, Stream};

/// The tiled kernel, launched as `t.launches` says ([`TileLaunches`]): the plan kernel
/// ([`rpa_plan`](kernels_gpu::kernels::prefill::tiled::rpa_plan), `rpa_plan_ws`) writes
/// the work items into `plan` (scratch), then one block per (item, KV head) runs; or the
/// warp-specialized kernel at head dims 64 and 128 with persistent blocks plans in its block 0
/// instead (one launch: a launch is ~2.5 µs of host time). With a mixed batch's decode rows apart
/// the pipelined decode kernel runs first; beside it
/// ([`DECODE_APART_ENV_VAR`](super::super::DECODE_APART_ENV_VAR) 2) the tile kernel's plan is
/// published under the call's tag: by its block 0 once the decode kernel's first block says the
/// inputs are written (two launches), or by the plan kernel before the decode kernel where its
/// blocks are not persistent (three). In [`TileLaunches::Mix`] the mix kernel runs both: its
/// first blocks the decode rows, three decode blocks each, then the tile kernel's persistent
/// blocks (one launch).
///
/// # Safety
/// As [`launch_cuda`](super::launch_cuda); `plan` holds `t`'s scratch bytes
/// (`LaunchPlan::scratch_bytes`).
pub(super) unsafe fn launch_tiled(
    module: &ContextModule,
    stream: Stream,
    spec: &PagedAttention,
    bufs: DeviceBuffers,
    plan: u64,
    t: TiledPlan,
    resolved: &ResolvedPlan,
) -> Result<()> {
    let settings = settings()?;
    let grid = tile_grid(module, spec, &t, t.pair_schedule.persistent());
    // Tags the plan's state word in the workspace (`plan_or_wait`: published by the kernel's
    // block 0 or the plan kernel) and, with decode rows apart where the kernel plans itself, the
    // decode kernel's inputs word.
    let launch_tag = if t.launches.tagged() { next_launch_tag() } else { 0 };
    let params = tile_params(spec, &t, &settings, launch_tag);
    // The warp-specialized kernel's K/V, Q and output maps, its last parameters (its copies read
    // them there).
    let maps = if t.warp_specialized {
        // The output has Q's shape: its map is for the epilogue's bulk stores.
        Some([
            TensorMapImage { words: kv_tensor_map(spec, bufs.kv_pages as u64)? },
            TensorMapImage { words: ws_token_tensor_map(spec, bufs.q as u64)? },
            TensorMapImage { words: ws_token_tensor_map(spec, bufs.out as u64)? },
        ])
    } else {
        None
    };
    if t.launches.plan_kernel_first() {
        let mut args = KernelArgs::new();
        args.push(bufs.cu_q_lens).push(bufs.num_seqs).push(plan).push(params);
        let cfg = LaunchConfig { grid: (1, 1, 1), block: (PLAN_THREADS, 1, 1), shared_bytes: PLAN_SHARED_BYTES };
        // SAFETY: the plan's kernel 0 is the plan kernel, allowed PLAN_SHARED_BYTES.
        module.launch_function(stream, resolved.function(0), cfg, 1, &mut args.pointers(), settings.programmatic)?;
    }
    let mut args = KernelArgs::new();
    push_inputs(&mut args, &bufs);
    args.push(plan).push(bufs.out).push(params);
    let mut grid_x = grid.0;
    let decode_apart = t.launches.decode_apart();
    match (t.decode, t.launches) {
        (Some(decode), TileLaunches::Mix) => {
            // The decode blocks' parameters and count follow the tile blocks' parameters; their
            // blocks come first in the grid.
            let (decode_params, decode_blocks) = mix_decode_arguments(spec, &decode, &settings, launch_tag);
            args.push(decode_params).push(decode_blocks);
            grid_x += decode_blocks;
        }
        (Some(decode), _) => {
            // Before the tile kernel: the decode rows are most of a mixed batch's bytes. Where the
            // tile kernel plans itself its block 0 waits for the decode kernel's inputs word, under
            // the call's tag.
            let tag = if decode_apart == DecodeApart::AfterDecodeWord { launch_tag } else { 0 };
            // SAFETY: the plan's kernel 2 is `decode.kernel`; `plan` holds the call's plan header.
            let function = resolved.function(2);
            launch_apart_decode(module, stream, spec, &bufs, plan, decode, decode_apart, tag, function, &settings)?;
        }
        (None, _) => {}
    }
    for map in maps.iter().flatten() {
        args.push(*map);
    }
    let cfg = LaunchConfig { grid: (grid_x, grid.1, 1), block: (t.threads, 1, 1), shared_bytes: t.shared_bytes };
    // SAFETY: the plan's kernel 1 is `t.kernel`, allowed `t.shared_bytes`; where the
    // warp-specialized kernel plans itself the workspace's contents may be anything (its plan
    // state is tagged), else it holds the plan just enqueued.
    module.launch_function(stream, resolved.function(1), cfg, 1, &mut args.pointers(), settings.programmatic)
}

/// The tile kernel's grid (x, y). The mma.sync and wgmma tile kernels: one block per (plan item,
/// KV head), surplus blocks exiting at once. The warp-specialized kernel walks (item, KV head)
/// pairs in one grid row; its scheduler sizes the row (`ws_grid_blocks`).
fn tile_grid(module: &ContextModule, spec: &PagedAttention, t: &TiledPlan, persistent: bool) -> (u32, u32) {
    let heads = spec.num_kv_heads.max(1);
    if !t.warp_specialized {
        return (t.capacity as u32, heads);
    }
    // < 2^32 / 3 (`ws_work_indices_fit`).
    let pairs = (t.capacity * heads as u64) as u32;
    (ws_grid_blocks(pairs, module.multiprocessors, persistent), 1)
}
