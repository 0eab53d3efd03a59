//! The direct plans' launches: one block per (row, head chunk, split) of the general, tensor-core
//! or pipelined kernel, and the pipelined decode kernel over a mixed batch's decode sequences.

use kernels_gpu::attention::RpaParams;

use super::super::params::{apart_decode_params, direct_params};
use super::super::plan::{DecodeApart, DirectPlan, SplitMerge};
use super::super::plan_cache::{settings, ResolvedPlan};
use super::super::settings::LaunchSettings;
use super::super::PagedAttention;
use super::merge::launch_merge_kernel;
use super::{next_launch_tag, push_inputs, DeviceBuffers};
use crate::error::Result;
use crate::runtime::{CUfunction, ContextModule, KernelArgs, LaunchConfig, Stream};

/// One block per (row, head chunk, split); with splits, the merge kernel after it.
///
/// # Safety
/// As [`launch_cuda`](super::launch_cuda); `scratch` holds the plan's scratch bytes when it splits.
pub(super) unsafe fn launch_direct(
    module: &ContextModule,
    stream: Stream,
    spec: &PagedAttention,
    bufs: DeviceBuffers,
    scratch: u64,
    l: DirectPlan,
    resolved: &ResolvedPlan,
) -> Result<()> {
    let settings = settings()?;
    let mut params = direct_params(spec, &l, &settings);
    let merge_kernel = l.merge_kernel(spec);
    if let SplitMerge::MergeBlocks { .. } = l.split_merge() {
        // The merge blocks' counters in the workspace, under this launch's tag.
        params.launch_tag = next_launch_tag();
    }
    let (part_o, part_lse) = if l.partials_in_workspace() {
        let rows = l.splits as u64 * spec.max_tokens as u64 * spec.num_q_heads as u64;
        (scratch, scratch + rows * spec.head_dim as u64 * 4)
    } else {
        (0, 0)
    };
    let (function, partials) = (resolved.function(0), (part_o, part_lse));
    // SAFETY: the plan's kernel 0 is `l.kernel`; partials as `l` needs them; a grid of rows.
    launch_attention(module, stream, &bufs, &l, function, spec.max_tokens, partials, 0, params, &settings)?;
    let Some((_, merge_shared)) = merge_kernel else {
        return Ok(());
    };
    // SAFETY: the plan's kernel 1 is the merge kernel, allowed `merge_shared`; the partials are
    // `l`'s, at the scratch's base.
    launch_merge_kernel(
        module,
        stream,
        spec,
        bufs.out,
        (part_o, part_lse),
        params,
        resolved.function(1),
        merge_shared,
        &settings,
    )
}

/// The pipelined kernel over a call's decode sequences (`plan_apart_decode`): one block per
/// (sequence, head chunk, split), before the tile kernel, in decode-apart mode `mode`. With
/// [`DecodeApart::AfterDecodeWord`] (the tile kernel plans itself) its block (0, 0, 0) publishes
/// the plan header's inputs word under `tag` once the kernels before the call have completed.
///
/// # Safety
/// As [`launch_cuda`](super::launch_cuda); `plan` holds the call's plan header (`LaunchPlan::scratch_bytes`);
/// `function` is `l.kernel`'s handle, allowed `l.shared_bytes`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn launch_apart_decode(
    module: &ContextModule,
    stream: Stream,
    spec: &PagedAttention,
    bufs: &DeviceBuffers,
    plan: u64,
    l: DirectPlan,
    mode: DecodeApart,
    tag: u32,
    function: CUfunction,
    settings: &LaunchSettings,
) -> Result<()> {
    let params = apart_decode_params(spec, &l, settings, mode, tag);
    // SAFETY: as this function's contract; no partials (the plan merges in clusters or does not
    // split).
    launch_attention(module, stream, bufs, &l, function, spec.max_num_seqs, (0, 0), plan, params, settings)
}

/// Enqueues a direct plan's attention kernel: one block per (grid x, head chunk, split), its
/// splits one cluster where `l.cluster` says so.
///
/// # Safety
/// As [`launch_cuda`](super::launch_cuda); `function` is `l.kernel`'s handle, allowed `l.shared_bytes`; `partials`
/// (`part_o`, `part_lse`) hold `l`'s split partials where it leaves them in the workspace;
/// `plan` is the call's tile plan on a grid of sequences, else 0.
#[allow(clippy::too_many_arguments)]
unsafe fn launch_attention(
    module: &ContextModule,
    stream: Stream,
    bufs: &DeviceBuffers,
    l: &DirectPlan,
    function: CUfunction,
    grid_x: u32,
    (part_o, part_lse): (u64, u64),
    plan: u64,
    params: RpaParams,
    settings: &LaunchSettings,
) -> Result<()> {
    let mut args = KernelArgs::new();
    push_inputs(&mut args, bufs);
    args.push(bufs.out).push(part_o).push(part_lse).push(plan).push(params);
    let grid = (grid_x, l.grid_y, l.splits + l.merge_blocks);
    let cfg = LaunchConfig { grid, block: (l.threads, 1, 1), shared_bytes: l.shared_bytes };
    let cluster_z = if l.cluster { l.splits } else { 1 };
    // SAFETY: `function` is `l.kernel`, allowed `l.shared_bytes`; arguments as it takes them.
    module.launch_function(stream, function, cfg, cluster_z, &mut args.pointers(), settings.programmatic)
}
