//! The merge kernels' launch (`rpa_combine_*`, `rpa_combine_groups_*`): one block per (row, query
//! head) merging a split plan's partials from the workspace into the output.

use std::ffi::c_void;

use kernels_gpu::attention::RpaParams;
use kernels_gpu::kernels::decode::general::RPA_THREADS;

use super::super::settings::LaunchSettings;
use super::super::PagedAttention;
use crate::error::Result;
use crate::runtime::{CUfunction, ContextModule, KernelArgs, LaunchConfig, Stream};

/// Enqueues the merge kernel `function` over the partials (`part_o`, `part_lse`) of the
/// attention kernel launched with `params`, writing `out`.
///
/// # Safety
/// As [`launch_cuda`](super::launch_cuda); `function` is a merge kernel allowed `shared_bytes`
/// (what it needs); the partials are those of the attention kernel launched with `params`,
/// 16-byte aligned.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn launch_merge_kernel(
    module: &ContextModule,
    stream: Stream,
    spec: &PagedAttention,
    out: *mut c_void,
    (part_o, part_lse): (u64, u64),
    params: RpaParams,
    function: CUfunction,
    shared_bytes: u32,
    settings: &LaunchSettings,
) -> Result<()> {
    let mut args = KernelArgs::new();
    args.push(part_o).push(part_lse).push(out).push(params);
    let cfg = LaunchConfig { grid: (spec.max_tokens, spec.num_q_heads, 1), block: (RPA_THREADS, 1, 1), shared_bytes };
    // SAFETY: as this function's contract; the partials start at the scratch's base, 16-byte
    // aligned (a given workspace is checked by `launch_cuda`; the driver's stream-ordered
    // allocations are aligned further).
    module.launch_function(stream, function, cfg, 1, &mut args.pointers(), settings.programmatic)
}
