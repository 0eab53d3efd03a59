//! The pipelined kernel's stage count and key splits: the split model over the device's
//! resident blocks (`plan_rules.rs`), merged in clusters where every cluster runs at once.

use kernels_gpu::kernels::decode::merge::MAX_CLUSTER_SPLITS;
use kernels_gpu::kernels::decode::pipelined::layout::{
    pipelined_shared_bytes, pipelined_stage_bytes, pipelined_tile_keys, PIPE_MAX_STAGES,
};

use super::kernel_id::KernelId;
use super::plan_rules::*;
use super::settings::LaunchSettings;
use super::PagedAttention;
use crate::error::Result;
use crate::runtime::ContextModule;

/// What the pipelined kernel's plan settles on: its stage count and shared memory, its key
/// splits, and the waves of resident blocks the grid takes with the first stage count tried.
pub(super) struct PipelinedPlan {
    pub stages: u32,
    pub shared_bytes: u32,
    pub splits: PipelinedSplits,
    pub waves: u64,
}

/// The pipelined kernel's key splits for its block (`threads`, and `stages` giving
/// `shared_bytes`: the shape's or [`PIPE_STAGES_ENV_VAR`](super::PIPE_STAGES_ENV_VAR)'s), then the
/// rules that trade stages for splits: whole rows where the unsplit 16-bit grid fills the device
/// in one wave ([`unsplit_grid_fills_device`], [`whole_rows_pay`]), two stages for long 16-bit
/// grids ([`long_grid_takes_two_stages`]), [`FP8_WHOLE_ROW_STAGES`] for fp8 rows that stay whole.
/// `fp8_key_rows`: the fp8 key-rows kernel by [`fp8_key_rows_pay`], planned for at most
/// [`FP8_KEY_ROWS_PLAN_BLOCKS`] blocks per SM.
#[allow(clippy::too_many_arguments)]
pub(super) fn plan_pipelined(
    module: &ContextModule,
    spec: &PagedAttention,
    settings: &LaunchSettings,
    kernel: KernelId,
    (threads, stages, shared_bytes): (u32, u32, u32),
    fp8_key_rows: bool,
    blocks_per_split: u64,
    max_keys: u32,
) -> Result<PipelinedPlan> {
    let kv_bytes = spec.kv_dtype.size_bytes().expect("validated KV dtype") as u32;
    let (mut stages, mut shared_bytes) = (stages, shared_bytes);
    let cap = fp8_key_rows.then_some(FP8_KEY_ROWS_PLAN_BLOCKS);
    let split_plan = |shared_bytes| {
        plan_pipelined_splits(module, settings, kernel, threads, shared_bytes, cap, blocks_per_split, max_keys)
    };
    let (mut s, waves) = split_plan(shared_bytes)?;
    if kv_bytes == 2
        && !settings.full_grid_splits
        && s.splits > 1
        && waves == 1
        && unsplit_grid_fills_device(blocks_per_split, module.multiprocessors)
        && whole_rows_pay(module.dram_gbs_per_multiprocessor, max_keys)
    {
        // The unsplit grid is smaller than the split one: one wave still.
        s = whole_rows(max_keys);
    }
    if settings.pipe_stages == 0 && kv_bytes == 2 && stages > 2 && waves >= LONG_GRID_WAVES {
        let two = pipelined_shared_bytes(spec.head_dim, kv_bytes, pipelined_tile_keys(spec.head_dim), 2);
        if module.resident_blocks(kernel.name(), threads, two)?
            > module.resident_blocks(kernel.name(), threads, shared_bytes)?
        {
            // At the residency the split model plans with, so that `XGK_RPA_PLAN_BLOCKS`
            // moves this rule too.
            let slots = planned_slots(module, settings, kernel, threads, two, cap)?;
            let s2 =
                if unsplit_grid_is_long(blocks_per_split, slots) { whole_rows(max_keys) } else { split_plan(two)?.0 };
            if long_grid_takes_two_stages(s.splits, waves, s2.splits) {
                (stages, shared_bytes, s) = (2, two, s2);
            }
        }
    }
    if settings.pipe_stages == 0 && kv_bytes == 1 {
        let tile_keys = pipelined_tile_keys(spec.head_dim);
        let deep = pipelined_shared_bytes(spec.head_dim, kv_bytes, tile_keys, FP8_WHOLE_ROW_STAGES);
        if deep <= module.max_shared_bytes_per_block {
            let (s_deep, waves_deep) = split_plan(deep)?;
            if s_deep.splits == 1 && waves_deep <= FP8_WHOLE_ROW_MAX_WAVES {
                (stages, shared_bytes, s) = (FP8_WHOLE_ROW_STAGES, deep, s_deep);
            }
        }
    }
    Ok(PipelinedPlan { stages, shared_bytes, splits: s, waves })
}

/// The pipelined kernel's key splits for its block (`threads`, `shared_bytes`), and the waves of
/// resident blocks the grid then takes: the split model over the device's resident blocks (at
/// most `cap` per SM, or [`PLAN_BLOCKS_ENV_VAR`](super::settings::PLAN_BLOCKS_ENV_VAR)'s), merged in clusters where the model prefers
/// it and every cluster of the grid runs at once.
#[allow(clippy::too_many_arguments)]
fn plan_pipelined_splits(
    module: &ContextModule,
    settings: &LaunchSettings,
    kernel: KernelId,
    threads: u32,
    shared_bytes: u32,
    cap: Option<u32>,
    blocks_per_split: u64,
    max_keys: u32,
) -> Result<(PipelinedSplits, u64)> {
    let slots = planned_slots(module, settings, kernel, threads, shared_bytes, cap)?;
    let model = |cluster_limit| {
        choose_splits_by_waves(
            blocks_per_split,
            max_keys,
            slots,
            settings.min_split_tiles,
            settings.merge_cost_keys,
            cluster_limit,
        )
    };
    let mut s = model(0);
    if settings.cluster_merge && module.image.has_clusters() && s.splits > 1 {
        let fits = |splits: u32| -> Result<bool> {
            Ok(blocks_per_split <= module.active_clusters(kernel.name(), threads, shared_bytes, splits)? as u64)
        };
        if let Some(clustered) = resident_cluster_plan(model, fits)? {
            s = clustered;
        }
    }
    let waves = (blocks_per_split * s.splits as u64).div_ceil(slots.max(1));
    Ok((s, waves))
}

/// Resident blocks of the pipelined kernel (`threads`, `shared_bytes`) across the device that the
/// split model plans with: the device's residency (at most `cap` per SM: the fp8 key-rows
/// kernel's [`FP8_KEY_ROWS_PLAN_BLOCKS`] where [`fp8_key_rows_pay`] chose it), or
/// [`PLAN_BLOCKS_ENV_VAR`](super::settings::PLAN_BLOCKS_ENV_VAR)'s per SM when set.
fn planned_slots(
    module: &ContextModule,
    settings: &LaunchSettings,
    kernel: KernelId,
    threads: u32,
    shared_bytes: u32,
    cap: Option<u32>,
) -> Result<u64> {
    let resident = match settings.plan_blocks {
        0 => {
            let resident = module.resident_blocks(kernel.name(), threads, shared_bytes)?;
            cap.map_or(resident, |cap| resident.min(cap))
        }
        n => n,
    };
    Ok(resident as u64 * module.multiprocessors as u64)
}

/// The split model's plan with a cluster merge whose clusters all run at once, if the model
/// prefers one: `model(limit)` plans with clusters of up to `limit` splits, `fits(splits)` says
/// whether every cluster of that many splits is resident together. A grid of clusters in rounds
/// ran up to 1.6x slower than the same splits with the merge kernel on an H200 (B4 x 2k: 32
/// clusters of 8 where 30 fit; benchmarks/NOTES.md "v9"); where the preferred clusters do not
/// all fit, smaller ones are tried before the merge kernel: B4 x 512 takes four two-tile splits
/// in clusters of four (13.9 µs L2-cold, 9.7 warm) where its eight one-tile splits, whose
/// clusters of eight would not all fit, went to the merge kernel (15.6 / 10.1; NOTES "v17").
/// None: the merge kernel's plan (the model's without clusters) stands.
fn resident_cluster_plan(
    model: impl Fn(u32) -> PipelinedSplits,
    mut fits: impl FnMut(u32) -> Result<bool>,
) -> Result<Option<PipelinedSplits>> {
    let mut limit = MAX_CLUSTER_SPLITS;
    while limit >= 2 {
        let clustered = model(limit);
        if !clustered.cluster {
            // The merge kernel's plan is cheaper than any cluster of up to `limit` splits.
            return Ok(None);
        }
        if fits(clustered.splits)? {
            return Ok(Some(clustered));
        }
        limit = clustered.splits - 1;
    }
    Ok(None)
}

/// K/V bytes in flight per SM that the pipelined kernel needs to stream at the copy bandwidth:
/// the 16-bit head_dim-128 kernel's two blocks of 3 stages of 32 KiB (two tiles in flight each),
/// measured at 97 % of it on an H100 (benchmarks/NOTES.md v3, v8).
const PIPE_IN_FLIGHT_PER_SM: u64 = 128 * 1024;

/// The pipelined kernel's stage count for a shape: the one giving the most resident blocks per SM
/// among those keeping [`PIPE_IN_FLIGHT_PER_SM`] in flight (`blocks * (stages - 1)` stages), else
/// the one keeping the most in flight; fewer stages on ties. fp8 KV takes two (the plan then
/// deepens it to [`FP8_WHOLE_ROW_STAGES`] where that leaves rows whole): on an H200 two
/// stages ran faster than three and four on every fp8 cell measured, twice (1 x 32k 34.5 against
/// 36.1 µs with four, benchmarks/NOTES.md "v11"; 33.2 / 35.0 / 35.6 µs with two / three / four
/// and 32 x 4k 85.9 / 89.1 / 91.3 after the kernel lost a quarter of its instructions, "v13.2"):
/// bytes in flight are not what it lacks. (An H100 had preferred five when the kernel widened
/// fp8 in shared memory, v8.)
pub(super) fn choose_pipe_stages(
    module: &ContextModule,
    kernel: KernelId,
    threads: u32,
    head_dim: u32,
    kv_bytes: u32,
    tile_keys: u32,
) -> Result<u32> {
    if kv_bytes == 1 {
        return Ok(2);
    }
    let stage = pipelined_stage_bytes(head_dim, kv_bytes, tile_keys) as u64;
    let mut best: Option<(bool, u64, u32)> = None; // (reaches the target, blocks or bytes, stages)
    for stages in 3..=PIPE_MAX_STAGES {
        let shared = pipelined_shared_bytes(head_dim, kv_bytes, tile_keys, stages);
        if shared > module.max_shared_bytes_per_block {
            break;
        }
        let blocks = module.resident_blocks(kernel.name(), threads, shared)? as u64;
        let in_flight = blocks * (stages as u64 - 1) * stage;
        let score =
            if in_flight >= PIPE_IN_FLIGHT_PER_SM { (true, blocks, stages) } else { (false, in_flight, stages) };
        if best.is_none_or(|b| (score.0, score.1) > (b.0, b.1)) {
            best = Some(score);
        }
    }
    Ok(best.map_or(3, |b| b.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clusters_that_would_not_all_fit_give_way_to_smaller_ones() {
        let slots = 2 * 132;
        // The plan for `blocks` per split and `keys`, when clusters of up to `fit_up_to` splits
        // all fit at once, and the cluster sizes asked about.
        let plan = |blocks: u64, keys: u32, fit_up_to: u32| {
            let mut asked = Vec::new();
            let model = |limit| choose_splits_by_waves(blocks, keys, slots, 1, DEFAULT_MERGE_COST_KEYS, limit);
            let p = resident_cluster_plan(model, |splits| {
                asked.push(splits);
                Ok(splits <= fit_up_to)
            })
            .unwrap();
            (p.map(|s| (s.splits, s.split_len, s.cluster)), asked)
        };
        // B4 x 512 (32 blocks per split): eight one-tile splits in clusters of eight when they
        // fit, else four two-tile splits in clusters of four rather than the merge kernel.
        assert_eq!(plan(32, 512, 16), (Some((8, 64, true)), vec![8]));
        assert_eq!(plan(32, 512, 7), (Some((4, 128, true)), vec![8, 4]));
        // No cluster fits: the merge kernel's plan (None).
        assert_eq!(plan(32, 512, 1).0, None);
        // B1 x 32k: the model prefers the merge kernel's many splits; no cluster is asked about.
        assert_eq!(plan(8, 32768, 16), (None, vec![]));
    }
}
