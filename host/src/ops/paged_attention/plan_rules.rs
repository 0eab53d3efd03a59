//! The decode kernels' launch plans as rules: the split models (how many key splits, how long, for
//! the pipelined kernel also whether they merge in a cluster) and the rules over the pipelined
//! kernel's (stage counts for long grids, whole rows where the unsplit grid fills the device, the
//! pipe mode, fp8 in the key-rows layout). Pure functions of the static shapes and of the
//! device's figures (multiprocessors, resident blocks, DRAM bandwidth per SM): no driver calls,
//! so each rule is tested here without a GPU. Every rule names the measurements behind it
//! (benchmarks/NOTES.md), and the GPU kind they were taken on where the kinds differ.

use kernels_gpu::kernels::decode::general::RPA_WARPS;
use kernels_gpu::kernels::decode::pipelined::layout::PIPE_TILE_KEYS;

use super::settings::PipeMode;

/// Fewest keys a split should hold: below this the merge costs more than the parallelism gains.
const MIN_KEYS_PER_SPLIT: u32 = 128;
/// Upper bound on splits (bounds the scratch buffer).
const MAX_SPLITS: u32 = 256;

/// Resident attention blocks per multiprocessor worth aiming for (128 threads and ~56 registers
/// each: about 8 fit), so loads from enough warps are in flight to cover memory latency.
const TARGET_BLOCKS_PER_SM: u64 = 8;

/// Splits per (row, KV head) and keys per split for the direct-load kernels, from static shapes
/// only (the device metadata is not readable without a sync). Split when the row × head blocks
/// are too few to fill the GPU.
pub fn choose_splits(blocks_per_split: u64, max_keys: u32, multiprocessors: u32) -> (u32, u32) {
    let target = TARGET_BLOCKS_PER_SM * multiprocessors.max(1) as u64;
    let max_keys = max_keys.max(1);
    let splits = if blocks_per_split >= target {
        1
    } else {
        let wanted = target.div_ceil(blocks_per_split.max(1)) as u32;
        wanted.min(max_keys.div_ceil(MIN_KEYS_PER_SPLIT)).clamp(1, MAX_SPLITS)
    };
    let split_len = max_keys.div_ceil(splits).next_multiple_of(RPA_WARPS);
    (max_keys.div_ceil(split_len), split_len)
}

/// A block's fixed cost (resolving its row, filling the pipeline) in keys' worth of streaming.
const BLOCK_OVERHEAD_KEYS: u64 = 64;
/// The split merge kernel's fixed cost, in keys' worth of one block's streaming, unless
/// `XGK_RPA_MERGE_COST_KEYS` says otherwise.
pub const DEFAULT_MERGE_COST_KEYS: u32 = 96;
/// The merge's cost per split, in keys: it reads every split's partial row. Fitted on the small
/// decode cells of an H100 (2026-11-23, benchmarks/NOTES.md "v3g"): B1 x 2k ran 16 splits of two
/// tiles in 11.4 us and 32 one-tile splits in 12.3 us; at 6 keys per split the model picks 16.
const MERGE_COST_PER_SPLIT_KEYS: u64 = 6;
/// Fewest pipeline tiles per split of the pipelined kernel, unless `XGK_RPA_MIN_SPLIT_TILES` says
/// otherwise. One: on the smallest decode cells a block's time is its serial chain of tiles, and
/// the H100 sweep (B1 x 512: 13.3 us at four tiles per split, 10.2 at two, 8.8 at one) favours
/// the shortest chains the model's merge cost allows.
pub const DEFAULT_MIN_SPLIT_TILES: u32 = 1;

/// The cluster merge's fixed cost, in keys of streaming: a cluster barrier and reads of the
/// peers' shared memory in place of a second kernel and a round trip of the partials through
/// global memory (benchmarks/NOTES.md "v9").
const CLUSTER_MERGE_COST_KEYS: u64 = 16;
/// The cluster merge's cost per split, in keys: one more peer's partial read by every block.
const CLUSTER_MERGE_COST_PER_SPLIT_KEYS: u64 = 2;

/// Splits of the pipelined kernel: how many, keys per split, and whether the splits merge in a
/// thread-block cluster (distributed shared memory) instead of the merge kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipelinedSplits {
    pub splits: u32,
    pub split_len: u32,
    pub cluster: bool,
}

/// Splits and keys per split for the pipelined kernel, from static shapes only.
///
/// Model: every block streams its split at the same rate, so a grid run in waves of `slots`
/// resident blocks takes ~ waves × (split length + a block's fixed cost), plus the merge (a fixed
/// cost and one per split) when there is more than one split: the merge kernel's, or, for up to
/// `cluster_limit` splits (0: no clusters), the much smaller one of merging inside a cluster.
/// Among split counts within [`SPLIT_COST_SLACK_PERCENT`] of the cheapest, the most splits win:
/// the model assumes every sequence is as long as the page table allows, and shorter splits
/// balance real batches of uneven lengths (a split past a sequence's end exits at once). Splits
/// are whole pipeline tiles, at least `min_split_tiles` of them.
pub fn choose_splits_by_waves(
    blocks_per_split: u64,
    max_keys: u32,
    slots: u64,
    min_split_tiles: u32,
    merge_cost_keys: u32,
    cluster_limit: u32,
) -> PipelinedSplits {
    let max_keys = max_keys.max(1);
    let blocks_per_split = blocks_per_split.max(1);
    let slots = slots.max(1);
    let most = (max_keys / (min_split_tiles.max(1) * PIPE_TILE_KEYS)).clamp(1, MAX_SPLITS);
    let candidates: Vec<(u64, PipelinedSplits)> = (1..=most)
        .map(|wanted| {
            let split_len = max_keys.div_ceil(wanted).next_multiple_of(PIPE_TILE_KEYS);
            let splits = max_keys.div_ceil(split_len);
            let waves = (blocks_per_split * splits as u64).div_ceil(slots);
            let cluster = splits > 1 && splits <= cluster_limit;
            let merge = match (splits, cluster) {
                (1, _) => 0,
                (_, true) => CLUSTER_MERGE_COST_KEYS + CLUSTER_MERGE_COST_PER_SPLIT_KEYS * splits as u64,
                (_, false) => merge_cost_keys as u64 + MERGE_COST_PER_SPLIT_KEYS * splits as u64,
            };
            (waves * (split_len as u64 + BLOCK_OVERHEAD_KEYS) + merge, PipelinedSplits { splits, split_len, cluster })
        })
        .collect();
    let cheapest = candidates.iter().map(|c| c.0).min().unwrap_or(0);
    let limit = cheapest + cheapest * SPLIT_COST_SLACK_PERCENT / 100;
    candidates.iter().filter(|c| c.0 <= limit).max_by_key(|c| c.1.splits).map_or(whole_rows(max_keys), |c| c.1)
}

/// How much slower (by the model) a split count may be than the cheapest and still be preferred
/// for having more, shorter splits.
const SPLIT_COST_SLACK_PERCENT: u64 = 1;

/// The pipelined kernel's pipe mode for a launch unless [`PIPE_MODE_ENV_VAR`](super::PIPE_MODE_ENV_VAR) says otherwise:
/// per-key-group pipelines, but a block barrier per tile for the key-rows kernels on
/// 16-bit KV with three stages or more, splits of 1024 keys or more and a grid of at most two
/// waves, with pages of at least 8 tokens on a device of at least
/// [`WIDE_DRAM_GBS_PER_SM`] of DRAM bandwidth per SM (`dram_gbs_per_sm`, an H200),
/// and pages of 8 to 15 tokens on one of less (an H100).
///
/// On an H200 the per-key-group pipelines were 0.5-2 % faster than the block barrier on most
/// decode cells with the head-rows kernels and 4 % on fp8 64 x 8k (benchmarks/NOTES.md "v11");
/// with the key-rows kernels the block barrier runs the long rows of one or two waves 0.8-2.2 %
/// faster (4 x 32k, 16 x 8k, 16 x 32k, 32 x 4k, 64 x 8k, G2 32 x 4k and 64 x 8k), and the short
/// splits, the grids of four waves or more, fp8 and pages of one token slower (32 x 4k with pages
/// of one token 140.5 -> 192.1 µs; pages of 8 ran 1.01x FlashInfer with it; NOTES "v18"). On an
/// H100 the same cells ran 0.2-2.9 % faster without it (16 x 8k 185.8 against 190.3 µs, 1 x 32k
/// 53.9 against 54.4, 64 x 2k 183.6 against 184.8; 16 x 32k and 128 x 2k level), warm and L2-cold,
/// but for pages of 8 tokens (32 x 4k 183.7 with it, 188.1 without; NOTES "v30.2").
pub fn default_pipe_mode(
    key_rows: bool,
    kv_bytes: u32,
    stages: u32,
    split_len: u32,
    waves: u64,
    page_size: u32,
    dram_gbs_per_sm: f64,
) -> PipeMode {
    let long_rows = key_rows && kv_bytes == 2 && stages >= 3 && split_len >= 1024 && waves <= 2;
    let pages = if wide_dram(dram_gbs_per_sm) { page_size >= 8 } else { (8..16).contains(&page_size) };
    if long_rows && pages {
        PipeMode::BlockBarrier
    } else {
        PipeMode::KeyGroupPipelines
    }
}

/// DRAM bandwidth per SM (GB/s, [`crate::runtime::ContextModule::dram_gbs_per_multiprocessor`])
/// from which a device plans as an H200 (36.5 GB/s per SM) rather than as an H100 SXM (25.4), the
/// two devices the rules that read it were measured on: [`default_pipe_mode`] takes the block
/// barrier for every page size from 8 tokens, [`whole_rows_pay`] keeps only short rows whole, and
/// [`fp8_key_rows_pay`] leaves fp8 KV in the head-rows kernel.
pub const WIDE_DRAM_GBS_PER_SM: f64 = 30.0;

/// Whether a device of `dram_gbs_per_sm` plans as an H200 ([`WIDE_DRAM_GBS_PER_SM`] or more); 0,
/// a driver that does not report its memory, plans as an H100 (but for [`fp8_key_rows_pay`],
/// which asks for a reported figure). The one test the rules that read the figure ask.
pub fn wide_dram(dram_gbs_per_sm: f64) -> bool {
    dram_gbs_per_sm >= WIDE_DRAM_GBS_PER_SM
}

/// Whether a mix whose decode rows run apart takes one launch by default
/// (`XGK_RPA_DECODE_APART` unset; `plan_choice.rs`'s `mix_in_one_launch`): on devices below
/// [`WIDE_DRAM_GBS_PER_SM`] (an H100: the peers' four engine-step mixes 0-9 % faster on the GPU
/// than in two launches, benchmarks/NOTES.md "v32"). The decode blocks of one launch keep two
/// stages each, 96 KiB in flight per SM, where the two-launch plan had 128: on an H200, whose
/// DRAM needs more in flight, unmeasured, so mixes stay in two launches there unless asked.
pub fn mix_one_launch_pays(dram_gbs_per_sm: f64) -> bool {
    !wide_dram(dram_gbs_per_sm)
}

/// Waves of resident blocks (by the split model, at the default stage count) from which the
/// 16-bit pipelined kernel takes two stages for more resident blocks per SM.
pub(super) const LONG_GRID_WAVES: u64 = 4;

/// Whether the 16-bit pipelined kernel takes two stages (more resident blocks per SM) over its
/// default: `splits` and `waves` of the default's plan, `two_stage_splits` of the plan with two
/// stages' residency. Grids of several waves only (benchmarks/NOTES.md "v10": on an H200 three
/// blocks of two stages against two of three ran 256 x 512 6 % faster, 256 x 8k 3 %, 64 x 32k
/// 1 %, G3 64 x 8k 2.5 %, the uneven batches 9-11 %, and 5-45 % slower on grids of one to two
/// waves), and not where the default plan needs no merge and the two-stage one would split: the
/// merge kernel and the partials' round trip through memory then cost more than the residency
/// gains (256 x 2k: 2 % slower, 128 x 2k 6 %). Where rows stay whole at two stages' residency
/// too ([`unsplit_grid_is_long`]), `two_stage_splits` is 1 and the grid takes them.
pub fn long_grid_takes_two_stages(splits: u32, waves: u64, two_stage_splits: u32) -> bool {
    waves >= LONG_GRID_WAVES && (splits > 1 || two_stage_splits == 1)
}

/// Whether a grid of `blocks_per_split` blocks (one split per row) already spans
/// [`LONG_GRID_WAVES`] waves of `slots` resident blocks. Splitting it then buys only a shorter
/// last wave, and costs the merge kernel and the partials' round trip through memory for every
/// row: on an H200, 256 x 8k ran 1925.8 µs with two stages and whole rows against 1975.7 with
/// the split model's plan (benchmarks/NOTES.md "v16"; the model rounds each wave up, a partial
/// last wave counting as a full one).
pub fn unsplit_grid_is_long(blocks_per_split: u64, slots: u64) -> bool {
    blocks_per_split >= LONG_GRID_WAVES * slots.max(1)
}

/// Whether a grid of `blocks_per_split` blocks (one split per row) already gives at least 15/16
/// of the `multiprocessors` a block, so that a one-wave split plan of it only adds blocks that
/// share a multiprocessor's bandwidth with the first. The split model plans with every resident
/// slot (two blocks per SM for the 16-bit head_dim-128 kernel at three stages) and counts a
/// second block on an SM as streaming at the full rate beside the first; but one block per SM at
/// three stages already reads ~87 % of the copy bandwidth at 8 tiles a row, so the split buys a
/// shorter chain per block at the cost of a merge and a second prologue per SM. On an H100
/// (benchmarks/NOTES.md "v29.4"), G1's 16 rows (128 blocks on 132 SMs) ran whole against the
/// model's two clustered splits: 16 x 512 12.8 against 14.5 µs warm and 21.0 against 24.0
/// L2-cold, 16 x 2k 51.5 against 54.2 / 54.6 against 58.0, 16 x 8k level (190.2 / 189.2).
pub fn unsplit_grid_fills_device(blocks_per_split: u64, multiprocessors: u32) -> bool {
    blocks_per_split * 16 >= multiprocessors as u64 * 15
}

/// Whether rows of `max_keys` keys that [`unsplit_grid_fills_device`] would keep whole stream
/// faster so on a device of `dram_gbs_per_sm`: below [`WIDE_DRAM_GBS_PER_SM`] (an H100: one block
/// per SM reads ~87 % of the copy bandwidth), and on a wider device only for rows of at most
/// [`WIDE_DRAM_WHOLE_ROW_MAX_KEYS`], where the split's second prologue and merge outweigh the
/// stream. On an H200 one block per SM does not draw the bandwidth: whole rows ran G1 16 x 8k in
/// 170.2 µs against 130.8 split (134.8 whole without the block barrier), 16 x 2k 46.7 against
/// 39.9, G3 4 x 8k / 4 x 2k 170.0 / 45.9 against 128.2 / 36.7, while 16 x 512 ran 12.7 against
/// 13.1 warm and 17.6 against 20.6 L2-cold (G3 4 x 512: 11.7 / 11.1 warm, 16.5 / 18.3 cold;
/// benchmarks/NOTES.md "v30.7").
pub fn whole_rows_pay(dram_gbs_per_sm: f64, max_keys: u32) -> bool {
    !wide_dram(dram_gbs_per_sm) || max_keys <= WIDE_DRAM_WHOLE_ROW_MAX_KEYS
}

/// Longest rows [`whole_rows_pay`] keeps whole on a device of at least [`WIDE_DRAM_GBS_PER_SM`].
pub const WIDE_DRAM_WHOLE_ROW_MAX_KEYS: u32 = 512;

/// Whether fp8 KV takes the key-rows kernel where `XGK_RPA_KEY_ROWS` is unset, its splits
/// planned for at most [`FP8_KEY_ROWS_PLAN_BLOCKS`] blocks per SM: on Hopper (compute capability
/// 9.x) below [`WIDE_DRAM_GBS_PER_SM`] (an H100), at head_dim 128, where it was measured. There,
/// against the head-rows kernel, two processes each (benchmarks/NOTES.md "v31.7-8"): G1 e4m3 1 x
/// 32k 34.1 -> 32.8 µs, 4 x 8k 36.5 -> 32.6, 16 x 2k 34.1 -> 32.5, 64 x 512 36.7 -> 34.1, 1 x 2k
/// 11.4 -> 10.3, 32 x 4k 101.5 -> 99.8, 64 x 8k 376 -> 372, e5m2 alike, G2 1 x 32k 37.8 -> 35.1,
/// G3 32 x 4k 374.5 -> 358.3, but G3 1 x 32k 98.4 -> 100.5 (one process). Planned for the kernel's
/// occupancy instead (three or four blocks), 1 x 32k splits into 43-47 shorter splits and ran
/// 33.6-34.7 µs: fewer, longer splits draw an H100's bandwidth. On an H200 the same plan was 15 %
/// slower (1 x 32k 31.0 against 26.9 µs, NOTES "v18"), and key rows at the kernel's occupancy
/// ran 1 x 32k as the head rows did (26.6 against 26.9) and were the faster at 32 x 4k and
/// 64 x 8k only by 1-2 %: an H200 keeps head rows for fp8. Other devices (sm_80/86/89), head_dim
/// 64, and drivers that do not report their memory were not measured: head rows.
pub fn fp8_key_rows_pay(dram_gbs_per_sm: f64, compute_capability: u32, head_dim: u32) -> bool {
    dram_gbs_per_sm > 0.0 && !wide_dram(dram_gbs_per_sm) && compute_capability / 10 == 9 && head_dim == 128
}

/// Most resident blocks per SM the split model plans the fp8 key-rows kernel with where
/// [`fp8_key_rows_pay`] chose it (the head_dim-128 kernel fits four blocks of two stages).
pub const FP8_KEY_ROWS_PLAN_BLOCKS: u32 = 2;

/// One split per row: whole rows, in whole pipeline tiles.
pub(super) fn whole_rows(max_keys: u32) -> PipelinedSplits {
    PipelinedSplits { splits: 1, split_len: max_keys.max(1).next_multiple_of(PIPE_TILE_KEYS), cluster: false }
}

/// Stages of the fp8 pipelined kernel where the plan at this depth leaves its rows whole (one
/// split, a block streams a row) in at most [`FP8_WHOLE_ROW_MAX_WAVES`]: on an H200 five stages
/// (two blocks per SM) ran 32 x 4k in 71.9 µs against 80.1 with two (whose plan, three blocks per
/// SM, split each row in two) and 64 x 8k in 264.2 against 277.1, while 1 x 32k, split either
/// way, ran 27.0 with two against 27.9 with five (fewer slots, fewer and longer splits). Four
/// stages ran 32 x 4k in 87.0 µs, six as five (benchmarks/NOTES.md "v14").
pub(super) const FP8_WHOLE_ROW_STAGES: u32 = 5;
/// Most waves of resident blocks (at [`FP8_WHOLE_ROW_STAGES`]) for which fp8 takes them: the
/// measured grids (one and two waves); longer grids keep two stages' residency.
pub(super) const FP8_WHOLE_ROW_MAX_WAVES: u64 = 2;

#[cfg(test)]
mod tests {
    use kernels_gpu::kernels::decode::merge::MAX_CLUSTER_SPLITS;

    use super::*;

    #[test]
    fn splits_only_when_the_grid_is_small() {
        // 256 decode rows x 8 KV heads fill 132 SMs: no split.
        assert_eq!(choose_splits(256 * 8, 8192, 132).0, 1);
        // one long sequence: split up to the target, each split >= 128 keys.
        let (s, len) = choose_splits(8, 32768, 132);
        assert!(s > 1 && s <= 132 && len >= 128 && s * len >= 32768);
        // short context: never more splits than 128-key chunks.
        assert_eq!(choose_splits(1, 200, 132).0, 2);
        assert_eq!(choose_splits(1, 0, 132), (1, 4));
    }

    #[test]
    fn pipelined_splits_fill_whole_waves() {
        let slots = 2 * 132;
        // The model without clusters (the sm_80 image, or XGK_RPA_CLUSTER_MERGE=0).
        let pick = |blocks, keys, slots, min_tiles, merge_cost| {
            let s = choose_splits_by_waves(blocks, keys, slots, min_tiles, merge_cost, 0);
            assert!(!s.cluster);
            (s.splits, s.split_len)
        };
        // B64 x 8k, 8 KV heads: 512 blocks already make two nearly full waves.
        let (s, len) = pick(64 * 8, 8192, slots, DEFAULT_MIN_SPLIT_TILES, DEFAULT_MERGE_COST_KEYS);
        assert_eq!(s * len, 8192);
        assert!((64 * 8 * s as u64).div_ceil(slots) * len as u64 <= 8192 * 2);
        // B1 x 32k: 8 blocks per split; split until about one wave (~32 splits of 1k keys).
        let (s, len) = pick(8, 32768, slots, DEFAULT_MIN_SPLIT_TILES, DEFAULT_MERGE_COST_KEYS);
        assert!((24..=33).contains(&s), "{s} splits");
        assert!(len % PIPE_TILE_KEYS == 0 && s * len >= 32768);
        // Tiny: never below the minimum split.
        assert_eq!(pick(8, 300, slots, 4, DEFAULT_MERGE_COST_KEYS), (1, 320));
        assert_eq!(pick(1, 0, slots, DEFAULT_MIN_SPLIT_TILES, DEFAULT_MERGE_COST_KEYS), (1, 64));
        // B1 x 512: eight one-tile splits by default (the fastest on an H100); four-tile splits
        // give two.
        assert_eq!(pick(8, 512, slots, DEFAULT_MIN_SPLIT_TILES, DEFAULT_MERGE_COST_KEYS), (8, 64));
        assert_eq!(pick(8, 512, slots, 4, DEFAULT_MERGE_COST_KEYS), (2, 256));
        // B1 x 2k: the per-split merge cost stops at 16 two-tile splits (32 one-tile ones measured
        // slower); B4 x 512 takes eight one-tile splits (256 blocks, one wave).
        assert_eq!(pick(8, 2048, slots, DEFAULT_MIN_SPLIT_TILES, DEFAULT_MERGE_COST_KEYS), (16, 128));
        assert_eq!(pick(32, 512, slots, DEFAULT_MIN_SPLIT_TILES, DEFAULT_MERGE_COST_KEYS), (8, 64));
        // Cells that already filled one wave keep their splits: B1 x 8k 32 of four tiles, B16 x
        // 512 two.
        assert_eq!(pick(8, 8192, slots, DEFAULT_MIN_SPLIT_TILES, DEFAULT_MERGE_COST_KEYS), (32, 256));
        assert_eq!(pick(128, 512, slots, DEFAULT_MIN_SPLIT_TILES, DEFAULT_MERGE_COST_KEYS), (2, 256));
        // A merge priced above the whole context: no split.
        assert_eq!(pick(8, 512, slots, DEFAULT_MIN_SPLIT_TILES, 512), (1, 512));
    }

    #[test]
    fn long_grids_take_two_stages_unless_that_adds_a_merge() {
        // An H200: 132 SMs, two blocks of three stages or three of two; G1's 8 KV heads.
        let (sms, heads) = (132u64, 8u64);
        let take = |rows: u64, keys: u32| {
            let plan = |blocks: u64| {
                let slots = blocks * sms;
                let s = choose_splits_by_waves(rows * heads, keys, slots, 1, DEFAULT_MERGE_COST_KEYS, 0);
                (s.splits, (rows * heads * s.splits as u64).div_ceil(slots))
            };
            let ((splits, waves), (two_splits, _)) = (plan(2), plan(3));
            // As `plan_launch`: a grid long enough unsplit keeps its rows whole.
            let two_splits = if unsplit_grid_is_long(rows * heads, 3 * sms) { 1 } else { two_splits };
            (long_grid_takes_two_stages(splits, waves, two_splits), two_splits)
        };
        // Measured faster with two stages: 256 x 512 (one split either way), 256 x 8k (whole
        // rows: 1925.8 against 1975.7 µs split, NOTES v16) and 64 x 32k (split either way).
        assert_eq!(take(256, 512), (true, 1));
        assert_eq!(take(256, 8192), (true, 1));
        assert!(take(64, 32768).0 && take(64, 32768).1 > 1);
        // The uneven B64 batch of lengths up to 16k (planned as 64 x 16k: two splits, four waves).
        assert!(take(64, 16384).0);
        // 256 x 2k: whole rows with two stages (as fast as three stages, 495.9 against 496.8 µs;
        // with the split model's two-stage plan 2 % slower, v10). 128 x 2k (six percent slower
        // with the two-stage plan's merge) and the short grids keep the default.
        assert_eq!(take(256, 2048), (true, 1));
        for (rows, keys) in
            [(64, 512), (64, 2048), (64, 8192), (128, 2048), (32, 4096), (16, 8192), (4, 32768), (1, 32768)]
        {
            assert!(!take(rows, keys).0, "{rows} x {keys}");
        }
    }

    #[test]
    fn grids_that_fill_the_device_unsplit_keep_whole_rows() {
        // 132 SMs (H100, H200): G1's 16 rows are 128 blocks (one per SM on 128 of 132); 8 rows
        // (64 blocks) and 4 rows (32) leave half the SMs or more idle unsplit.
        assert!(unsplit_grid_fills_device(128, 132));
        assert!(unsplit_grid_fills_device(124, 132));
        assert!(!unsplit_grid_fills_device(123, 132));
        assert!(!unsplit_grid_fills_device(64, 132));
        assert!(unsplit_grid_fills_device(256, 132));
        // An H100 keeps them whole at every length; an H200 only up to 512 keys.
        for keys in [512, 2048, 8192] {
            assert!(whole_rows_pay(25.4, keys));
            assert!(whole_rows_pay(0.0, keys), "unknown bandwidth: as an H100");
        }
        assert!(whole_rows_pay(36.5, 512));
        assert!(!whole_rows_pay(36.5, 2048));
        assert!(!whole_rows_pay(36.5, 8192));
    }

    #[test]
    fn cluster_merges_take_the_small_split_counts() {
        let slots = 2 * 132;
        let pick = |blocks, keys| {
            let s = choose_splits_by_waves(blocks, keys, slots, DEFAULT_MIN_SPLIT_TILES, DEFAULT_MERGE_COST_KEYS, 16);
            (s.splits, s.split_len, s.cluster)
        };
        // B1 x 512 and B1 x 2k: the same splits as with the merge kernel, merged in clusters.
        assert_eq!(pick(8, 512), (8, 64, true));
        assert_eq!(pick(8, 2048), (16, 128, true));
        // B16 x 512: two splits in a cluster of two.
        assert_eq!(pick(128, 512), (2, 256, true));
        // B1 x 32k: 16 splits of 2k keys would leave half the GPU idle; 32 splits and the kernel.
        let long = pick(8, 32768);
        assert!(long.0 > MAX_CLUSTER_SPLITS && !long.2, "{long:?}");
        // B64 x 8k already fills two waves: at most two splits (which the cheap merge allows
        // within the slack that favours shorter splits).
        let full = pick(64 * 8, 8192);
        assert!(full.0 <= 2 && full.0 * full.1 == 8192, "{full:?}");
        // A cluster never holds more splits than the limit.
        for keys in [64, 1000, 4096, 20000, 65536] {
            for blocks in [1, 8, 32, 100, 264, 1000] {
                let s = choose_splits_by_waves(blocks, keys, slots, 1, DEFAULT_MERGE_COST_KEYS, 8);
                assert!(!s.cluster || (2..=8).contains(&s.splits), "{blocks} x {keys}: {s:?}");
            }
        }
    }

    #[test]
    fn block_barrier_only_for_long_key_rows_splits_of_short_grids() {
        const H200: f64 = 36.5;
        const H100: f64 = 25.4;
        // H200 decode cells (16-bit KV, key rows, three stages): 32 x 4k one wave of 4k-key rows,
        // 64 x 8k two waves, 1 x 32k splits of 1024 keys: the block barrier.
        assert_eq!(default_pipe_mode(true, 2, 3, 4096, 1, 16, H200), PipeMode::BlockBarrier);
        assert_eq!(default_pipe_mode(true, 2, 3, 8192, 2, 16, H200), PipeMode::BlockBarrier);
        assert_eq!(default_pipe_mode(true, 2, 3, 1024, 1, 16, H200), PipeMode::BlockBarrier);
        // 128 x 2k (four waves), 4 x 2k (256-key splits), two stages, fp8, head rows: per key group.
        assert_eq!(default_pipe_mode(true, 2, 3, 2048, 4, 16, H200), PipeMode::KeyGroupPipelines);
        assert_eq!(default_pipe_mode(true, 2, 3, 256, 1, 16, H200), PipeMode::KeyGroupPipelines);
        assert_eq!(default_pipe_mode(true, 2, 2, 8192, 1, 16, H200), PipeMode::KeyGroupPipelines);
        assert_eq!(default_pipe_mode(true, 1, 3, 8192, 1, 16, H200), PipeMode::KeyGroupPipelines);
        assert_eq!(default_pipe_mode(false, 2, 3, 8192, 1, 16, H200), PipeMode::KeyGroupPipelines);
        // Pages of one token (32 x 4k: 192.1 µs with the block barrier, 140.5 without); of 8, it.
        assert_eq!(default_pipe_mode(true, 2, 3, 4096, 1, 1, H200), PipeMode::KeyGroupPipelines);
        assert_eq!(default_pipe_mode(true, 2, 3, 4096, 1, 8, H200), PipeMode::BlockBarrier);
        // An H100 (or a device that does not report its memory): per key group on the same cells,
        // but for pages of 8 (to 15) tokens.
        for gbs in [H100, 0.0] {
            assert_eq!(default_pipe_mode(true, 2, 3, 4096, 1, 16, gbs), PipeMode::KeyGroupPipelines);
            assert_eq!(default_pipe_mode(true, 2, 3, 8192, 2, 128, gbs), PipeMode::KeyGroupPipelines);
            assert_eq!(default_pipe_mode(true, 2, 3, 4096, 1, 8, gbs), PipeMode::BlockBarrier);
            assert_eq!(default_pipe_mode(true, 2, 3, 4096, 1, 1, gbs), PipeMode::KeyGroupPipelines);
            assert_eq!(default_pipe_mode(true, 2, 3, 256, 1, 8, gbs), PipeMode::KeyGroupPipelines);
        }
    }

    #[test]
    fn a_mix_takes_one_launch_by_default_on_an_h100_only() {
        // H100 SXM: 3.35 TB/s over 132 SMs; H200: 4.8 TB/s over 132.
        assert!(mix_one_launch_pays(25.4));
        assert!(!mix_one_launch_pays(36.5));
        // A driver that reports no bandwidth plans as an H100 (`wide_dram`).
        assert!(mix_one_launch_pays(0.0));
    }

    #[test]
    fn fp8_takes_key_rows_on_an_h100_at_head_dim_128_only() {
        // An H100 (sm_90, 25.4 GB/s per SM), head_dim 128: key rows, splits for two blocks.
        assert!(fp8_key_rows_pay(25.4, 90, 128));
        // An H200, head_dim 64, a device of another generation (an A100: ~15 GB/s per SM), a
        // driver that does not report its memory: head rows, as before the rule.
        assert!(!fp8_key_rows_pay(36.5, 90, 128));
        assert!(!fp8_key_rows_pay(25.4, 90, 64));
        assert!(!fp8_key_rows_pay(15.1, 80, 128));
        assert!(!fp8_key_rows_pay(0.0, 90, 128));
        // G1 fp8 1 x 32k (8 KV heads) on 132 SMs: two blocks per SM plan 32 splits of 1024 keys,
        // four plan shorter ones (the split model alone; clusters aside).
        let splits = |blocks: u64| {
            choose_splits_by_waves(8, 32768, blocks * 132, DEFAULT_MIN_SPLIT_TILES, DEFAULT_MERGE_COST_KEYS, 0)
        };
        assert_eq!((splits(FP8_KEY_ROWS_PLAN_BLOCKS as u64).splits, splits(2).split_len), (32, 1024));
        assert!(splits(4).splits > 32);
    }

    #[test]
    fn dram_bandwidth_per_multiprocessor_from_the_driver_attributes() {
        // What the driver reports (benchmarks/NOTES.md "v30.3", "v30.7"): an H100 SXM 2 619 MHz
        // and 5 120 bits on 132 SMs (3.35 TB/s), an H200 3 201 MHz and 6 016 bits (4.82 TB/s).
        let h100 = crate::runtime::dram_gbs_per_multiprocessor(2_619_000, 5120, 132);
        assert!((h100 - 25.4).abs() < 0.05, "{h100}");
        let h200 = crate::runtime::dram_gbs_per_multiprocessor(3_201_000, 6016, 132);
        assert!((h200 - 36.5).abs() < 0.05, "{h200}");
        assert!(h200 > WIDE_DRAM_GBS_PER_SM && h100 < WIDE_DRAM_GBS_PER_SM);
        assert_eq!(crate::runtime::dram_gbs_per_multiprocessor(0, 5120, 132), 0.0);
        assert_eq!(crate::runtime::dram_gbs_per_multiprocessor(2_619_000, 5120, 0), 0.0);
    }
}
