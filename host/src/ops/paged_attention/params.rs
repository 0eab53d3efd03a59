//! The kernels' scalar parameters ([`RpaParams`], `#[repr(C)]`, shared with the PTX) from a plan
//! and the settings: the one place the typed choices become the integers the kernels read.

use kernels_gpu::attention::{RpaParams, DECODE_APART_ONE_LAUNCH};

use super::plan::{DecodeApart, DirectPlan, TiledPlan};
use super::settings::{ConsumerSchedule, CopyHint, LaunchSettings, PairSchedule, PipeMode};
use super::PagedAttention;

/// `RpaParams::copy_hint`.
fn copy_hint_param(hint: CopyHint) -> u32 {
    match hint {
        CopyHint::None => 0,
        CopyHint::Prefetch256 => 1,
    }
}

/// `RpaParams::pipe_mode` (0 for the kernels other than the pipelined one).
fn pipe_mode_param(mode: Option<PipeMode>) -> u32 {
    match mode {
        None | Some(PipeMode::BlockBarrier) => 0,
        Some(PipeMode::KeyGroupPipelines) => 1,
    }
}

/// `RpaParams::consumer_schedule`.
fn consumer_schedule_param(schedule: ConsumerSchedule) -> u32 {
    match schedule {
        ConsumerSchedule::Free => 0,
        ConsumerSchedule::PingPong => 1,
    }
}

/// `RpaParams::dynamic_pairs`: 1 where persistent blocks take pairs from a counter.
fn dynamic_pairs_param(schedule: PairSchedule) -> u32 {
    u32::from(schedule == PairSchedule::PersistentDynamic)
}

/// `RpaParams::decode_apart`.
pub(super) fn decode_apart_param(mode: DecodeApart) -> u32 {
    match mode {
        DecodeApart::Off => 0,
        DecodeApart::AfterPlanKernel => 1,
        DecodeApart::AfterDecodeWord => 2,
        DecodeApart::OneLaunch => DECODE_APART_ONE_LAUNCH,
    }
}

/// The attention kernel's parameters for a direct plan: its splits, stages, cluster and copy mode.
pub(super) fn direct_params(spec: &PagedAttention, l: &DirectPlan, settings: &LaunchSettings) -> RpaParams {
    let mut params = spec.kernel_params(l.splits, l.split_len);
    params.copy_hint = copy_hint_param(settings.copy_hint);
    params.pipe_stages = l.stages;
    params.cluster_splits = l.cluster as u32;
    params.pipe_mode = pipe_mode_param(l.pipe_mode);
    params.table_preload = (l.stages > 0 && settings.table_preload) as u32;
    params.merge_blocks = l.merge_blocks;
    params
}

/// The decode kernel's parameters for a call whose decode rows run apart ([`DecodeApart`] other
/// than [`DecodeApart::Off`]), its words under `launch_tag`.
pub(super) fn apart_decode_params(
    spec: &PagedAttention,
    l: &DirectPlan,
    settings: &LaunchSettings,
    mode: DecodeApart,
    launch_tag: u32,
) -> RpaParams {
    let mut params = direct_params(spec, l, settings);
    params.decode_apart = decode_apart_param(mode);
    params.launch_tag = launch_tag;
    params
}

/// The tile kernel's (and its plan kernel's) parameters, its words under `launch_tag` (0: none).
/// The tile kernels' copies take a fixed L2 hint: `copy_hint` stays 0.
pub(super) fn tile_params(
    spec: &PagedAttention,
    t: &TiledPlan,
    settings: &LaunchSettings,
    launch_tag: u32,
) -> RpaParams {
    let mut params = spec.kernel_params(1, spec.max_visited_keys());
    params.tile_rows = t.rows;
    params.plan_capacity = t.capacity as u32;
    if t.warp_specialized {
        params.consumer_schedule = consumer_schedule_param(settings.consumer_schedule);
        params.dynamic_pairs = dynamic_pairs_param(t.pair_schedule);
    }
    params.decode_apart = decode_apart_param(t.launches.decode_apart());
    params.launch_tag = launch_tag;
    params
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_are_the_kernels_integers() {
        // The integers the kernels read (`kernels_gpu::attention::RpaParams`), which the PTX fixes.
        assert_eq!([CopyHint::None, CopyHint::Prefetch256].map(copy_hint_param), [0, 1]);
        assert_eq!(
            [None, Some(PipeMode::BlockBarrier), Some(PipeMode::KeyGroupPipelines)].map(pipe_mode_param),
            [0, 0, 1]
        );
        assert_eq!([ConsumerSchedule::Free, ConsumerSchedule::PingPong].map(consumer_schedule_param), [0, 1]);
        assert_eq!(
            [PairSchedule::BlockPerPair, PairSchedule::PersistentSnake, PairSchedule::PersistentDynamic]
                .map(dynamic_pairs_param),
            [0, 0, 1]
        );
        assert_eq!(
            [DecodeApart::Off, DecodeApart::AfterPlanKernel, DecodeApart::AfterDecodeWord, DecodeApart::OneLaunch]
                .map(decode_apart_param),
            [0, 1, 2, 3]
        );
    }
}
