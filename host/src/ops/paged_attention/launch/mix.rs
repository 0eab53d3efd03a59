//! The mix kernel's decode blocks (`rpa_mix_*`, `kernels_gpu::kernels::mix`): a
//! mixed batch's decode rows and its other rows in one launch, the decode blocks first in the
//! tile kernel's grid, three decode blocks to a block.

use kernels_gpu::attention::RpaParams;
use kernels_gpu::kernels::mix::{mix_decode_blocks, MIX_DECODE_STAGES};

use super::super::params::apart_decode_params;
use super::super::plan::{DecodeApart, DirectPlan};
use super::super::settings::LaunchSettings;
use super::super::PagedAttention;

/// The arguments the mix kernel takes after the tile blocks' parameters: the decode blocks'
/// parameters (the decode plan's, in one launch under the call's `launch_tag`, with the mix's
/// stage count) and their count, which the caller adds to the grid's width.
pub(super) fn mix_decode_arguments(
    spec: &PagedAttention,
    decode: &DirectPlan,
    settings: &LaunchSettings,
    launch_tag: u32,
) -> (RpaParams, u32) {
    let mut params = apart_decode_params(spec, decode, settings, DecodeApart::OneLaunch, launch_tag);
    params.pipe_stages = MIX_DECODE_STAGES;
    (params, mix_decode_blocks(spec.max_num_seqs, spec.num_q_heads, spec.num_kv_heads))
}
