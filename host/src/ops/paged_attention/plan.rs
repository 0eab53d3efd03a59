//! What a launch plan is: the kernels a call enqueues, in which order, who builds the tile plan,
//! how split partials merge, and the workspace that takes. Chosen in `plan_choice.rs`, cached in
//! `plan_cache.rs`, enqueued by `launch/`.

use kernels_gpu::attention::planner::{plan_bytes, PLAN_SHARED_BYTES};
use kernels_gpu::kernels::decode::merge::{rpa_combine_shared_bytes, LOOP_MERGE_MAX_SPLITS};
use kernels_gpu::kernels::prefill::hopper::ws_scratch_bytes;

use super::kernel_id::{KernelFamily, KernelId};
use super::settings::{DecodeApartSetting, MergeSetting, PairSchedule, PipeMode};
use super::PagedAttention;

/// One call's launch, decided from static shapes and the device (never from device data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LaunchPlan {
    /// A tile kernel over query tiles, with its plan built by a plan kernel or by itself
    /// ([`TileLaunches`]).
    Tiled(TiledPlan),
    /// One block per (row, head chunk, split), plus the merge kernel where the splits leave
    /// partials that no merge block or cluster merges.
    Direct(DirectPlan),
}

/// How a tiled call's kernels are launched, and who builds the tile plan (the work items).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TileLaunches {
    /// The plan kernel (`rpa_plan`, `rpa_plan_ws`) builds the plan, then the tile kernel runs:
    /// two launches.
    PlanKernelThenTiles,
    /// The warp-specialized tile kernel's block 0 builds the plan under the call's tag: one
    /// launch.
    TilesPlanThemselves,
    /// Decode rows apart: the plan kernel, the decode kernel, then the tile kernel (three
    /// launches). `overlapped`: the plan kernel publishes the plan under the call's tag, and the
    /// tile kernel waits for that rather than for the decode kernel
    /// ([`DecodeApartSetting::TilesBesideDecode`] with blocks that are not persistent).
    PlanKernelDecodeTiles { overlapped: bool },
    /// Decode rows apart: the decode kernel, then the warp-specialized tile kernel, whose block 0
    /// builds the plan once the decode kernel has published that the inputs are written (two
    /// launches, the tile kernel beside the decode kernel).
    DecodeThenSelfPlannedTiles,
    /// Decode rows apart in one launch: the mix kernel's decode blocks, then its tile blocks,
    /// which plan themselves.
    Mix,
}

impl TileLaunches {
    /// The launches of a tiled plan. `can_plan_itself`: the warp-specialized kernel at a head dim
    /// whose kernel plans itself (`ws_plans_itself`); `has_decode`: the decode rows run apart;
    /// `one_launch`: in the mix kernel (`mix_in_one_launch`); `persistent`: the tile blocks are
    /// persistent (`XGK_WS_PERSISTENT` not 0); `setting`: [`DecodeApartSetting`].
    ///
    /// The warp-specialized kernel plans itself where it can and its blocks are persistent (its
    /// blocks that wait for block 0's plan are then all resident; a grid of one block per pair
    /// has more than fit, and no order of their start is promised); after a decode kernel, only
    /// where it runs beside it (its block 0 then waits for the decode kernel's word that the
    /// call's inputs are written). It runs beside the decode kernel (waiting for a plan
    /// published under a tag) with the setting 2, or 3 (in one launch where the plan allows it,
    /// else as 2).
    pub(super) fn choose(
        can_plan_itself: bool,
        has_decode: bool,
        one_launch: bool,
        persistent: bool,
        setting: DecodeApartSetting,
    ) -> Self {
        let beside_decode =
            one_launch || matches!(setting, DecodeApartSetting::TilesBesideDecode | DecodeApartSetting::OneLaunch);
        let overlapped = can_plan_itself && has_decode && beside_decode;
        let plans_itself = can_plan_itself && persistent && (!has_decode || overlapped);
        match (has_decode, plans_itself) {
            (false, true) => TileLaunches::TilesPlanThemselves,
            (false, false) => TileLaunches::PlanKernelThenTiles,
            // `mix_in_one_launch` asks for persistent blocks of a kernel that plans itself.
            (true, _) if one_launch => TileLaunches::Mix,
            (true, true) => TileLaunches::DecodeThenSelfPlannedTiles,
            (true, false) => TileLaunches::PlanKernelDecodeTiles { overlapped },
        }
    }

    /// Whether the plan kernel runs first.
    pub(super) fn plan_kernel_first(self) -> bool {
        matches!(self, TileLaunches::PlanKernelThenTiles | TileLaunches::PlanKernelDecodeTiles { .. })
    }

    /// Whether the call's words in the workspace take a launch tag (`RpaParams::launch_tag`):
    /// the plan's state word where the plan is published under a tag (by the tile kernel's block
    /// 0 or, beside a decode kernel, the plan kernel) and the decode kernel's inputs word.
    pub(super) fn tagged(self) -> bool {
        !matches!(self, TileLaunches::PlanKernelThenTiles | TileLaunches::PlanKernelDecodeTiles { overlapped: false })
    }

    /// The decode-apart mode the call's kernels run in (`RpaParams::decode_apart`).
    pub(super) fn decode_apart(self) -> DecodeApart {
        match self {
            TileLaunches::PlanKernelThenTiles | TileLaunches::TilesPlanThemselves => DecodeApart::Off,
            TileLaunches::PlanKernelDecodeTiles { .. } => DecodeApart::AfterPlanKernel,
            TileLaunches::DecodeThenSelfPlannedTiles => DecodeApart::AfterDecodeWord,
            TileLaunches::Mix => DecodeApart::OneLaunch,
        }
    }
}

/// How the kernels of a call whose decode rows run apart find their rows and plan
/// (`RpaParams::decode_apart`, encoded in `params.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DecodeApart {
    /// No decode rows apart: the tile kernel takes every row.
    Off,
    /// A plan kernel comes first (three launches).
    AfterPlanKernel,
    /// The warp-specialized tile kernel plans itself once the decode kernel's block (0, 0, 0)
    /// has published the plan header's inputs word (two launches).
    AfterDecodeWord,
    /// Both in one launch (the mix kernel).
    OneLaunch,
}

/// [`LaunchPlan::Tiled`]: the tile kernel, rows per query tile, plan items (grid x).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TiledPlan {
    /// The tile kernel (the mix kernel where [`TileLaunches::Mix`]).
    pub kernel: KernelId,
    pub rows: u32,
    pub capacity: u64,
    /// Threads per block of the tile kernel.
    pub threads: u32,
    /// Dynamic shared memory of the tile kernel (the wgmma variants align their stages).
    pub shared_bytes: u32,
    /// The warp-specialized kernel: after `rpa_plan_ws`, or alone where it plans itself (its
    /// scratch: `ws_scratch_bytes`; its tensor maps are its own parameters).
    pub warp_specialized: bool,
    /// The pipelined kernel over the batch's decode sequences, which the plan then leaves out
    /// (`RpaParams::decode_apart`): its splits merge in clusters or not at all (no scratch).
    pub decode: Option<DirectPlan>,
    /// How the warp-specialized kernel's blocks take their (item, KV head) pairs: persistent or
    /// not, which the launches depend on (a kernel that plans itself needs its blocks resident).
    /// Fixed with the plan, so that the grid and the launches agree.
    pub pair_schedule: PairSchedule,
    /// The launches, and who builds the plan.
    pub launches: TileLaunches,
}

impl TiledPlan {
    /// The plan kernel of this tile kernel (resolved even where it is not launched).
    pub(super) fn plan_kernel(&self) -> KernelId {
        KernelId::plan(self.warp_specialized)
    }
}

/// [`LaunchPlan::Direct`]: the attention kernel, its block, and the key splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct DirectPlan {
    pub kernel: KernelId,
    pub threads: u32,
    pub shared_bytes: u32,
    /// The pipelined kernel's K/V stages (0 for the other kernels).
    pub stages: u32,
    pub grid_y: u32,
    pub splits: u32,
    pub split_len: u32,
    /// The splits of a (row, head chunk) are one cluster and merge in it (no merge kernel, no
    /// scratch).
    pub cluster: bool,
    /// How partials in the workspace merge (with splits, outside a cluster).
    pub merge: PartialsMerge,
    /// Slices of merge blocks after the splits in grid z (`RpaParams::merge_blocks`; 0 unless
    /// `merge` is [`PartialsMerge::Blocks`] with partials in the workspace).
    pub merge_blocks: u32,
    /// How the pipelined kernel's warps share a tile's copies (None for the other kernels).
    pub pipe_mode: Option<PipeMode>,
}

impl DirectPlan {
    /// Whether the splits leave partials in the workspace: more than one split, not merged in a
    /// cluster.
    pub(super) fn partials_in_workspace(&self) -> bool {
        self.splits > 1 && !self.cluster
    }

    /// How the splits come together: the plan's split count, cluster flag, merge and merge blocks
    /// read as one choice.
    pub(super) fn split_merge(&self) -> SplitMerge {
        if self.cluster {
            return SplitMerge::Cluster;
        }
        if self.splits <= 1 {
            return SplitMerge::Unsplit;
        }
        match self.merge {
            PartialsMerge::LoopKernel => SplitMerge::LoopKernel,
            PartialsMerge::GroupKernel => SplitMerge::GroupKernel,
            PartialsMerge::Blocks => SplitMerge::MergeBlocks { slices: self.merge_blocks },
        }
    }

    /// The merge kernel that follows the attention kernel, with its dynamic shared memory: the
    /// loop or the group one for q's dtype; none without partials in the workspace or where the
    /// attention kernel merges them itself.
    pub(super) fn merge_kernel(&self, spec: &PagedAttention) -> Option<(KernelId, u32)> {
        let (family, shared) = match self.split_merge() {
            SplitMerge::LoopKernel => (KernelFamily::MergeLoop, 0),
            SplitMerge::GroupKernel => (KernelFamily::MergeGroups, rpa_combine_shared_bytes()),
            SplitMerge::Unsplit | SplitMerge::Cluster | SplitMerge::MergeBlocks { .. } => return None,
        };
        Some((KernelId::merge(family, spec.q_dtype), shared))
    }
}

/// How a direct plan's key splits come together ([`DirectPlan::split_merge`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SplitMerge {
    /// One split: the attention kernel writes the output (one launch).
    Unsplit,
    /// The splits of a (row, head chunk) are one thread-block cluster and merge through
    /// distributed shared memory (one launch, no partials in the workspace).
    Cluster,
    /// Partials in the workspace, then the loop merge kernel (two launches).
    LoopKernel,
    /// Partials in the workspace, then the group merge kernel (two launches).
    GroupKernel,
    /// Partials in the workspace, merged by `slices` slices of merge blocks after the splits in
    /// the attention kernel's grid (one launch; `RpaParams::merge_blocks`).
    MergeBlocks { slices: u32 },
}

/// How a split plan's partials in the workspace are merged ([`MergeSetting`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PartialsMerge {
    /// `rpa_combine`: a loop over the splits per output element.
    LoopKernel,
    /// `rpa_combine_groups`: split groups, every load in flight.
    GroupKernel,
    /// In the pipelined kernel's merge blocks, a block per (row, query head) after the splits in
    /// its grid (`RpaParams::merge_blocks`): one launch; a counter per (row, head chunk) after the
    /// partials in the workspace (`RpaParams::launch_tag`).
    Blocks,
}

impl PartialsMerge {
    /// The default for `splits` splits: the loop kernel up to [`LOOP_MERGE_MAX_SPLITS`], the group
    /// kernel above.
    fn auto(splits: u32) -> Self {
        if splits <= LOOP_MERGE_MAX_SPLITS {
            PartialsMerge::LoopKernel
        } else {
            PartialsMerge::GroupKernel
        }
    }

    /// The merge for `mode` and `splits` splits; `blocks`: whether the kernel's grid can hold
    /// merge blocks (the pipelined kernel); `host_bound`: whether the call's host cost outweighs
    /// the merge blocks' device cost (a short call enqueued outside stream capture).
    pub(super) fn for_mode(mode: MergeSetting, splits: u32, blocks: bool, host_bound: bool) -> Self {
        match mode {
            MergeSetting::LoopKernel => PartialsMerge::LoopKernel,
            MergeSetting::GroupKernel => PartialsMerge::GroupKernel,
            MergeSetting::Blocks if blocks => PartialsMerge::Blocks,
            MergeSetting::ByCapture if blocks && host_bound => PartialsMerge::Blocks,
            _ => PartialsMerge::auto(splits),
        }
    }
}

impl LaunchPlan {
    /// The kernels the launch enqueues, with their dynamic shared memory: for a tiled plan the
    /// plan kernel (resolved even where it is not launched, so that the indices stay fixed), the
    /// tile kernel and the decode kernel; for a direct plan the attention kernel and the merge
    /// kernel.
    pub(super) fn kernels(&self, spec: &PagedAttention) -> Vec<(KernelId, u32)> {
        match *self {
            LaunchPlan::Tiled(t) => {
                let mut v = vec![(t.plan_kernel(), PLAN_SHARED_BYTES), (t.kernel, t.shared_bytes)];
                v.extend(t.decode.map(|d| (d.kernel, d.shared_bytes)));
                v
            }
            LaunchPlan::Direct(d) => {
                let mut v = vec![(d.kernel, d.shared_bytes)];
                v.extend(d.merge_kernel(spec));
                v
            }
        }
    }

    /// Bytes of temporary device memory the launch needs.
    pub(super) fn scratch_bytes(&self, spec: &PagedAttention) -> usize {
        match *self {
            LaunchPlan::Tiled(t) if t.warp_specialized => ws_scratch_bytes(t.capacity) as usize,
            LaunchPlan::Tiled(t) => plan_bytes(t.capacity) as usize,
            LaunchPlan::Direct(d) if d.cluster => 0,
            LaunchPlan::Direct(d) => split_scratch_bytes(spec, d.splits, d.grid_y, d.merge),
        }
    }
}

/// Bytes of one split's partials: an f32 output row and a log-sum-exp per (row, q head).
pub(super) fn bytes_per_split(spec: &PagedAttention) -> usize {
    spec.max_tokens as usize * spec.num_q_heads as usize * (spec.head_dim as usize + 1) * 4
}

/// Bytes of the split-KV partials (none without splits), and of the merge blocks' counters
/// after them.
pub(super) fn split_scratch_bytes(spec: &PagedAttention, splits: u32, grid_y: u32, merge: PartialsMerge) -> usize {
    if splits <= 1 {
        return 0;
    }
    splits as usize * bytes_per_split(spec) + split_counter_bytes(spec, grid_y, merge)
}

/// Bytes of the merge blocks' counters (`RpaParams::launch_tag`): an 8-byte word per (row, head
/// chunk), and 4 bytes that may align them after an odd count of log-sum-exps
/// (`split_counters_offset`); none for the other merges.
pub(super) fn split_counter_bytes(spec: &PagedAttention, grid_y: u32, merge: PartialsMerge) -> usize {
    match merge {
        PartialsMerge::Blocks => 4 + 8 * spec.max_tokens as usize * grid_y as usize,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    #[test]
    fn merge_modes_and_the_merge_blocks_workspace() {
        use MergeSetting::*;
        // By split count; merge blocks only where the kernel's grid can hold them; by capture
        // (the default) as merge blocks for a host-bound call (short, outside stream capture),
        // else by split count. Host-bound or not changes nothing else.
        for host_bound in [false, true] {
            assert_eq!(PartialsMerge::for_mode(BySplitCount, 16, true, host_bound), PartialsMerge::LoopKernel);
            assert_eq!(PartialsMerge::for_mode(BySplitCount, 17, true, host_bound), PartialsMerge::GroupKernel);
            assert_eq!(PartialsMerge::for_mode(GroupKernel, 4, true, host_bound), PartialsMerge::GroupKernel);
            assert_eq!(PartialsMerge::for_mode(Blocks, 47, true, host_bound), PartialsMerge::Blocks);
            assert_eq!(PartialsMerge::for_mode(Blocks, 47, false, host_bound), PartialsMerge::GroupKernel);
            assert_eq!(PartialsMerge::for_mode(Blocks, 8, false, host_bound), PartialsMerge::LoopKernel);
            assert_eq!(PartialsMerge::for_mode(ByCapture, 8, false, host_bound), PartialsMerge::LoopKernel);
        }
        assert_eq!(PartialsMerge::for_mode(ByCapture, 47, true, true), PartialsMerge::Blocks);
        assert_eq!(PartialsMerge::for_mode(ByCapture, 47, true, false), PartialsMerge::GroupKernel);
        assert_eq!(PartialsMerge::for_mode(ByCapture, 8, true, false), PartialsMerge::LoopKernel);
        assert_eq!(super::super::settings::DEFAULT_MERGE_MODE, ByCapture);
        // The counters follow the partials: 8 bytes per (row, head chunk), 4 for alignment.
        // One decode row, 32 q / 8 KV heads, head_dim 128.
        let spec =
            super::super::tests::check(&[1, 32, 128], &[2048, 16, 16, 128], DType::BF16, Default::default()).unwrap();
        let partials = 47 * bytes_per_split(&spec);
        assert_eq!(split_scratch_bytes(&spec, 47, 8, PartialsMerge::GroupKernel), partials);
        assert_eq!(split_scratch_bytes(&spec, 47, 8, PartialsMerge::Blocks), partials + 4 + 8 * 8);
        assert_eq!(split_scratch_bytes(&spec, 1, 8, PartialsMerge::Blocks), 0);
    }

    #[test]
    fn split_merges_read_the_plan_as_the_launches_do() {
        let spec =
            super::super::tests::check(&[1, 32, 128], &[2048, 16, 16, 128], DType::BF16, Default::default()).unwrap();
        let plan = |splits, cluster, merge, merge_blocks| DirectPlan {
            kernel: KernelId::attention(KernelFamily::Pipelined, &spec),
            threads: 128,
            shared_bytes: 0,
            stages: 2,
            grid_y: 8,
            splits,
            split_len: 64,
            cluster,
            merge,
            merge_blocks,
            pipe_mode: None,
        };
        use PartialsMerge::*;
        for merge in [LoopKernel, GroupKernel, Blocks] {
            for splits in [1, 2, 47] {
                for cluster in [false, true] {
                    // `plan_launch` gives merge blocks only to split partials in the workspace.
                    let blocks = if merge == Blocks && splits > 1 && !cluster { 4 } else { 0 };
                    let p = plan(splits, cluster, merge, blocks);
                    let m = p.split_merge();
                    assert_eq!(
                        matches!(m, SplitMerge::LoopKernel | SplitMerge::GroupKernel | SplitMerge::MergeBlocks { .. }),
                        p.partials_in_workspace(),
                        "{p:?}"
                    );
                    assert_eq!(matches!(m, SplitMerge::MergeBlocks { slices: 4 }), blocks != 0, "{p:?}");
                    let kernel = p.merge_kernel(&spec).map(|(k, _)| k.name());
                    let expected = match merge {
                        LoopKernel if p.partials_in_workspace() => Some("rpa_combine_bf16"),
                        GroupKernel if p.partials_in_workspace() => Some("rpa_combine_groups_bf16"),
                        _ => None,
                    };
                    assert_eq!(kernel, expected, "{p:?}");
                }
            }
        }
    }

    #[test]
    fn tile_launches_follow_the_old_integer_rules() {
        use DecodeApartSetting as S;
        // The rules as the integers said them before the enums (`decode_apart` 0-3 and the
        // `RpaParams::decode_apart` they gave), checked over every input.
        for can in [false, true] {
            for decode in [false, true] {
                for one in [false, true] {
                    for persistent in [false, true] {
                        for (n, setting) in
                            [S::Off, S::TilesAfterDecode, S::TilesBesideDecode, S::OneLaunch].into_iter().enumerate()
                        {
                            if one && !(can && decode && persistent && setting == S::OneLaunch) {
                                continue; // `mix_in_one_launch` asks for all of these.
                            }
                            let mode = if one { 3 } else { (n as u32).min(2) };
                            let overlaps = can && decode && mode >= 2;
                            let plans_itself = can && persistent && (!decode || overlaps);
                            let param = match decode {
                                false => 0,
                                true if one => 3,
                                true if plans_itself => 2,
                                true => 1,
                            };
                            let l = TileLaunches::choose(can, decode, one, persistent, setting);
                            assert_eq!(l.plan_kernel_first(), !plans_itself, "{l:?}");
                            assert_eq!(l.tagged(), plans_itself || overlaps, "{l:?}");
                            assert_eq!(super::super::params::decode_apart_param(l.decode_apart()), param, "{l:?}");
                        }
                    }
                }
            }
        }
    }
}
