//! The launch settings of paged attention: the environment variables that choose kernels and
//! plans (benchmarks compare them in one process), their defaults, and [`LaunchSettings`], what
//! they say once parsed, as enums where they choose among ways (`params.rs` turns those into the
//! kernels' integers). Cached per process by `plan_cache.rs`, which reloads them on
//! `reload_settings`; the plan rules they feed are in `plan_rules.rs`.

use kernels_gpu::kernels::decode::pipelined::layout::PIPE_MAX_STAGES;

use super::plan_rules::{DEFAULT_MERGE_COST_KEYS, DEFAULT_MIN_SPLIT_TILES};
use crate::error::Result;

/// Which attention kernel runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KernelChoice {
    /// The fastest kernel that applies: on Hopper, where the call is prefill-shaped
    /// (`wgmma_tiles_preferred`), the warp-specialized tiles where they apply (`tiled_ws_applies`,
    /// head_dim 64/128/256), else the wgmma tiles; otherwise tiled for prefill and mixed batches,
    /// else pipelined, else tensor cores, else the general kernel.
    #[default]
    Auto,
    /// The general (CUDA-core) kernel: every dtype and head_dim.
    General,
    /// The direct-load tensor-core kernel; an error where it does not apply.
    TensorCore,
    /// The `cp.async`-pipelined tensor-core kernel; an error where it does not apply.
    Pipelined,
    /// The query-tiled kernel with its device-side plan (prefill and mixed batches); an error
    /// where it does not apply.
    Tiled,
    /// The query-tiled kernel with warpgroup MMA (`wgmma`) for the tensor-core work: sm_90a image
    /// only (a Hopper GPU); what `Auto` takes for prefill-shaped calls where the warp-specialized
    /// kernel does not apply.
    TiledWgmma,
    /// The warp-specialized tile kernel (sm_90a image only, page sizes in multiples of 16): 128-row
    /// query tiles, a producer warp loading 128-key K/V tiles with bulk tensor copies (TMA)
    /// through mbarrier rings and two `wgmma` consumer warpgroups
    /// (`kernels_gpu::kernels::prefill::hopper`); what `Auto` takes for prefill-shaped
    /// calls on Hopper where it applies.
    TiledWarpSpecialized,
}

/// Environment variable that overrides [`KernelChoice::Auto`] (benchmarks compare the kernels in
/// one process): `auto`, `general`, `mma`, `pipelined`, `tiled`, `tiled-wgmma` or `tiled-ws`.
pub const KERNEL_ENV_VAR: &str = "XGK_RPA_KERNEL";

impl KernelChoice {
    /// The choice named by [`KERNEL_ENV_VAR`] now, or `Auto` when it is unset.
    pub fn from_env() -> Result<Self> {
        match std::env::var(KERNEL_ENV_VAR) {
            Err(_) => Ok(KernelChoice::Auto),
            Ok(v) => match v.as_str() {
                "" | "auto" => Ok(KernelChoice::Auto),
                "general" => Ok(KernelChoice::General),
                "mma" => Ok(KernelChoice::TensorCore),
                "pipelined" => Ok(KernelChoice::Pipelined),
                "tiled" => Ok(KernelChoice::Tiled),
                "tiled-wgmma" => Ok(KernelChoice::TiledWgmma),
                "tiled-ws" => Ok(KernelChoice::TiledWarpSpecialized),
                other => Err(crate::Error::invalid(format!(
                    "{KERNEL_ENV_VAR}={other:?}: expected auto, general, mma, pipelined, tiled, tiled-wgmma or tiled-ws"
                ))),
            },
        }
    }
}

/// Environment variable choosing the L2 hint of the pipelined kernel's copies: `1` prefetches the
/// surrounding 256 bytes into L2, `0` (the default) none: with whole 128-byte lines per warp
/// instruction the prefetch only adds L2 work, 3-6 % slower on every bandwidth-bound H200 cell
/// (benchmarks/NOTES.md "v9"; it had paid 2-4 % on an H100 when the copies read half lines).
/// (An evict-first policy, bit 1 until session 16, measured nothing on an H100 and stopped the
/// kernel with an illegal instruction on an H200: removed, NOTES "v16".)
pub const COPY_HINT_ENV_VAR: &str = "XGK_RPA_COPY_HINT";
/// Default of [`COPY_HINT_ENV_VAR`].
const DEFAULT_COPY_HINT: CopyHint = CopyHint::None;

/// Environment variable switching programmatic dependent launch off (`0`) or on (`1`, the
/// default): where the loaded image has the grid-dependency instructions (sm_90a) and the driver
/// records it under capture, each attention kernel may launch while the kernel before it on the
/// stream finishes (the split merge and the tile kernel overlap their launch with the first
/// kernel's tail).
pub const PROGRAMMATIC_LAUNCH_ENV_VAR: &str = "XGK_PDL";

fn programmatic_from_env() -> Result<bool> {
    match std::env::var(PROGRAMMATIC_LAUNCH_ENV_VAR).as_deref() {
        Err(_) | Ok("") | Ok("1") => Ok(true),
        Ok("0") => Ok(false),
        Ok(other) => Err(crate::Error::invalid(format!("{PROGRAMMATIC_LAUNCH_ENV_VAR}={other:?}: expected 0 or 1"))),
    }
}

/// Environment variable overriding [`DEFAULT_MIN_SPLIT_TILES`] (1 to 64).
pub const MIN_SPLIT_TILES_ENV_VAR: &str = "XGK_RPA_MIN_SPLIT_TILES";

/// A whole number in `range` from environment variable `var`, `default` when it is unset or empty.
fn bounded_from_env(var: &str, default: u32, range: std::ops::RangeInclusive<u32>) -> Result<u32> {
    Ok(optional_bounded_from_env(var, range)?.unwrap_or(default))
}

/// A whole number in `range` from environment variable `var`, None when it is unset or empty.
fn optional_bounded_from_env(var: &str, range: std::ops::RangeInclusive<u32>) -> Result<Option<u32>> {
    match std::env::var(var) {
        Err(_) => Ok(None),
        Ok(v) if v.is_empty() => Ok(None),
        Ok(v) => v.parse::<u32>().ok().filter(|n| range.contains(n)).map(Some).ok_or_else(|| {
            crate::Error::invalid(format!(
                "{var}={v:?}: expected a whole number from {} to {}",
                range.start(),
                range.end()
            ))
        }),
    }
}

/// Environment variable overriding [`DEFAULT_MERGE_COST_KEYS`] (0 to 65536).
pub const MERGE_COST_KEYS_ENV_VAR: &str = "XGK_RPA_MERGE_COST_KEYS";

/// Environment variable choosing the warp-specialized kernel's consumer schedule (0 = the two
/// consumer warpgroups issue their products freely, 1 = they take turns: ping-pong).
pub const CONSUMER_SCHEDULE_ENV_VAR: &str = "XGK_WS_SCHEDULE";
/// Default of [`CONSUMER_SCHEDULE_ENV_VAR`].
const DEFAULT_CONSUMER_SCHEDULE: ConsumerSchedule = ConsumerSchedule::PingPong;

/// Environment variable choosing how the warp-specialized kernel's blocks take their (item, KV
/// head) pairs: `0` one block per pair; persistent blocks (as many as multiprocessors) taking
/// them in a fixed snake order (`1`) or from a counter (`2`, the default: a dynamic schedule).
pub const PERSISTENT_ENV_VAR: &str = "XGK_WS_PERSISTENT";
/// Default of [`PERSISTENT_ENV_VAR`].
const DEFAULT_PERSISTENT: PairSchedule = PairSchedule::PersistentDynamic;

/// Environment variable overriding the pipelined kernel's K/V stage count (2 to
/// [`PIPE_MAX_STAGES`]; unset, empty or 0: the shape's count, `choose_pipe_stages`). Stages
/// that do not fit the device's shared memory are an error at launch.
pub const PIPE_STAGES_ENV_VAR: &str = "XGK_RPA_STAGES";

/// Environment variable switching the pipelined kernel's cluster merge of its splits off (`0`)
/// or on (`1`, the default; sm_90 image): up to [`MAX_CLUSTER_SPLITS`](kernels_gpu::kernels::decode::merge::MAX_CLUSTER_SPLITS) splits of a (row, KV
/// head) run as one thread-block cluster and merge through distributed shared memory, with no
/// merge kernel and no partials in the workspace.
pub const CLUSTER_MERGE_ENV_VAR: &str = "XGK_RPA_CLUSTER_MERGE";

/// Environment variable setting the resident blocks per multiprocessor that the pipelined
/// kernel's split model plans with (1 to 32; unset, empty or 0: the driver's occupancy figure for
/// the kernel and its stages, at most [`FP8_KEY_ROWS_PLAN_BLOCKS`](super::plan_rules::FP8_KEY_ROWS_PLAN_BLOCKS) for the fp8 key-rows kernel
/// where [`fp8_key_rows_pay`](super::plan_rules::fp8_key_rows_pay) chose it). An experiment's knob: it separates a stage count's
/// residency from the split plan the extra residency would otherwise bring (benchmarks/NOTES.md
/// "v10").
pub const PLAN_BLOCKS_ENV_VAR: &str = "XGK_RPA_PLAN_BLOCKS";

/// Environment variable letting the split model split a 16-bit grid whose unsplit rows already
/// give nearly every multiprocessor a block (`1`); unset, empty or `0` (the default), such a grid
/// keeps its rows whole ([`unsplit_grid_fills_device`]). A benchmark's knob (`auto:fg<N>`).
pub const FULL_GRID_SPLITS_ENV_VAR: &str = "XGK_RPA_FULL_GRID_SPLITS";

/// Environment variable choosing how the pipelined kernel's warps share a tile's copies
/// ([`PipeMode`]: `0` a block barrier per tile, `1` per-key-group pipelines); unset or
/// empty: [`default_pipe_mode`](super::plan_rules::default_pipe_mode) for the launch.
pub const PIPE_MODE_ENV_VAR: &str = "XGK_RPA_PIPE_MODE";

/// Environment variable choosing how split partials in the workspace are merged ([`MergeSetting`];
/// splits that run as a cluster merge in it whatever this says): `0` the merge kernels by split count
/// (`PartialsMerge::auto` in `plan.rs`); `1` the loop merge kernel, `2` the group merge kernel; `3` in the
/// pipelined kernel's merge blocks, slices of its grid after the splits
/// (`RpaParams::merge_blocks`; the other kernels take mode 0's merge kernel); `4`
/// ([`DEFAULT_MERGE_MODE`]) by where the call is enqueued and how long it is: mode 3 for a call
/// outside stream capture that reads at most [`ONE_LAUNCH_MAX_KV_BYTES`](super::plan_choice::ONE_LAUNCH_MAX_KV_BYTES) of KV, mode 0 for
/// longer calls and for a call captured into a CUDA graph. Tests run every mode.
///
/// Why the default asks: merge blocks make a split call one launch, and a launch is most of a
/// call's host cost (1 x 32k on an H200: 3.5-4.7 µs against 6.1-8.6 with the merge kernel), but
/// their merge ends ~0.65 µs later on the device on the single-row split cells (1 x 8k 14.0
/// against 13.4 µs), ~1 µs on 4 x 32k (benchmarks/NOTES.md "v27", "v28"). A call enqueued
/// directly pays its host cost every time; a captured one pays it once, at the capture, and only
/// device time at each replay (CUDA graphs, JAX's command buffers, `torch.compile`'s
/// reduce-overhead mode). Direct calls back to back (torch, CUDA events per call, "v28.1"): 1 x
/// 8k 1.1 µs faster with merge blocks (the host is the bound), 4 x 32k 2.2 µs slower (the device
/// is).
pub const MERGE_MODE_ENV_VAR: &str = "XGK_RPA_MERGE_MODE";

/// Default of [`MERGE_MODE_ENV_VAR`]: [`MergeSetting::ByCapture`].
pub(super) const DEFAULT_MERGE_MODE: MergeSetting = MergeSetting::ByCapture;

/// Environment variable switching the pipelined kernel's page-table preload off (`0`) or on (`1`,
/// the default; `RpaParams::table_preload`): the entries of a block's first tiles load together
/// with its row's metadata on the decode guess, instead of one round trip after it.
pub const TABLE_PRELOAD_ENV_VAR: &str = "XGK_RPA_TABLE_PRELOAD";

/// Environment variable switching off (`0`) the decode kernel for a mixed batch's decode rows
/// ([`DecodeApartSetting`]; `RpaParams::decode_apart`, [`decode_apart_applies`](super::decode_apart_applies)): with it, Auto runs a call that may mix
/// prefill and decode rows as the tile kernel over the other rows and the pipelined decode kernel
/// over its one-row sequences; without it, the tile kernel takes every row. With `1` the tile
/// kernel starts after the decode kernel; with `2` the
/// warp-specialized tile kernel (head dims 64 and 128) does not wait for it: it waits for its
/// plan's state word (published under the call's tag by its own block 0, which waits for the
/// decode kernel's word that the inputs are written, or with one block per pair by `rpa_plan_ws`)
/// and for the decode kernel only before its blocks end, so that its blocks take the
/// multiprocessors the decode grid's last wave leaves (`TileLaunches` in `plan.rs`). With `3`
/// both run in one launch where the decode plan allows it (`mix_in_one_launch`: the key-rows
/// twin with no splits, head dims 64 and 128, persistent tile blocks), three decode blocks to a
/// block of the tile kernel's grid (`kernels_gpu::kernels::mix`); elsewhere as `2`
/// ([`DEFAULT_DECODE_APART`], where [`mix_one_launch_pays`](super::plan_rules::mix_one_launch_pays):
/// on an H100, one launch ran the peers' four engine-step mixes 0-9 % faster on the GPU, and their
/// host cost fell from two launches' to one's, benchmarks/NOTES.md "v32"; elsewhere, unmeasured,
/// the default runs as `2`).
pub const DECODE_APART_ENV_VAR: &str = "XGK_RPA_DECODE_APART";

/// Environment variable that makes the library write each launch plan it makes to stderr: `1` on,
/// unset, empty or `0` off. A line names the device figures the rules read, the static shapes,
/// the kernel choice and workspace, and the plan (kernel, stages, splits, merge, pipe mode), so a
/// benchmark's log says what `auto` chose instead of leaving it to be inferred from which
/// variant's column it matches. Plans are cached, and a settings reload makes them again: a line
/// is written once per process (`log_plan_once`, which forgets after as many lines as the plan
/// cache holds).
pub const LOG_PLANS_ENV_VAR: &str = "XGK_LOG_PLANS";

/// Environment variable choosing the pipelined kernel's layout where GQA groups are at most
/// [`KEY_ROWS_MAX_HEADS`](kernels_gpu::kernels::decode::key_rows::KEY_ROWS_MAX_HEADS) and head_dim 64 or 128 (`key_rows_applies`): keys as the mma's rows
/// and heads as its columns (`rpa_pipe_kr_*`: half the mma instructions and accumulators, four
/// blocks per SM for head_dim 128) for 16-bit KV (`1`) or for fp8 KV too (`2`), or heads as rows
/// (`rpa_pipe_*`) everywhere (`0`); unset or empty: 16-bit KV, and fp8 KV where
/// [`fp8_key_rows_pay`](super::plan_rules::fp8_key_rows_pay) (an H100 at head_dim 128), its splits then planned for at most
/// [`FP8_KEY_ROWS_PLAN_BLOCKS`](super::plan_rules::FP8_KEY_ROWS_PLAN_BLOCKS) blocks per SM (an explicit `2` plans at the kernel's occupancy).
pub const KEY_ROWS_ENV_VAR: &str = "XGK_RPA_KEY_ROWS";

/// [`COPY_HINT_ENV_VAR`]: the L2 hint of the pipelined kernel's K/V copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CopyHint {
    /// No hint (`0`, the default).
    None,
    /// Prefetch the surrounding 256 bytes into L2 (`1`).
    Prefetch256,
}

/// [`CONSUMER_SCHEDULE_ENV_VAR`]: how the warp-specialized kernel's two consumer warpgroups share
/// the tensor cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConsumerSchedule {
    /// They issue their products freely (`0`).
    Free,
    /// They take turns (`1`, the default): ping-pong.
    PingPong,
}

/// [`PERSISTENT_ENV_VAR`]: how the warp-specialized kernel's blocks take their (item, KV head)
/// pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PairSchedule {
    /// One block per pair (`0`).
    BlockPerPair,
    /// Persistent blocks, as many as multiprocessors, taking pairs in a fixed snake order (`1`).
    PersistentSnake,
    /// Persistent blocks taking pairs from a counter (`2`, the default): a dynamic schedule.
    PersistentDynamic,
}

impl PairSchedule {
    /// Whether the blocks are persistent (one per multiprocessor at most).
    pub fn persistent(self) -> bool {
        self != PairSchedule::BlockPerPair
    }
}

/// [`PIPE_MODE_ENV_VAR`]: how the pipelined kernel's warps share a tile's copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PipeMode {
    /// Every thread copies the tile; a block barrier per tile (`0`).
    BlockBarrier,
    /// Each key group's warps copy and wait for their own keys (`1`): no block barrier in the
    /// tile loop.
    KeyGroupPipelines,
}

/// [`MERGE_MODE_ENV_VAR`]: how split partials in the workspace are merged (splits that run as a
/// cluster merge in it whatever this says).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MergeSetting {
    /// A merge kernel by split count (`0`): the loop kernel up to
    /// [`LOOP_MERGE_MAX_SPLITS`](kernels_gpu::kernels::decode::merge::LOOP_MERGE_MAX_SPLITS)
    /// splits, the group kernel above.
    BySplitCount,
    /// The loop merge kernel (`1`).
    LoopKernel,
    /// The group merge kernel (`2`).
    GroupKernel,
    /// The pipelined kernel's merge blocks (`3`); the other kernels as
    /// [`MergeSetting::BySplitCount`].
    Blocks,
    /// By where the call is enqueued and how long it is (`4`, the default): as
    /// [`MergeSetting::Blocks`] for a direct call reading at most
    /// [`ONE_LAUNCH_MAX_KV_BYTES`](super::plan_choice::ONE_LAUNCH_MAX_KV_BYTES) of KV, else as
    /// [`MergeSetting::BySplitCount`].
    ByCapture,
}

/// [`KEY_ROWS_ENV_VAR`] when given: where the pipelined kernel takes the key-rows layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyRowsSetting {
    /// Heads as the mma's rows everywhere (`0`).
    Off,
    /// Keys as rows for 16-bit KV (`1`).
    SixteenBitKv,
    /// Keys as rows for 16-bit and fp8 KV (`2`).
    AllKv,
}

/// [`DECODE_APART_ENV_VAR`]: whether and how a mixed batch's decode rows run apart from its other
/// rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecodeApartSetting {
    /// The tile kernel takes every row (`0`).
    Off,
    /// The decode kernel, then the tile kernel after it (`1`).
    TilesAfterDecode,
    /// The warp-specialized tile kernel (head dims 64 and 128) beside the decode kernel, waiting
    /// for its plan's state word rather than for the decode kernel (`2`).
    TilesBesideDecode,
    /// Both in one launch (the mix kernel) where the decode plan allows it, elsewhere as
    /// [`DecodeApartSetting::TilesBesideDecode`] (`3`, the default).
    OneLaunch,
}

/// Default of [`DECODE_APART_ENV_VAR`].
const DEFAULT_DECODE_APART: DecodeApartSetting = DecodeApartSetting::OneLaunch;

/// A choice from environment variable `var` whose values are the indices of `options` (a whole
/// number from 0), `default` when it is unset or empty.
fn choice_from_env<T: Copy + PartialEq>(var: &str, default: T, options: &[T]) -> Result<T> {
    let default = options.iter().position(|o| *o == default).expect("the default is an option") as u32;
    Ok(options[bounded_from_env(var, default, 0..=options.len() as u32 - 1)? as usize])
}

/// A choice from environment variable `var` as [`choice_from_env`], None when it is unset or empty.
fn optional_choice_from_env<T: Copy>(var: &str, options: &[T]) -> Result<Option<T>> {
    Ok(optional_bounded_from_env(var, 0..=options.len() as u32 - 1)?.map(|n| options[n as usize]))
}

/// The process's launch settings, from the environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchSettings {
    /// [`KERNEL_ENV_VAR`].
    pub choice: KernelChoice,
    /// [`COPY_HINT_ENV_VAR`].
    pub copy_hint: CopyHint,
    /// [`PROGRAMMATIC_LAUNCH_ENV_VAR`].
    pub programmatic: bool,
    /// [`MIN_SPLIT_TILES_ENV_VAR`].
    pub min_split_tiles: u32,
    /// [`MERGE_COST_KEYS_ENV_VAR`].
    pub merge_cost_keys: u32,
    /// [`CONSUMER_SCHEDULE_ENV_VAR`].
    pub consumer_schedule: ConsumerSchedule,
    /// [`PERSISTENT_ENV_VAR`].
    pub pair_schedule: PairSchedule,
    /// [`PIPE_STAGES_ENV_VAR`] (0: the shape's default).
    pub pipe_stages: u32,
    /// [`CLUSTER_MERGE_ENV_VAR`].
    pub cluster_merge: bool,
    /// [`PLAN_BLOCKS_ENV_VAR`] (0: the kernel's occupancy).
    pub plan_blocks: u32,
    /// [`FULL_GRID_SPLITS_ENV_VAR`].
    pub full_grid_splits: bool,
    /// [`PIPE_MODE_ENV_VAR`] (None: [`default_pipe_mode`](super::plan_rules::default_pipe_mode)).
    pub pipe_mode: Option<PipeMode>,
    /// [`MERGE_MODE_ENV_VAR`].
    pub merge_mode: MergeSetting,
    /// [`TABLE_PRELOAD_ENV_VAR`].
    pub table_preload: bool,
    /// [`KEY_ROWS_ENV_VAR`] (None: by `plan_choice.rs`'s `key_rows_taken`'s default).
    pub key_rows: Option<KeyRowsSetting>,
    /// [`DECODE_APART_ENV_VAR`] ([`DEFAULT_DECODE_APART`] where unset).
    pub decode_apart: DecodeApartSetting,
    /// Whether [`DECODE_APART_ENV_VAR`] was given: unset, `3` takes one launch only where
    /// [`mix_one_launch_pays`](super::plan_rules::mix_one_launch_pays).
    pub decode_apart_given: bool,
    /// [`LOG_PLANS_ENV_VAR`].
    pub log_plans: bool,
}

impl LaunchSettings {
    /// The settings the environment names now (an invalid value is an error naming it).
    pub fn from_env() -> Result<Self> {
        use DecodeApartSetting as Apart;
        let decode_apart = optional_choice_from_env(
            DECODE_APART_ENV_VAR,
            &[Apart::Off, Apart::TilesAfterDecode, Apart::TilesBesideDecode, Apart::OneLaunch],
        )?;
        Ok(LaunchSettings {
            choice: KernelChoice::from_env()?,
            copy_hint: choice_from_env(COPY_HINT_ENV_VAR, DEFAULT_COPY_HINT, &[CopyHint::None, CopyHint::Prefetch256])?,
            programmatic: programmatic_from_env()?,
            min_split_tiles: bounded_from_env(MIN_SPLIT_TILES_ENV_VAR, DEFAULT_MIN_SPLIT_TILES, 1..=64)?,
            merge_cost_keys: bounded_from_env(MERGE_COST_KEYS_ENV_VAR, DEFAULT_MERGE_COST_KEYS, 0..=65536)?,
            consumer_schedule: choice_from_env(
                CONSUMER_SCHEDULE_ENV_VAR,
                DEFAULT_CONSUMER_SCHEDULE,
                &[ConsumerSchedule::Free, ConsumerSchedule::PingPong],
            )?,
            pair_schedule: choice_from_env(
                PERSISTENT_ENV_VAR,
                DEFAULT_PERSISTENT,
                &[PairSchedule::BlockPerPair, PairSchedule::PersistentSnake, PairSchedule::PersistentDynamic],
            )?,
            pipe_stages: match bounded_from_env(PIPE_STAGES_ENV_VAR, 0, 0..=PIPE_MAX_STAGES)? {
                1 => {
                    return Err(crate::Error::invalid(format!(
                        "{PIPE_STAGES_ENV_VAR}=1: the ring needs at least 2 stages"
                    )))
                }
                n => n,
            },
            cluster_merge: bounded_from_env(CLUSTER_MERGE_ENV_VAR, 1, 0..=1)? == 1,
            plan_blocks: bounded_from_env(PLAN_BLOCKS_ENV_VAR, 0, 0..=32)?,
            full_grid_splits: bounded_from_env(FULL_GRID_SPLITS_ENV_VAR, 0, 0..=1)? == 1,
            pipe_mode: optional_choice_from_env(
                PIPE_MODE_ENV_VAR,
                &[PipeMode::BlockBarrier, PipeMode::KeyGroupPipelines],
            )?,
            merge_mode: choice_from_env(
                MERGE_MODE_ENV_VAR,
                DEFAULT_MERGE_MODE,
                &[
                    MergeSetting::BySplitCount,
                    MergeSetting::LoopKernel,
                    MergeSetting::GroupKernel,
                    MergeSetting::Blocks,
                    MergeSetting::ByCapture,
                ],
            )?,
            table_preload: bounded_from_env(TABLE_PRELOAD_ENV_VAR, 1, 0..=1)? == 1,
            key_rows: optional_choice_from_env(
                KEY_ROWS_ENV_VAR,
                &[KeyRowsSetting::Off, KeyRowsSetting::SixteenBitKv, KeyRowsSetting::AllKv],
            )?,
            decode_apart: decode_apart.unwrap_or(DEFAULT_DECODE_APART),
            decode_apart_given: decode_apart.is_some(),
            log_plans: bounded_from_env(LOG_PLANS_ENV_VAR, 0, 0..=1)? == 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_settings_reject_values_outside_their_range() {
        // A variable of this test's own: the environment is shared by the tests running beside it.
        let var = "XGK_TEST_BOUNDED_FROM_ENV";
        std::env::remove_var(var);
        assert_eq!(bounded_from_env(var, 4, 1..=64).unwrap(), 4);
        std::env::set_var(var, "");
        assert_eq!(bounded_from_env(var, 4, 1..=64).unwrap(), 4);
        std::env::set_var(var, "64");
        assert_eq!(bounded_from_env(var, 4, 1..=64).unwrap(), 64);
        for bad in ["0", "65", "-1", "two", "1.5"] {
            std::env::set_var(var, bad);
            let err = bounded_from_env(var, 4, 1..=64).unwrap_err().to_string();
            assert!(err.contains(&format!("{var}=\"{bad}\": expected a whole number from 1 to 64")), "{err}");
        }
        std::env::remove_var(var);
    }

    #[test]
    fn choices_are_the_indices_of_their_options() {
        // A variable of this test's own, as above.
        let var = "XGK_TEST_CHOICE_FROM_ENV";
        let options = [MergeSetting::BySplitCount, MergeSetting::LoopKernel, MergeSetting::ByCapture];
        std::env::remove_var(var);
        assert_eq!(choice_from_env(var, MergeSetting::ByCapture, &options).unwrap(), MergeSetting::ByCapture);
        assert_eq!(optional_choice_from_env(var, &options).unwrap(), None);
        for (n, option) in options.iter().enumerate() {
            std::env::set_var(var, n.to_string());
            assert_eq!(choice_from_env(var, MergeSetting::ByCapture, &options).unwrap(), *option);
            assert_eq!(optional_choice_from_env(var, &options).unwrap(), Some(*option));
        }
        std::env::set_var(var, "3");
        let err = choice_from_env(var, MergeSetting::ByCapture, &options).unwrap_err().to_string();
        assert!(err.contains("expected a whole number from 0 to 2"), "{err}");
        assert!(optional_choice_from_env(var, &options).is_err());
        std::env::remove_var(var);
    }
}
