//! The plan choice: from the settings, the static shapes and the device, which kernels a call
//! launches and how ([`plan_launch`], with the rules of `plan_rules.rs`).

use kernels_gpu::attention::planner::plan_capacity;
use kernels_gpu::kernels::decode::general::{rpa_shared_bytes, HEADS_PER_BLOCK, RPA_THREADS, RPA_WARPS};
use kernels_gpu::kernels::decode::mma::{mma_shared_bytes, MMA_HEADS_PER_BLOCK};
use kernels_gpu::kernels::decode::pipelined::layout::{
    pipelined_dim_split, pipelined_shared_bytes, pipelined_threads, pipelined_tile_keys, PIPE_TILE_KEYS,
};
use kernels_gpu::kernels::mix::{mix_decode_slots, MIX_CONSUMERS};
use kernels_gpu::kernels::prefill::hopper::{ws_consumers, ws_plans_itself, ws_shared_bytes, ws_threads, ws_tile_rows};
use kernels_gpu::kernels::prefill::tiled::{tile_rows, tiled_shared_bytes, tiled_wgmma_shared_bytes, TILE_THREADS};

use super::applicability::*;
use super::kernel_id::{KernelFamily, KernelId};
use super::pipelined_plan::{choose_pipe_stages, plan_pipelined};
use super::plan::*;
use super::plan_cache::settings;
use super::plan_rules::*;
use super::settings::*;
use super::PagedAttention;
use crate::ensure;
use crate::error::Result;
use crate::runtime::ContextModule;

/// Most bytes of KV (bounded from the static shapes, [`kv_read_bound`]) that a direct split call
/// may read for [`MergeSetting::ByCapture`] to merge it in merge blocks: ~60 µs of streaming on an H200,
/// past which the device, not the host's second launch, bounds calls back to back.
pub const ONE_LAUNCH_MAX_KV_BYTES: u64 = 256 << 20;

/// Bytes of KV a call of `spec` reads at most: every row its longest sequence's keys, K and V of
/// every KV head.
pub(super) fn kv_read_bound(spec: &PagedAttention) -> u64 {
    let kv_bytes = spec.kv_dtype.size_bytes().unwrap_or(2) as u64;
    spec.max_tokens as u64
        * spec.max_visited_keys() as u64
        * spec.num_kv_heads as u64
        * spec.head_dim as u64
        * 2
        * kv_bytes
}

/// Whether the pipelined kernel runs `spec` in the key-rows layout: where it applies and
/// [`KEY_ROWS_ENV_VAR`] takes it, or where that is unset, for 16-bit KV and where
/// [`fp8_key_rows_pay`].
fn key_rows_taken(module: &ContextModule, spec: &PagedAttention) -> Result<bool> {
    let fp8 = spec.kv_dtype.size_bytes() == Some(1);
    let taken = match settings()?.key_rows {
        Some(KeyRowsSetting::Off) => false,
        Some(KeyRowsSetting::SixteenBitKv) => !fp8,
        Some(KeyRowsSetting::AllKv) => true,
        None => !fp8 || fp8_key_rows_by_default(module, spec),
    };
    Ok(key_rows_applies(spec) && taken)
}

/// Whether fp8 KV is in the key-rows kernel by [`fp8_key_rows_pay`] (with [`KEY_ROWS_ENV_VAR`]
/// unset), which then plans its splits for at most [`FP8_KEY_ROWS_PLAN_BLOCKS`] blocks per SM.
fn fp8_key_rows_by_default(module: &ContextModule, spec: &PagedAttention) -> bool {
    fp8_key_rows_pay(module.dram_gbs_per_multiprocessor, module.compute_capability, spec.head_dim)
}

/// The attention kernel for a problem and a resolved kernel choice: `rpa_pipe_*` (pipelined;
/// `rpa_pipe_kr_*` in the key-rows layout where [`key_rows_taken`]), `rpa_tile_*`,
/// `rpa_tile_wg_*`, `rpa_tile_ws_*`, `rpa_mma_*` (tensor cores) or `rpa_*` (general).
fn attention_kernel(module: &ContextModule, spec: &PagedAttention, kernel: KernelChoice) -> KernelId {
    let family = match kernel {
        // A settings error surfaces where the plan reads them.
        KernelChoice::Pipelined if key_rows_taken(module, spec).unwrap_or(false) => KernelFamily::PipelinedKeyRows,
        KernelChoice::Pipelined => KernelFamily::Pipelined,
        KernelChoice::Tiled => KernelFamily::Tile,
        KernelChoice::TiledWgmma => KernelFamily::TileWgmma,
        KernelChoice::TiledWarpSpecialized => KernelFamily::TileWarpSpecialized,
        KernelChoice::TensorCore => KernelFamily::TensorCore,
        KernelChoice::Auto | KernelChoice::General => KernelFamily::General,
    };
    KernelId::attention(family, spec)
}

/// Whether Auto runs a call's decode sequences apart ([`DECODE_APART_ENV_VAR`]): the pipelined
/// kernel over its one-row sequences, a tile kernel over the rest (`RpaParams::decode_apart`).
/// For calls whose static shapes allow both prefill and decode rows (more rows than sequences),
/// mostly decode ones (not [`wgmma_tiles_preferred`]: fewer than 64 rows per sequence slot, as in
/// a serving engine's steps), with at least two sequence slots, where both kernels apply. On an
/// H200 (benchmarks/NOTES.md "v20") the tile kernels ran the decode rows of the peers' mixes at
/// 69-70 % of the copy bandwidth, the pipelined kernel alone at 95-101 %, and the warp-specialized
/// kernel the prefill rows alone level with FlashInfer. Prefill-shaped calls keep one kernel: an
/// empty decode grid would cost them its launch and a round trip to memory.
pub fn decode_apart_applies(module: &ContextModule, spec: &PagedAttention) -> Result<bool> {
    let cc = module.compute_capability;
    Ok(settings()?.decode_apart != DecodeApartSetting::Off
        && spec.max_num_seqs >= 2
        && spec.max_tokens > spec.max_num_seqs
        && !wgmma_tiles_preferred(spec)
        && pipelined_applies(spec, cc)
        && (tiled_applies(spec, cc) || (module.image.has_wgmma() && tiled_ws_applies(spec, cc))))
}

/// Whether a mix whose decode rows run apart (`decode`, on the warp-specialized tile kernel's
/// call) runs in one launch (`kernels_gpu::kernels::mix`): with
/// [`DECODE_APART_ENV_VAR`] 3 and persistent tile blocks (the plan's builder then runs among at
/// most one tile block per multiprocessor), at head dims 64 and 128 (the tile kernel plans
/// itself), where the decode plan is the key-rows twin with no splits (a decode block in a group
/// of the tile kernel's block: no clusters, no merge; the head-rows twin spilled at 168
/// registers), for KV of q's dtype. With the variable unset, only where [`mix_one_launch_pays`].
/// Elsewhere the call takes two launches (mode 2).
fn mix_in_one_launch(
    module: &ContextModule,
    spec: &PagedAttention,
    decode: &DirectPlan,
    settings: &LaunchSettings,
) -> bool {
    // The mix kernels are for KV of q's dtype (no fp8 twins).
    spec.kv_dtype == spec.q_dtype
        && settings.decode_apart == DecodeApartSetting::OneLaunch
        && (settings.decode_apart_given || mix_one_launch_pays(module.dram_gbs_per_multiprocessor))
        && settings.pair_schedule.persistent()
        && ws_plans_itself(spec.head_dim)
        && decode.splits == 1
        && !decode.cluster
        && decode.merge_blocks == 0
        && decode.kernel.family == KernelFamily::PipelinedKeyRowsSeq
        && decode.grid_y * spec.max_num_seqs == mix_decode_slots(spec.max_num_seqs, spec.num_q_heads, spec.num_kv_heads)
}

/// The pipelined kernel's plan for a call's decode sequences apart ([`decode_apart_applies`]): a
/// grid of `max_num_seqs` sequences, planned as a decode batch of that many rows, its splits
/// merged in clusters or not split (no workspace: the tile plan's is the call's).
fn plan_apart_decode(module: &ContextModule, spec: &PagedAttention) -> Result<DirectPlan> {
    let sequences = PagedAttention { max_tokens: spec.max_num_seqs, ..*spec };
    match plan_launch(module, &sequences, KernelChoice::Pipelined, Some(0), true, false)? {
        LaunchPlan::Direct(d) if !d.partials_in_workspace() => Ok(d),
        other => Err(crate::Error::invalid(format!("decode rows apart: unexpected plan {other:?}"))),
    }
}

/// Decides the launch. `limit`: the bytes of a caller-given workspace (`None`: memory is
/// allocated to fit); splits shrink to fit it, and an Auto-chosen tiled kernel whose plan does not
/// fit gives way to the next kernel. `captured`: the call is enqueued under stream capture (the
/// default merge of split partials asks, [`MERGE_MODE_ENV_VAR`]).
pub(super) fn plan_launch(
    module: &ContextModule,
    spec: &PagedAttention,
    choice: KernelChoice,
    limit: Option<usize>,
    by_sequence: bool,
    captured: bool,
) -> Result<LaunchPlan> {
    let cc = module.compute_capability;
    let mut kernel = resolve_kernel(spec, cc, choice)?;
    let apart = choice == KernelChoice::Auto && decode_apart_applies(module, spec)?;
    if choice == KernelChoice::Auto && module.image.has_wgmma() && (apart || wgmma_tiles_preferred(spec)) {
        // Prefill-shaped on Hopper, or the rows a mixed batch's decode sequences leave: the
        // warp-specialized kernel where its bulk copies apply (0.91-1.04x FlashInfer on an H100:
        // benchmarks/NOTES.md "v7d"; head_dim 256 included, which the other tile kernels lack),
        // else the one-warpgroup wgmma tiles.
        if tiled_ws_applies(spec, cc) {
            kernel = KernelChoice::TiledWarpSpecialized;
        } else if kernel == KernelChoice::Tiled {
            kernel = KernelChoice::TiledWgmma;
        }
    }
    if matches!(kernel, KernelChoice::TiledWgmma | KernelChoice::TiledWarpSpecialized) {
        ensure!(
            module.image.has_wgmma(),
            "the {} kernel needs the sm_90a PTX image (a Hopper GPU); this context loaded {}",
            if kernel == KernelChoice::TiledWgmma { "tiled-wgmma" } else { "tiled-ws" },
            module.image.arch
        );
    }
    if matches!(kernel, KernelChoice::Tiled | KernelChoice::TiledWgmma | KernelChoice::TiledWarpSpecialized) {
        let plan = plan_tiled(module, spec, kernel, apart)?;
        match limit {
            Some(bytes) if plan.scratch_bytes(spec) > bytes => {
                ensure!(
                    choice == KernelChoice::Auto,
                    "the workspace ({bytes} bytes) is smaller than the tiled kernel's plan ({} bytes)",
                    plan.scratch_bytes(spec)
                );
                kernel = resolve_kernel(spec, cc, KernelChoice::Pipelined).or_else(|_| {
                    resolve_kernel(spec, cc, KernelChoice::TensorCore).or(Ok::<_, crate::Error>(KernelChoice::General))
                })?;
            }
            _ => return Ok(plan),
        }
    }
    plan_direct(module, spec, kernel, limit, by_sequence, captured)
}

/// The tile kernel's plan (`kernel`: one of the tile kernels, checked to apply), with the decode
/// kernel's where the call's decode rows run `apart`.
fn plan_tiled(module: &ContextModule, spec: &PagedAttention, kernel: KernelChoice, apart: bool) -> Result<LaunchPlan> {
    let group = spec.group();
    let ws = kernel == KernelChoice::TiledWarpSpecialized;
    let decode = if apart { Some(plan_apart_decode(module, spec)?) } else { None };
    let settings = settings()?;
    let one_launch = ws && decode.is_some_and(|d| mix_in_one_launch(module, spec, &d, &settings));
    // The warp-specialized block's consumer warpgroups: the mix kernel's tile blocks have two, the
    // tile kernel its head dim's (three at head_dim 64 with 16-bit KV).
    let fp8 = spec.kv_dtype != spec.q_dtype;
    let consumers = if one_launch { MIX_CONSUMERS } else { ws_consumers(spec.head_dim, fp8) };
    let rows = if ws { ws_tile_rows(group, consumers) } else { tile_rows(group) };
    let capacity = plan_capacity(spec.max_tokens as u64, spec.max_num_seqs as u64, rows as u64);
    ensure!(capacity < (1u64 << 31), "max_num_batched_tokens is too large for the tiled kernel's grid");
    ensure!(spec.num_kv_heads <= 65535, "num_kv_heads ({}) exceeds the grid limit", spec.num_kv_heads);
    let (threads, shared_bytes) = match kernel {
        KernelChoice::TiledWgmma => (TILE_THREADS, tiled_wgmma_shared_bytes(spec.head_dim)),
        KernelChoice::TiledWarpSpecialized => (ws_threads(consumers), ws_shared_bytes(spec.head_dim, fp8, consumers)),
        _ => (TILE_THREADS, tiled_shared_bytes(spec.head_dim)),
    };
    let tile_kernel = attention_kernel(module, spec, kernel);
    let can_plan_itself = ws && ws_plans_itself(spec.head_dim);
    Ok(LaunchPlan::Tiled(TiledPlan {
        // The mix kernel is the warp-specialized tile kernel with the decode blocks in its grid.
        kernel: if one_launch { tile_kernel.with_family(KernelFamily::Mix) } else { tile_kernel },
        rows,
        capacity,
        threads,
        shared_bytes,
        warp_specialized: ws,
        decode,
        pair_schedule: settings.pair_schedule,
        launches: TileLaunches::choose(
            can_plan_itself,
            decode.is_some(),
            one_launch,
            settings.pair_schedule.persistent(),
            settings.decode_apart,
        ),
    }))
}

/// The direct plan of `kernel` (general, tensor-core or pipelined, checked to apply): one block per
/// (row, head chunk, split), the splits and their merge. `by_sequence`: the pipelined kernel's twin
/// on a grid of sequences ([`plan_apart_decode`]), its own kernel, planned with its own occupancy.
fn plan_direct(
    module: &ContextModule,
    spec: &PagedAttention,
    kernel: KernelChoice,
    limit: Option<usize>,
    by_sequence: bool,
    captured: bool,
) -> Result<LaunchPlan> {
    let kernel_id = {
        let id = attention_kernel(module, spec, kernel);
        match id.family.by_sequence() {
            Some(twin) if by_sequence && kernel == KernelChoice::Pipelined => id.with_family(twin),
            _ => id,
        }
    };
    let group = spec.group();
    let kv_bytes = spec.kv_dtype.size_bytes().expect("validated KV dtype") as u32;
    let (heads_per_block, threads, mut shared_bytes, mut stages) = match kernel {
        KernelChoice::Pipelined => {
            let settings = settings()?;
            let tile_keys = pipelined_tile_keys(spec.head_dim);
            let threads = pipelined_threads(tile_keys, pipelined_dim_split(spec.head_dim));
            let stages = match settings.pipe_stages {
                0 => choose_pipe_stages(module, kernel_id, threads, spec.head_dim, kv_bytes, tile_keys)?,
                n => n,
            };
            let shared_bytes = pipelined_shared_bytes(spec.head_dim, kv_bytes, tile_keys, stages);
            ensure!(
                shared_bytes <= module.max_shared_bytes_per_block,
                "{PIPE_STAGES_ENV_VAR}={stages} needs {shared_bytes} bytes of shared memory per block; the device \
                 allows {}",
                module.max_shared_bytes_per_block
            );
            (MMA_HEADS_PER_BLOCK, threads, shared_bytes, stages)
        }
        KernelChoice::TensorCore => (MMA_HEADS_PER_BLOCK, RPA_THREADS, mma_shared_bytes(spec.head_dim), 0),
        _ => (HEADS_PER_BLOCK, RPA_THREADS, rpa_shared_bytes(spec.dims_per_lane()), 0),
    };
    let chunks = group.div_ceil(heads_per_block);
    let grid_y = spec.num_kv_heads * chunks;
    ensure!(grid_y <= 65535, "num_kv_heads * head chunks ({grid_y}) exceeds the grid limit");
    let blocks_per_split = spec.max_tokens as u64 * grid_y as u64;
    let max_keys = spec.max_visited_keys();
    let mut waves = 0;
    let (mut splits, mut split_len, cluster) = if kernel == KernelChoice::Pipelined {
        let settings = settings()?;
        let fp8_key_rows = kv_bytes == 1 && settings.key_rows.is_none() && key_rows_taken(module, spec)?;
        let p = plan_pipelined(
            module,
            spec,
            &settings,
            kernel_id,
            (threads, stages, shared_bytes),
            fp8_key_rows,
            blocks_per_split,
            max_keys,
        )?;
        (stages, shared_bytes, waves) = (p.stages, p.shared_bytes, p.waves);
        (p.splits.splits, p.splits.split_len, p.splits.cluster)
    } else {
        let (splits, split_len) = choose_splits(blocks_per_split, max_keys, module.multiprocessors);
        (splits, split_len, false)
    };
    let merge_mode = settings()?.merge_mode;
    let pipelined = kernel == KernelChoice::Pipelined;
    let heads = heads_per_block.min(group);
    let host_bound = !captured && kv_read_bound(spec) <= ONE_LAUNCH_MAX_KV_BYTES;
    let mut merge = PartialsMerge::for_mode(merge_mode, splits, pipelined, host_bound);
    if let Some(bytes) = limit.filter(|_| !cluster) {
        if split_scratch_bytes(spec, splits, grid_y, merge) > bytes {
            // Fewer, longer splits: as many as the workspace holds, in whole tiles.
            let counters = split_counter_bytes(spec, grid_y, merge);
            let fit = (bytes.saturating_sub(counters) / bytes_per_split(spec).max(1)) as u32;
            let granule = if pipelined { PIPE_TILE_KEYS } else { RPA_WARPS };
            split_len = max_keys.max(1).div_ceil(fit.max(1)).next_multiple_of(granule);
            splits = max_keys.max(1).div_ceil(split_len);
            merge = PartialsMerge::for_mode(merge_mode, splits, pipelined, host_bound);
            if split_scratch_bytes(spec, splits, grid_y, merge) > bytes {
                (splits, split_len) = (1, max_keys.max(1).next_multiple_of(granule));
            }
        }
    }
    let pipe_mode = match (stages, settings()?.pipe_mode) {
        (0, _) => None,
        (_, Some(mode)) => Some(mode),
        (_, None) => Some(default_pipe_mode(
            key_rows_taken(module, spec)?,
            kv_bytes,
            stages,
            split_len,
            waves,
            spec.page_size,
            module.dram_gbs_per_multiprocessor,
        )),
    };
    // A merge block per query head of a chunk, for every (row, chunk): grid z after the splits.
    let merge_blocks = if merge == PartialsMerge::Blocks && splits > 1 && !cluster { heads } else { 0 };
    ensure!(
        splits + merge_blocks <= 65535,
        "{splits} key splits and {merge_blocks} merge blocks exceed the grid limit"
    );
    Ok(LaunchPlan::Direct(DirectPlan {
        kernel: kernel_id,
        threads,
        shared_bytes,
        stages,
        grid_y,
        splits,
        split_len,
        cluster,
        merge,
        merge_blocks,
        pipe_mode,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    #[test]
    fn one_launch_bound_of_the_default_merge() {
        // 1 x 32k (128 MiB of bf16 KV) within, 4 x 32k not. 32 q / 8 KV heads, head_dim 128.
        let spec =
            super::super::tests::check(&[1, 32, 128], &[2048, 16, 16, 128], DType::BF16, Default::default()).unwrap();
        let long = PagedAttention { pages_per_seq: 2048, ..spec };
        assert_eq!(kv_read_bound(&long), 128 << 20);
        assert!(kv_read_bound(&long) <= ONE_LAUNCH_MAX_KV_BYTES);
        assert!(kv_read_bound(&PagedAttention { max_tokens: 4, ..long }) > ONE_LAUNCH_MAX_KV_BYTES);
    }
}
