//! CUDA launch of ragged paged attention: the process's settings (parsed in `settings`) and their
//! reload, kernel choice, launch plans (from the rules in `plan_rules`) and their cache, scratch
//! for partials, the launches.

use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::Mutex;

use kernels_gpu::attention::{RpaParams, DECODE_APART_ONE_LAUNCH};
use kernels_gpu::kernels::paged_attention::{
    rpa_combine_shared_bytes, rpa_shared_bytes, HEADS_PER_BLOCK, LOOP_MERGE_MAX_SPLITS, MAX_CLUSTER_SPLITS,
    RPA_THREADS, RPA_WARPS,
};
use kernels_gpu::kernels::paged_attention_key_rows::KEY_ROWS_MAX_HEADS;
use kernels_gpu::kernels::paged_attention_mix::{mix_decode_blocks, mix_decode_slots, MIX_DECODE_STAGES};
use kernels_gpu::kernels::paged_attention_mma::{mma_shared_bytes, mma_supports_head_dim, MMA_HEADS_PER_BLOCK};
use kernels_gpu::kernels::paged_attention_pipelined::{
    pipelined_dim_split, pipelined_shared_bytes, pipelined_stage_bytes, pipelined_supports, pipelined_threads,
    pipelined_tile_keys, PIPE_MAX_STAGES, PIPE_TILE_KEYS,
};
use kernels_gpu::kernels::paged_attention_tiled::{
    plan_bytes, plan_capacity, tile_rows, tiled_shared_bytes, tiled_supports, tiled_wgmma_shared_bytes,
    PLAN_SHARED_BYTES, PLAN_THREADS, TILE_THREADS,
};
use kernels_gpu::kernels::paged_attention_tiled_ws::{
    ws_plans_itself, ws_q_box, ws_q_by_tma, ws_scratch_bytes, ws_shared_bytes, ws_supports, ws_tile_rows,
    WS_BLOCK_KEYS, WS_THREADS,
};
use kernels_gpu::tma::TensorMapImage;

use super::plan_rules::*;
use super::settings::*;
use super::PagedAttention;
use crate::dtype::DType;
use crate::ensure;
use crate::error::Result;
use crate::ops::aligned;
use crate::runtime::{
    stream_is_capturing, CUfunction, ContextModule, KernelArgs, KernelModule, LaunchConfig, Stream, TiledTensorMap,
};

/// Device pointers of one call, in the contract's order, plus the output.
#[derive(Clone, Copy, Debug)]
pub struct DeviceBuffers {
    pub q: *const c_void,
    pub kv_pages: *const c_void,
    pub kv_lens: *const c_void,
    pub page_indices: *const c_void,
    pub cu_q_lens: *const c_void,
    pub num_seqs: *const c_void,
    pub out: *mut c_void,
    /// Temporary memory of the call (see [`Workspace`]).
    pub workspace: Workspace,
}

impl DeviceBuffers {
    /// From the 7 buffers in the op's order (q, kv_pages, kv_lens, page_indices, cu_q_lens,
    /// num_seqs, out) and the call's workspace.
    pub fn from_ordered(t: [*mut c_void; 7], workspace: Workspace) -> Self {
        let [q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, out] = t;
        DeviceBuffers { q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, out, workspace }
    }
}

fn dtype_tag(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::F8E4M3FN => "e4m3",
        DType::F8E5M2 => "e5m2",
        _ => unreachable!("validated"),
    }
}

impl KernelChoice {
    /// The process's choice: [`KERNEL_ENV_VAR`] as read at the first call or the last
    /// [`reload_settings`] (reading the environment takes a lock and a scan: not per call).
    pub fn configured() -> Result<Self> {
        Ok(settings()?.choice)
    }
}

/// Most bytes of KV (bounded from the static shapes, [`kv_read_bound`]) that a direct split call
/// may read for [`MERGE_BY_CAPTURE`] to merge it in merge blocks: ~60 µs of streaming on an H200,
/// past which the device, not the host's second launch, bounds calls back to back.
pub const ONE_LAUNCH_MAX_KV_BYTES: u64 = 256 << 20;

/// Bytes of KV a call of `spec` reads at most: every row its longest sequence's keys, K and V of
/// every KV head.
fn kv_read_bound(spec: &PagedAttention) -> u64 {
    let kv_bytes = spec.kv_dtype.size_bytes().unwrap_or(2) as u64;
    spec.max_tokens as u64
        * spec.max_visited_keys() as u64
        * spec.num_kv_heads as u64
        * spec.head_dim as u64
        * 2
        * kv_bytes
}

/// Whether the pipelined kernel's key-rows layout covers a problem: a GQA group that fits its
/// columns, head_dim 64 or 128.
pub fn key_rows_applies(spec: &PagedAttention) -> bool {
    spec.group() <= KEY_ROWS_MAX_HEADS && matches!(spec.head_dim, 64 | 128)
}

/// Whether the pipelined kernel runs `spec` in the key-rows layout: where it applies and
/// [`KEY_ROWS_ENV_VAR`] takes it, or where that is unset, for 16-bit KV and where
/// [`fp8_key_rows_pay`].
fn key_rows_taken(module: &ContextModule, spec: &PagedAttention) -> Result<bool> {
    let fp8 = spec.kv_dtype.size_bytes() == Some(1);
    let taken = match settings()?.key_rows {
        Some(key_rows) => key_rows > fp8 as u32,
        None => !fp8 || fp8_key_rows_by_default(module, spec),
    };
    Ok(key_rows_applies(spec) && taken)
}

/// Whether fp8 KV is in the key-rows kernel by [`fp8_key_rows_pay`] (with [`KEY_ROWS_ENV_VAR`]
/// unset), which then plans its splits for at most [`FP8_KEY_ROWS_PLAN_BLOCKS`] blocks per SM.
fn fp8_key_rows_by_default(module: &ContextModule, spec: &PagedAttention) -> bool {
    fp8_key_rows_pay(module.dram_gbs_per_multiprocessor, module.compute_capability, spec.head_dim)
}

/// The settings, read once; `None` until first read.
static SETTINGS: std::sync::RwLock<Option<LaunchSettings>> = std::sync::RwLock::new(None);

/// The launch settings of the process (see [`KernelChoice::configured`]).
fn settings() -> Result<LaunchSettings> {
    if let Some(s) = *SETTINGS.read().unwrap_or_else(|e| e.into_inner()) {
        return Ok(s);
    }
    reload_settings()
}

/// Re-reads the launch settings from the environment ([`LaunchSettings::from_env`]: the variables
/// of `settings.rs`, [`KERNEL_ENV_VAR`] and the `XGK_RPA_*` / `XGK_WS_*` / `XGK_PDL` /
/// `XGK_LOG_PLANS` knobs) and drops the plans made under the previous ones (benchmarks switch
/// kernels in one process: set the variables, then call this, or `xgk_reload_settings` from C).
/// An invalid value is an error, here and at every launch until a valid one is read.
pub fn reload_settings() -> Result<LaunchSettings> {
    let mut guard = SETTINGS.write().unwrap_or_else(|e| e.into_inner());
    *guard = None;
    let s = LaunchSettings::from_env()?;
    *guard = Some(s);
    plan_cache().lock().unwrap_or_else(|e| e.into_inner()).clear();
    SETTINGS_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Release);
    Ok(s)
}

/// What a launch plan depends on besides the device: the op's static shapes and attributes (bit
/// patterns), the kernel choice and the workspace limit.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct PlanKey {
    module: usize,
    shape: [u32; 10],
    attrs: [u64; 6],
    choice: KernelChoice,
    limit: Option<usize>,
    captured: bool,
}

impl PlanKey {
    fn new(
        module: &ContextModule,
        spec: &PagedAttention,
        choice: KernelChoice,
        limit: Option<usize>,
        captured: bool,
    ) -> Self {
        let a = &spec.attrs;
        let opt = |v: Option<f32>| v.map_or(u64::MAX, |x| x.to_bits() as u64);
        PlanKey {
            module: module as *const ContextModule as usize,
            shape: [
                spec.q_dtype.to_xla() as u32,
                spec.kv_dtype.to_xla() as u32,
                spec.max_tokens,
                spec.num_q_heads,
                spec.num_kv_heads,
                spec.head_dim,
                spec.total_pages,
                spec.page_size,
                spec.max_num_seqs,
                spec.pages_per_seq,
            ],
            attrs: [
                a.sm_scale.to_bits() as u64,
                a.sliding_window.map_or(u64::MAX, u64::from),
                opt(a.soft_cap),
                opt(a.mask_value),
                opt(a.k_scale),
                opt(a.v_scale),
            ],
            choice,
            limit,
            captured,
        }
    }
}

/// A launch plan with its kernels' handles, in [`LaunchPlan::kernels`]' order (each allowed
/// the plan's shared memory): launches from it look nothing up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ResolvedPlan {
    plan: LaunchPlan,
    functions: [usize; 3],
}

impl ResolvedPlan {
    fn new(module: &ContextModule, spec: &PagedAttention, plan: LaunchPlan) -> Result<Self> {
        let mut functions = [0usize; 3];
        for (slot, (name, shared_bytes)) in functions.iter_mut().zip(plan.kernels(spec)) {
            *slot = module.function_with_shared(name, shared_bytes)? as usize;
        }
        Ok(ResolvedPlan { plan, functions })
    }

    /// Handle of the plan's kernel `i` ([`LaunchPlan::kernels`]' order).
    fn function(&self, i: usize) -> CUfunction {
        self.functions[i] as CUfunction
    }
}

/// Launch plans by [`PlanKey`]: deciding one (split model, occupancy lookups) costs more than the
/// launch itself, and a serving process sees a handful of shapes. Bounded: cleared when full.
fn plan_cache() -> &'static Mutex<std::collections::HashMap<PlanKey, ResolvedPlan>> {
    static CACHE: std::sync::OnceLock<Mutex<std::collections::HashMap<PlanKey, ResolvedPlan>>> =
        std::sync::OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Most plans kept (a process with more shapes recomputes; still correct).
const PLAN_CACHE_ENTRIES: usize = 4096;

/// Bumped by [`reload_settings`]: a thread's [`LAST_PLANS`] hold only for the settings they were
/// made under.
static SETTINGS_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A plan memo entry: the settings generation, the key, the plan.
type MemoPlan = Option<(u64, PlanKey, ResolvedPlan)>;

/// Plans in a thread's memo ([`LAST_PLANS`]).
const MEMO_PLANS: usize = 4;

thread_local! {
    /// The plans of this thread's last lookups (with their keys and settings generation): a
    /// model's layers call the op with the same shapes one after another, so most calls find
    /// their plan here, with no lock and no hashing (host cost per call, issue 9). Four, because
    /// a torch call looks its plan up several times: for the workspace's size (no limit; a split
    /// call merged by blocks outside capture also for its captured plan, [`workspace_bytes_with`])
    /// and to launch (with the workspace as the limit).
    static LAST_PLANS: std::cell::Cell<[MemoPlan; MEMO_PLANS]> = const { std::cell::Cell::new([None; MEMO_PLANS]) };
}

/// [`plan_launch`], cached, with its kernels resolved. `module` lives as long as the process
/// (modules are never dropped), so its address identifies the device.
fn cached_plan(
    module: &ContextModule,
    spec: &PagedAttention,
    choice: KernelChoice,
    limit: Option<usize>,
    captured: bool,
) -> Result<ResolvedPlan> {
    let key = PlanKey::new(module, spec, choice, limit, captured);
    // Read before any plan is looked up or made, so a reload meanwhile leaves the memo stale.
    let generation = SETTINGS_GENERATION.load(std::sync::atomic::Ordering::Acquire);
    let memo = LAST_PLANS.with(|last| last.get());
    for (g, k, plan) in memo.into_iter().flatten() {
        if g == generation && k == key {
            return Ok(plan);
        }
    }
    let cached = plan_cache().lock().unwrap_or_else(|e| e.into_inner()).get(&key).copied();
    let plan = match cached {
        Some(plan) => plan,
        None => {
            let plan = ResolvedPlan::new(module, spec, plan_launch(module, spec, choice, limit, false, captured)?)?;
            if settings()?.log_plans {
                log_plan_once(plan_log_line(module, spec, choice, limit, captured, &plan.plan));
            }
            let mut cache = plan_cache().lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= PLAN_CACHE_ENTRIES {
                cache.clear();
            }
            cache.insert(key, plan);
            plan
        }
    };
    let mut next = [None; MEMO_PLANS];
    next[0] = Some((generation, key, plan));
    next[1..].copy_from_slice(&memo[..MEMO_PLANS - 1]);
    LAST_PLANS.with(|last| last.set(next));
    Ok(plan)
}

/// Writes a plan's log line to stderr unless this process wrote the same line before: a
/// settings reload (benchmarks switching variants) empties the plan cache, and the plans then
/// made again are the ones already logged.
fn log_plan_once(line: String) {
    static LOGGED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut logged = LOGGED.lock().unwrap_or_else(|e| e.into_inner());
    let logged = logged.get_or_insert_with(HashSet::new);
    if logged.len() >= PLAN_CACHE_ENTRIES {
        logged.clear();
    }
    if !logged.contains(&line) {
        eprintln!("{line}");
        logged.insert(line);
    }
}

/// [`LOG_PLANS_ENV_VAR`]'s line for a plan just made: the device figures the rules read, the
/// call's static shapes, and the plan.
fn plan_log_line(
    module: &ContextModule,
    spec: &PagedAttention,
    choice: KernelChoice,
    limit: Option<usize>,
    captured: bool,
    plan: &LaunchPlan,
) -> String {
    let device = format!(
        "sm_{} ({}), {} SMs, {:.1} GB/s of DRAM per SM",
        module.compute_capability, module.image.arch, module.multiprocessors, module.dram_gbs_per_multiprocessor
    );
    plan_log_text(&device, spec, choice, limit, captured, plan)
}

/// [`plan_log_line`] past the device lookups (a test builds it without a GPU).
fn plan_log_text(
    device: &str,
    spec: &PagedAttention,
    choice: KernelChoice,
    limit: Option<usize>,
    captured: bool,
    plan: &LaunchPlan,
) -> String {
    let workspace = match limit {
        None => "allocated".to_string(),
        Some(bytes) => format!("{bytes} bytes given"),
    };
    format!(
        "xla_gpu_kernels: plan on {device}: {} rows, {} q / {} kv heads, head_dim {}, {} q / {} kv, page {}, \
         {} pages per sequence, {} sequences, {:?}; workspace {workspace}{} -> {plan:?}",
        spec.max_tokens,
        spec.num_q_heads,
        spec.num_kv_heads,
        spec.head_dim,
        spec.q_dtype,
        spec.kv_dtype,
        spec.page_size,
        spec.pages_per_seq,
        spec.max_num_seqs,
        choice,
        if captured { ", captured" } else { "" },
    )
}

/// Whether the tensor-core kernel covers `spec` on a device of compute capability `cc`.
pub fn tensor_core_applies(spec: &PagedAttention, cc: u32) -> bool {
    matches!(spec.q_dtype, DType::F16 | DType::BF16) && mma_supports_head_dim(spec.head_dim) && cc >= 80
}

/// Whether the pipelined kernel covers `spec`: f16/bf16 q with unscaled KV of the same dtype (head
/// dim 64, 128 or 256) or fp8 KV, scaled or not (head dim 64 or 128); sm_80+ (`cp.async`,
/// `ldmatrix`).
pub fn pipelined_applies(spec: &PagedAttention, cc: u32) -> bool {
    let fp8 = matches!(spec.kv_dtype, DType::F8E4M3FN | DType::F8E5M2);
    matches!(spec.q_dtype, DType::F16 | DType::BF16)
        && (fp8 || (spec.kv_dtype == spec.q_dtype && !spec.kv_scaled()))
        && pipelined_supports(spec.head_dim, if fp8 { 1 } else { 2 })
        && cc >= 80
}

/// Whether the tiled kernel covers `spec`: f16/bf16 q with unscaled KV of the same dtype, head dim
/// 64 or 128, a GQA group of at most 64; sm_80+.
pub fn tiled_applies(spec: &PagedAttention, cc: u32) -> bool {
    tile_dtypes_apply(spec) && tiled_supports(spec.head_dim, spec.group()) && cc >= 80
}

/// The tile kernels' dtypes: f16/bf16 q with unscaled KV of the same dtype.
fn tile_dtypes_apply(spec: &PagedAttention) -> bool {
    matches!(spec.q_dtype, DType::F16 | DType::BF16) && spec.kv_dtype == spec.q_dtype && !spec.kv_scaled()
}

/// Whether the warp-specialized tile kernel applies (on the sm_90a image): f16/bf16 q with
/// unscaled KV of q's dtype, head_dim 64, 128 or 256, GQA groups up to 64, pages of whole 16-key
/// blocks (its bulk copies move 16 keys of one page) and a pool of at most 2^31 tokens (the
/// copies' token coordinate is an int32), for shapes whose work indices fit in 32 bits
/// (`ws_work_indices_fit`: about 2^30 query rows times KV heads).
pub fn tiled_ws_applies(spec: &PagedAttention, cc: u32) -> bool {
    tile_dtypes_apply(spec)
        && ws_supports(spec.head_dim, spec.group())
        && cc >= 90
        && spec.page_size.is_multiple_of(WS_BLOCK_KEYS)
        && spec.total_pages as u64 * spec.page_size as u64 <= i32::MAX as u64
        && ws_work_indices_fit(spec)
}

/// Whether [`KernelChoice::Auto`] takes the tiled kernel: where it applies and the static shapes
/// leave room for more query rows than sequences (some sequence may have several rows: a prefill
/// or a mixed batch). With at most one row per sequence possible, the batch is decode only, and
/// the pipelined kernel's key splits serve it better.
pub fn tiled_preferred(spec: &PagedAttention, cc: u32) -> bool {
    tiled_applies(spec, cc) && spec.max_tokens > spec.max_num_seqs
}

/// Name of the attention kernel for a problem, as exported by the PTX: `rpa_pipe_<q>_<kv>_d<D>`
/// (pipelined; `rpa_pipe_kr_...` in the key-rows layout where [`key_rows_taken`]), `rpa_mma_<q>_<kv>_d<D>` (tensor cores) or `rpa_<q>_<kv>_dpl<N>` (general).
pub fn kernel_name(module: &ContextModule, spec: &PagedAttention, kernel: KernelChoice) -> &'static str {
    let (q, kv) = (dtype_tag(spec.q_dtype), dtype_tag(spec.kv_dtype));
    let name = match kernel {
        // A settings error surfaces where the plan reads them.
        KernelChoice::Pipelined if key_rows_taken(module, spec).unwrap_or(false) => {
            format!("rpa_pipe_kr_{q}_{kv}_d{}", spec.head_dim)
        }
        KernelChoice::Pipelined => format!("rpa_pipe_{q}_{kv}_d{}", spec.head_dim),
        KernelChoice::Tiled => format!("rpa_tile_{q}_{kv}_d{}", spec.head_dim),
        KernelChoice::TiledWgmma => format!("rpa_tile_wg_{q}_{kv}_d{}", spec.head_dim),
        KernelChoice::TiledWarpSpecialized => format!("rpa_tile_ws_{q}_{kv}_d{}", spec.head_dim),
        KernelChoice::TensorCore => format!("rpa_mma_{q}_{kv}_d{}", spec.head_dim),
        _ => format!("rpa_{q}_{kv}_dpl{}", spec.dims_per_lane()),
    };
    // A few dozen possible names; leaking each once keeps the function cache keyed by &'static str.
    intern(name)
}

fn intern(name: String) -> &'static str {
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut guard = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let set = guard.get_or_insert_with(HashSet::new);
    if let Some(&s) = set.get(name.as_str()) {
        return s;
    }
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    set.insert(leaked);
    leaked
}

/// Where a call's temporary device memory (split-KV partials, the tiled kernel's plan) comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Workspace {
    /// From the driver's stream-ordered pool (`cuMemAllocAsync`), freed on the stream after the
    /// call: for callers that cannot pass a buffer (legacy custom calls, tests). Under stream
    /// capture this records memory nodes, which XLA cannot nest in its command buffers.
    #[default]
    Allocate,
    /// A buffer of `bytes` bytes the caller owns (XLA's workspace result, a torch tensor), sized by
    /// [`workspace_bytes`]; nothing is allocated. Smaller than the call needs is not an error:
    /// split-KV kernels then use fewer splits, the tiled kernel gives way to the pipelined one.
    Given { ptr: u64, bytes: usize },
}

/// One call's launch, decided from static shapes and the device (never from device data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LaunchPlan {
    /// `rpa_plan`, then one block per (plan item, KV head).
    Tiled(TiledPlan),
    /// One block per (row, head chunk, split), plus the merge when `splits > 1`.
    Direct(DirectPlan),
}

/// [`LaunchPlan::Tiled`]: the tile kernel, rows per query tile, plan items (grid x).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TiledPlan {
    name: &'static str,
    rows: u32,
    capacity: u64,
    /// Threads per block of the tile kernel.
    threads: u32,
    /// Dynamic shared memory of the tile kernel (the wgmma variants align their stages).
    shared_bytes: u32,
    /// The warp-specialized kernel: after `rpa_plan_ws`, which also stores the tensor maps after
    /// the plan (`ws_scratch_bytes`), or alone where it plans itself (`can_plan_itself`).
    warp_specialized: bool,
    /// The warp-specialized kernel can plan itself and store the maps (`ws_plans_itself`: head
    /// dims 64 and 128): one launch, or two after a `decode` kernel, where its blocks are
    /// persistent (`TiledPlan::plans_itself`).
    can_plan_itself: bool,
    /// The pipelined kernel over the batch's decode sequences, which the plan then leaves out
    /// (`RpaParams::decode_apart`): its splits merge in clusters or not at all (no scratch).
    decode: Option<DirectPlan>,
    /// The tile kernel and `decode` in one launch (`name` is the mix kernel,
    /// `kernels_gpu::kernels::paged_attention_mix`): [`DECODE_APART_ENV_VAR`] 3 where
    /// [`mix_in_one_launch`] allows it.
    one_launch: bool,
}

impl TiledPlan {
    fn plan_kernel(&self) -> &'static str {
        if self.warp_specialized {
            "rpa_plan_ws"
        } else {
            "rpa_plan"
        }
    }

    /// Whether the warp-specialized kernel plans itself, with no plan kernel before it: where it
    /// can and its blocks are persistent (`persistent`, `XGK_WS_PERSISTENT` not 0: its blocks
    /// that wait for block 0's plan are then all resident; a grid of one block per pair has more
    /// than fit, and no order of their start is promised); after a decode kernel, only where it
    /// runs beside it ([`TiledPlan::overlaps_decode`]: its block 0 then waits for the decode
    /// kernel's word that the call's inputs are written, `RpaParams::decode_apart` 2).
    fn plans_itself(&self, persistent: bool, decode_apart: u32) -> bool {
        self.can_plan_itself && persistent && (self.decode.is_none() || self.overlaps_decode(decode_apart))
    }

    /// The `RpaParams::decode_apart` mode of the call's decode rows for the setting
    /// [`DECODE_APART_ENV_VAR`] (1 or more): one launch only where the plan has it, else 2 in the
    /// place of 3.
    fn decode_mode(&self, setting: u32) -> u32 {
        if self.one_launch {
            DECODE_APART_ONE_LAUNCH
        } else {
            setting.min(2)
        }
    }

    /// Whether the warp-specialized kernel after the decode kernel (decode rows apart) starts
    /// without waiting for it ([`DECODE_APART_ENV_VAR`] 2, or 3: in one launch where the plan
    /// allows it, else as 2): at head dims 64 and 128
    /// (`can_plan_itself`: the kernels that wait for a plan published under a tag), the kernel's
    /// block 0 or the plan kernel publishing the plan under the call's tag.
    fn overlaps_decode(&self, decode_apart: u32) -> bool {
        self.can_plan_itself && self.decode.is_some() && self.decode_mode(decode_apart) >= 2
    }
}

/// [`LaunchPlan::Direct`]: the attention kernel, its block, and the key splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DirectPlan {
    name: &'static str,
    threads: u32,
    shared_bytes: u32,
    /// The pipelined kernel's K/V stages (0 for the other kernels).
    stages: u32,
    grid_y: u32,
    splits: u32,
    split_len: u32,
    /// The splits of a (row, head chunk) are one cluster and merge in it (no merge kernel, no
    /// scratch).
    cluster: bool,
    /// How partials in the workspace merge (with splits, outside a cluster).
    merge: PartialsMerge,
    /// Slices of merge blocks after the splits in grid z (`RpaParams::merge_blocks`; 0 unless
    /// `merge` is [`PartialsMerge::Blocks`] with partials in the workspace).
    merge_blocks: u32,
    /// `RpaParams::pipe_mode` of the pipelined kernel (0 for the others).
    pipe_mode: u32,
}

impl DirectPlan {
    /// Whether the splits leave partials in the workspace: more than one split, not merged in a
    /// cluster.
    fn partials_in_workspace(&self) -> bool {
        self.splits > 1 && !self.cluster
    }

    /// The merge kernel that follows the attention kernel, with its dynamic shared memory: the
    /// loop or the group one for q's dtype; none without partials in the workspace or where the
    /// attention kernel merges them itself.
    fn merge_kernel(&self, spec: &PagedAttention) -> Option<(&'static str, u32)> {
        if !self.partials_in_workspace() {
            return None;
        }
        let (f32_name, f16_name, bf16_name, shared) = match self.merge {
            PartialsMerge::LoopKernel => ("rpa_combine_f32", "rpa_combine_f16", "rpa_combine_bf16", 0),
            PartialsMerge::GroupKernel => (
                "rpa_combine_groups_f32",
                "rpa_combine_groups_f16",
                "rpa_combine_groups_bf16",
                rpa_combine_shared_bytes(),
            ),
            PartialsMerge::Blocks => return None,
        };
        let name = match spec.q_dtype {
            DType::F32 => f32_name,
            DType::F16 => f16_name,
            _ => bf16_name,
        };
        Some((name, shared))
    }
}

/// How a split plan's partials in the workspace are merged ([`MERGE_MODE_ENV_VAR`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PartialsMerge {
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

    /// The merge for `mode` ([`MERGE_MODE_ENV_VAR`]) and `splits` splits; `blocks`: whether the
    /// kernel's grid can hold merge blocks (the pipelined kernel); `host_bound`: whether the
    /// call's host cost outweighs the merge blocks' device cost (a short call enqueued outside
    /// stream capture).
    fn for_mode(mode: u32, splits: u32, blocks: bool, host_bound: bool) -> Self {
        match mode {
            1 => PartialsMerge::LoopKernel,
            2 => PartialsMerge::GroupKernel,
            3 if blocks => PartialsMerge::Blocks,
            MERGE_BY_CAPTURE if blocks && host_bound => PartialsMerge::Blocks,
            _ => PartialsMerge::auto(splits),
        }
    }
}

impl LaunchPlan {
    /// The kernels the launch enqueues, with their dynamic shared memory.
    fn kernels(&self, spec: &PagedAttention) -> Vec<(&'static str, u32)> {
        match *self {
            LaunchPlan::Tiled(t) => {
                // Kernel 0, the plan kernel, resolved even where it is not launched (the indices
                // stay fixed).
                let mut v = vec![(t.plan_kernel(), PLAN_SHARED_BYTES), (t.name, t.shared_bytes)];
                v.extend(t.decode.map(|d| (d.name, d.shared_bytes)));
                v
            }
            LaunchPlan::Direct(d) => {
                let mut v = vec![(d.name, d.shared_bytes)];
                v.extend(d.merge_kernel(spec));
                v
            }
        }
    }

    /// Bytes of temporary device memory the launch needs.
    fn scratch_bytes(&self, spec: &PagedAttention) -> usize {
        match *self {
            LaunchPlan::Tiled(t) if t.warp_specialized => ws_scratch_bytes(t.capacity) as usize,
            LaunchPlan::Tiled(t) => plan_bytes(t.capacity) as usize,
            LaunchPlan::Direct(d) if d.cluster => 0,
            LaunchPlan::Direct(d) => split_scratch_bytes(spec, d.splits, d.grid_y, d.merge),
        }
    }
}

/// Bytes of one split's partials: an f32 output row and a log-sum-exp per (row, q head).
fn bytes_per_split(spec: &PagedAttention) -> usize {
    spec.max_tokens as usize * spec.num_q_heads as usize * (spec.head_dim as usize + 1) * 4
}

/// Bytes of the split-KV partials (none without splits), and of the merge blocks' counters
/// after them.
fn split_scratch_bytes(spec: &PagedAttention, splits: u32, grid_y: u32, merge: PartialsMerge) -> usize {
    if splits <= 1 {
        return 0;
    }
    splits as usize * bytes_per_split(spec) + split_counter_bytes(spec, grid_y, merge)
}

/// Bytes of the merge blocks' counters (`RpaParams::launch_tag`): an 8-byte word per (row, head
/// chunk), and 4 bytes that may align them after an odd count of log-sum-exps
/// (`split_counters_offset`); none for the other merges.
fn split_counter_bytes(spec: &PagedAttention, grid_y: u32, merge: PartialsMerge) -> usize {
    match merge {
        PartialsMerge::Blocks => 4 + 8 * spec.max_tokens as usize * grid_y as usize,
        _ => 0,
    }
}

/// The kernel `choice` resolves to for `spec` on a device of compute capability `cc`; an error
/// when an explicitly chosen kernel does not apply.
fn resolve_kernel(spec: &PagedAttention, cc: u32, choice: KernelChoice) -> Result<KernelChoice> {
    Ok(match choice {
        KernelChoice::Auto if tiled_preferred(spec, cc) => KernelChoice::Tiled,
        KernelChoice::Auto if pipelined_applies(spec, cc) => KernelChoice::Pipelined,
        KernelChoice::Auto if tensor_core_applies(spec, cc) => KernelChoice::TensorCore,
        KernelChoice::Auto => KernelChoice::General,
        KernelChoice::TensorCore => {
            ensure!(
                tensor_core_applies(spec, cc),
                "the tensor-core kernel needs f16/bf16 q, head_dim <= 128 (multiple of 16) and sm_80+"
            );
            KernelChoice::TensorCore
        }
        KernelChoice::Pipelined => {
            ensure!(
                pipelined_applies(spec, cc),
                "the pipelined kernel needs f16/bf16 q, head_dim 64/128/256 with unscaled KV of q's dtype or 64/128 with fp8 KV, and sm_80+"
            );
            KernelChoice::Pipelined
        }
        KernelChoice::Tiled | KernelChoice::TiledWgmma => {
            ensure!(
                tiled_applies(spec, cc),
                "the tiled kernel needs f16/bf16 q with unscaled KV of q's dtype, head_dim 64/128, num_q_heads / num_kv_heads <= 64 and sm_80+"
            );
            choice
        }
        KernelChoice::TiledWarpSpecialized => {
            ensure!(
                tiled_ws_applies(spec, cc),
                "the tiled-ws kernel needs f16/bf16 q with unscaled KV of q's dtype, head_dim 64/128/256, num_q_heads / num_kv_heads <= 64, sm_90, a page_size that is a multiple of {WS_BLOCK_KEYS} (got {}), at most 2^31 tokens in the KV pool and at most about 2^30 query rows times KV heads",
                spec.page_size
            );
            choice
        }
        KernelChoice::General => KernelChoice::General,
    })
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
    Ok(settings()?.decode_apart != 0
        && spec.max_num_seqs >= 2
        && spec.max_tokens > spec.max_num_seqs
        && !wgmma_tiles_preferred(spec)
        && pipelined_applies(spec, cc)
        && (tiled_applies(spec, cc) || (module.image.has_wgmma() && tiled_ws_applies(spec, cc))))
}

/// Whether a mix whose decode rows run apart (`decode`, on the warp-specialized tile kernel's
/// call) runs in one launch (`kernels_gpu::kernels::paged_attention_mix`): with
/// [`DECODE_APART_ENV_VAR`] 3 and persistent tile blocks (the plan's builder then runs among at
/// most one tile block per multiprocessor), at head dims 64 and 128 (the tile kernel plans
/// itself), where the decode plan is the key-rows twin with no splits (a decode block in a group
/// of the tile kernel's block: no clusters, no merge; the head-rows twin spilled at 168
/// registers). With the variable unset, only where [`mix_one_launch_pays`]. Elsewhere the call
/// takes two launches (mode 2).
fn mix_in_one_launch(
    module: &ContextModule,
    spec: &PagedAttention,
    decode: &DirectPlan,
    settings: &LaunchSettings,
) -> bool {
    settings.decode_apart == DECODE_APART_ONE_LAUNCH
        && (settings.decode_apart_given || mix_one_launch_pays(module.dram_gbs_per_multiprocessor))
        && settings.persistent != 0
        && ws_plans_itself(spec.head_dim)
        && decode.splits == 1
        && !decode.cluster
        && decode.merge_blocks == 0
        && decode.name.starts_with("rpa_pipe_kr_seq_")
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

/// The pipelined kernel's twin on a grid of sequences (`rpa_pipe_seq_*`, `rpa_pipe_kr_seq_*`).
fn by_sequence_name(row_kernel: &'static str) -> &'static str {
    intern(match row_kernel.strip_prefix("rpa_pipe_kr_") {
        Some(rest) => format!("rpa_pipe_kr_seq_{rest}"),
        None => row_kernel.replacen("rpa_pipe_", "rpa_pipe_seq_", 1),
    })
}

/// Query rows per sequence slot from which Auto takes the warpgroup-MMA tiles on Hopper.
const WGMMA_MIN_ROWS_PER_SEQUENCE: u64 = 64;

/// Whether Auto takes the warpgroup-MMA tile kernel (on the sm_90a image) rather than the
/// mma.sync one, from the static shapes. On an H100 (benchmarks/NOTES.md "v4b") the wgmma tiles
/// ran pure prefill 1.16-1.29x as fast, but mixed batches 11-13 % slower: their decode rows are
/// short items, which the mma.sync kernel computes on one warp and the wgmma kernel on the whole
/// warpgroup. A call's static shapes allow at most `max_num_seqs` short items; with at least
/// [`WGMMA_MIN_ROWS_PER_SEQUENCE`] query rows per sequence slot the call is prefill-shaped (the
/// peers' prefill cases: 256 to 32768 rows per slot; the mixes: 9), with fewer it may be mostly
/// decode rows, as in a serving engine's steps (max_num_seqs 256 over 8192 tokens: 32).
pub fn wgmma_tiles_preferred(spec: &PagedAttention) -> bool {
    spec.max_tokens as u64 >= WGMMA_MIN_ROWS_PER_SEQUENCE * spec.max_num_seqs.max(1) as u64
}

/// Decides the launch. `limit`: the bytes of a caller-given workspace (`None`: memory is
/// allocated to fit); splits shrink to fit it, and an Auto-chosen tiled kernel whose plan does not
/// fit gives way to the next kernel. `captured`: the call is enqueued under stream capture (the
/// default merge of split partials asks, [`MERGE_MODE_ENV_VAR`]).
fn plan_launch(
    module: &ContextModule,
    spec: &PagedAttention,
    choice: KernelChoice,
    limit: Option<usize>,
    by_sequence: bool,
    captured: bool,
) -> Result<LaunchPlan> {
    // The pipelined kernel on a grid of sequences ([`plan_apart_decode`]): its own kernel, planned
    // with its own occupancy.
    let kernel_name = |spec: &PagedAttention, kernel: KernelChoice| match kernel_name(module, spec, kernel) {
        name if by_sequence && kernel == KernelChoice::Pipelined => by_sequence_name(name),
        name => name,
    };
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
        let group = spec.group();
        let ws = kernel == KernelChoice::TiledWarpSpecialized;
        let rows = if ws { ws_tile_rows(group) } else { tile_rows(group) };
        let capacity = plan_capacity(spec.max_tokens as u64, spec.max_num_seqs as u64, rows as u64);
        ensure!(capacity < (1u64 << 31), "max_num_batched_tokens is too large for the tiled kernel's grid");
        ensure!(spec.num_kv_heads <= 65535, "num_kv_heads ({}) exceeds the grid limit", spec.num_kv_heads);
        let (threads, shared_bytes) = match kernel {
            KernelChoice::TiledWgmma => (TILE_THREADS, tiled_wgmma_shared_bytes(spec.head_dim)),
            KernelChoice::TiledWarpSpecialized => (WS_THREADS, ws_shared_bytes(spec.head_dim)),
            _ => (TILE_THREADS, tiled_shared_bytes(spec.head_dim)),
        };
        let decode = if apart { Some(plan_apart_decode(module, spec)?) } else { None };
        let settings = settings()?;
        let one_launch = ws && decode.is_some_and(|d| mix_in_one_launch(module, spec, &d, &settings));
        let name = kernel_name(spec, kernel);
        let plan = LaunchPlan::Tiled(TiledPlan {
            name: if one_launch { intern(name.replacen("rpa_tile_ws_", "rpa_mix_", 1)) } else { name },
            rows,
            capacity,
            threads,
            shared_bytes,
            warp_specialized: ws,
            can_plan_itself: ws && ws_plans_itself(spec.head_dim),
            decode,
            one_launch,
        });
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
    let group = spec.group();
    let kv_bytes = spec.kv_dtype.size_bytes().expect("validated KV dtype") as u32;
    let (heads_per_block, threads, mut shared_bytes, mut stages) = match kernel {
        KernelChoice::Pipelined => {
            let settings = settings()?;
            let tile_keys = pipelined_tile_keys(spec.head_dim);
            let threads = pipelined_threads(tile_keys, pipelined_dim_split(spec.head_dim));
            let stages = match settings.pipe_stages {
                0 => {
                    choose_pipe_stages(module, kernel_name(spec, kernel), threads, spec.head_dim, kv_bytes, tile_keys)?
                }
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
        let name = kernel_name(spec, kernel);
        let settings = settings()?;
        let fp8_key_rows = kv_bytes == 1 && settings.key_rows.is_none() && key_rows_taken(module, spec)?;
        let cap = fp8_key_rows.then_some(FP8_KEY_ROWS_PLAN_BLOCKS);
        let split_plan = |shared_bytes| {
            plan_pipelined_splits(module, &settings, name, threads, shared_bytes, cap, blocks_per_split, max_keys)
        };
        let mut s;
        (s, waves) = split_plan(shared_bytes)?;
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
            if module.resident_blocks(name, threads, two)? > module.resident_blocks(name, threads, shared_bytes)? {
                // At the residency the split model plans with, so that `XGK_RPA_PLAN_BLOCKS`
                // moves this rule too.
                let slots = planned_slots(module, &settings, name, threads, two, cap)?;
                let s2 = if unsplit_grid_is_long(blocks_per_split, slots) {
                    whole_rows(max_keys)
                } else {
                    split_plan(two)?.0
                };
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
        (s.splits, s.split_len, s.cluster)
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
        (0, _) => 0,
        (_, Some(mode)) => mode,
        (_, None) => default_pipe_mode(
            key_rows_taken(module, spec)?,
            kv_bytes,
            stages,
            split_len,
            waves,
            spec.page_size,
            module.dram_gbs_per_multiprocessor,
        ),
    };
    // A merge block per query head of a chunk, for every (row, chunk): grid z after the splits.
    let merge_blocks = if merge == PartialsMerge::Blocks && splits > 1 && !cluster { heads } else { 0 };
    ensure!(
        splits + merge_blocks <= 65535,
        "{splits} key splits and {merge_blocks} merge blocks exceed the grid limit"
    );
    Ok(LaunchPlan::Direct(DirectPlan {
        name: kernel_name(spec, kernel),
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

/// The pipelined kernel's key splits for its block (`threads`, `shared_bytes`), and the waves of
/// resident blocks the grid then takes: the split model over the device's resident blocks (at
/// most `cap` per SM, or [`PLAN_BLOCKS_ENV_VAR`]'s), merged in clusters where the model prefers
/// it and every cluster of the grid runs at once.
#[allow(clippy::too_many_arguments)]
fn plan_pipelined_splits(
    module: &ContextModule,
    settings: &LaunchSettings,
    name: &'static str,
    threads: u32,
    shared_bytes: u32,
    cap: Option<u32>,
    blocks_per_split: u64,
    max_keys: u32,
) -> Result<(PipelinedSplits, u64)> {
    let slots = planned_slots(module, settings, name, threads, shared_bytes, cap)?;
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
            Ok(blocks_per_split <= module.active_clusters(name, threads, shared_bytes, splits)? as u64)
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
/// [`PLAN_BLOCKS_ENV_VAR`]'s per SM when set.
fn planned_slots(
    module: &ContextModule,
    settings: &LaunchSettings,
    name: &'static str,
    threads: u32,
    shared_bytes: u32,
    cap: Option<u32>,
) -> Result<u64> {
    let resident = match settings.plan_blocks {
        0 => {
            let resident = module.resident_blocks(name, threads, shared_bytes)?;
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
fn choose_pipe_stages(
    module: &ContextModule,
    name: &'static str,
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
        let blocks = module.resident_blocks(name, threads, shared)? as u64;
        let in_flight = blocks * (stages as u64 - 1) * stage;
        let score =
            if in_flight >= PIPE_IN_FLIGHT_PER_SM { (true, blocks, stages) } else { (false, in_flight, stages) };
        if best.is_none_or(|b| (score.0, score.1) > (b.0, b.1)) {
            best = Some(score);
        }
    }
    Ok(best.map_or(3, |b| b.2))
}

/// Bytes of workspace a call of `spec` needs on CUDA device `ordinal` with the configured kernel
/// choice ([`KernelChoice::configured`]): what [`Workspace::Given`] should hold, enqueued
/// directly or under stream capture. Loads the module into the device's primary context (so a
/// later launch under stream capture finds it loaded). Zero when the call needs no temporary
/// memory.
pub fn workspace_bytes(kernels: &KernelModule, ordinal: i32, spec: &PagedAttention) -> Result<usize> {
    workspace_bytes_with(kernels, ordinal, spec, KernelChoice::configured()?)
}

/// [`workspace_bytes`] with an explicit kernel choice.
pub fn workspace_bytes_with(
    kernels: &KernelModule,
    ordinal: i32,
    spec: &PagedAttention,
    choice: KernelChoice,
) -> Result<usize> {
    if spec.max_tokens == 0 {
        return Ok(0);
    }
    let module = kernels.for_device(ordinal)?;
    // Resolved (the kernels looked up) now too, so a launch under stream capture makes no
    // first-use calls; cached, as the torch kernel asks at every call.
    let direct = cached_plan(&module, spec, choice, None, false)?;
    let mut bytes = direct.plan.scratch_bytes(spec);
    if plan_asks_for_capture(&direct.plan)? {
        // One workspace for both: XLA sizes it once, from the static shapes.
        let captured = cached_plan(&module, spec, choice, None, true)?;
        bytes = bytes.max(captured.plan.scratch_bytes(spec));
    }
    Ok(bytes)
}

/// Whether a call whose plan outside stream capture is `direct` takes another plan under capture:
/// the default merge of split partials ([`MERGE_BY_CAPTURE`]) where the direct plan merges them in
/// merge blocks.
fn plan_asks_for_capture(direct: &LaunchPlan) -> Result<bool> {
    Ok(matches!(direct, LaunchPlan::Direct(d) if d.merge_blocks != 0) && settings()?.merge_mode == MERGE_BY_CAPTURE)
}

/// Enqueues the op on `stream` (one kernel, or two with a split-KV merge or the tiled plan); on
/// the legacy default stream (NULL), that of the device holding `bufs.out`.
///
/// # Safety
/// Every pointer in `bufs` must be a device allocation in the stream's context holding the
/// shape and dtype `spec` was validated against (a given workspace: at least its `bytes`).
pub unsafe fn launch_cuda(
    kernels: &KernelModule,
    stream: Stream,
    spec: &PagedAttention,
    bufs: DeviceBuffers,
) -> Result<()> {
    launch_cuda_with(kernels, stream, spec, bufs, KernelChoice::configured()?)
}

/// [`launch_cuda`] where the caller knows the device: for the legacy default stream (NULL, torch's
/// default stream of every device) the launch goes to device `device`'s primary context without
/// asking the driver which device holds the buffers ([`KernelModule::for_launch`]).
///
/// # Safety
/// As [`launch_cuda`], with the buffers on device `device`.
pub unsafe fn launch_cuda_on_device(
    kernels: &KernelModule,
    stream: Stream,
    device: i32,
    spec: &PagedAttention,
    bufs: DeviceBuffers,
) -> Result<()> {
    launch_cuda_in(kernels, stream, Some(device), spec, bufs, KernelChoice::configured()?)
}

/// [`launch_cuda`] with an explicit kernel choice (tests and benchmarks compare the kernels).
///
/// # Safety
/// As [`launch_cuda`].
pub unsafe fn launch_cuda_with(
    kernels: &KernelModule,
    stream: Stream,
    spec: &PagedAttention,
    bufs: DeviceBuffers,
    choice: KernelChoice,
) -> Result<()> {
    launch_cuda_in(kernels, stream, None, spec, bufs, choice)
}

/// The launch: in `stream`'s context, or for the legacy default stream in the primary context of
/// `device` (else of the device holding the output).
///
/// # Safety
/// As [`launch_cuda`].
unsafe fn launch_cuda_in(
    kernels: &KernelModule,
    stream: Stream,
    device: Option<i32>,
    spec: &PagedAttention,
    bufs: DeviceBuffers,
    choice: KernelChoice,
) -> Result<()> {
    for (name, p) in [("q", bufs.q), ("kv_pages", bufs.kv_pages), ("out", bufs.out as *const c_void)] {
        ensure!(aligned(p, 16), "{name} must be 16-byte aligned on the device");
    }
    for (name, p) in [
        ("kv_lens", bufs.kv_lens),
        ("page_indices", bufs.page_indices),
        ("cu_q_lens", bufs.cu_q_lens),
        ("num_seqs", bufs.num_seqs),
    ] {
        ensure!(aligned(p, 4), "{name} must be 4-byte aligned on the device");
    }
    let limit = match bufs.workspace {
        Workspace::Allocate => None,
        Workspace::Given { ptr, bytes } => {
            ensure!(bytes == 0 || ptr % 16 == 0, "the workspace must be 16-byte aligned on the device");
            Some(if ptr == 0 { 0 } else { bytes })
        }
    };
    if spec.max_tokens == 0 {
        return Ok(());
    }
    let module = kernels.for_launch(stream, device, bufs.out as *const c_void)?;
    let mut resolved = cached_plan(&module, spec, choice, limit, false)?;
    // Asked only where the answer changes the plan (split calls), so other calls skip the query.
    if plan_asks_for_capture(&resolved.plan)? && stream_is_capturing(stream)? {
        resolved = cached_plan(&module, spec, choice, limit, true)?;
    }
    let needed = resolved.plan.scratch_bytes(spec);
    let (scratch, owned) = match bufs.workspace {
        _ if needed == 0 => (0, None),
        Workspace::Given { ptr, .. } => (ptr, None),
        Workspace::Allocate => {
            let s = module.alloc_scratch(stream, needed)?;
            (s.ptr(), Some(s))
        }
    };
    let launched = match resolved.plan {
        LaunchPlan::Tiled(t) => launch_tiled(&module, stream, spec, bufs, scratch, t, &resolved),
        LaunchPlan::Direct(d) => launch_direct(&module, stream, spec, bufs, scratch, d, &resolved),
    };
    // Free even when a launch failed, so an error does not leak device memory.
    let freed = owned.map_or(Ok(()), |s| s.free());
    launched.and(freed)
}

/// Pushes the op's six inputs, in the contract's order: every attention kernel's first
/// parameters.
fn push_inputs(args: &mut KernelArgs, bufs: &DeviceBuffers) {
    args.push(bufs.q)
        .push(bufs.kv_pages)
        .push(bufs.kv_lens)
        .push(bufs.page_indices)
        .push(bufs.cu_q_lens)
        .push(bufs.num_seqs);
}

/// One block per (row, head chunk, split); with splits, the merge kernel after it.
///
/// # Safety
/// As [`launch_cuda`]; `scratch` holds the plan's scratch bytes when it splits.
unsafe fn launch_direct(
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
    if l.merge_blocks != 0 {
        params.launch_tag = next_launch_tag();
    }
    let (part_o, part_lse) = if l.partials_in_workspace() {
        let rows = l.splits as u64 * spec.max_tokens as u64 * spec.num_q_heads as u64;
        (scratch, scratch + rows * spec.head_dim as u64 * 4)
    } else {
        (0, 0)
    };
    let (function, partials) = (resolved.function(0), (part_o, part_lse));
    // SAFETY: the plan's kernel 0 is `l.name`; partials as `l` needs them; a grid of rows.
    launch_attention(module, stream, &bufs, &l, function, spec.max_tokens, partials, 0, params, &settings)?;
    let Some((_, merge_shared)) = merge_kernel else {
        return Ok(());
    };
    let mut args = KernelArgs::new();
    args.push(part_o).push(part_lse).push(bufs.out).push(params);
    let cfg = LaunchConfig {
        grid: (spec.max_tokens, spec.num_q_heads, 1),
        block: (RPA_THREADS, 1, 1),
        shared_bytes: merge_shared,
    };
    // SAFETY: the plan's kernel 1 is the merge kernel (its shared memory as it needs); the
    // partials start at the scratch's base, 16-byte aligned (a given workspace is checked by
    // `launch_cuda`; the driver's stream-ordered allocations are aligned further).
    module.launch_function(stream, resolved.function(1), cfg, 1, &mut args.pointers(), settings.programmatic)
}

/// The attention kernel's parameters for a direct plan: its splits, stages, cluster and copy mode.
fn direct_params(spec: &PagedAttention, l: &DirectPlan, settings: &LaunchSettings) -> RpaParams {
    let mut params = spec.kernel_params(l.splits, l.split_len);
    params.copy_hint = settings.copy_hint;
    params.pipe_stages = l.stages;
    params.cluster_splits = l.cluster as u32;
    params.pipe_mode = l.pipe_mode;
    params.table_preload = (l.stages > 0 && settings.table_preload) as u32;
    params.merge_blocks = l.merge_blocks;
    params
}

/// The pipelined kernel over a call's decode sequences ([`plan_apart_decode`]): one block per
/// (sequence, head chunk, split), before the tile kernel. With a nonzero `tag` (the tile kernel
/// plans itself, `RpaParams::decode_apart` 2) its block (0, 0, 0) publishes the plan header's
/// inputs word under it once the kernels before the call have completed.
///
/// # Safety
/// As [`launch_cuda`]; `plan` holds the call's plan header (`LaunchPlan::scratch_bytes`);
/// `function` is `l.name`'s handle, allowed `l.shared_bytes`.
#[allow(clippy::too_many_arguments)]
unsafe fn launch_apart_decode(
    module: &ContextModule,
    stream: Stream,
    spec: &PagedAttention,
    bufs: &DeviceBuffers,
    plan: u64,
    l: DirectPlan,
    tag: u32,
    function: CUfunction,
    settings: &LaunchSettings,
) -> Result<()> {
    let mut params = direct_params(spec, &l, settings);
    params.decode_apart = if tag != 0 { 2 } else { 1 };
    params.launch_tag = tag;
    // SAFETY: as this function's contract; no partials (the plan merges in clusters or does not
    // split).
    launch_attention(module, stream, bufs, &l, function, spec.max_num_seqs, (0, 0), plan, params, settings)
}

/// Enqueues a direct plan's attention kernel: one block per (grid x, head chunk, split), its
/// splits one cluster where `l.cluster` says so.
///
/// # Safety
/// As [`launch_cuda`]; `function` is `l.name`'s handle, allowed `l.shared_bytes`; `partials`
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
    // SAFETY: `function` is `l.name`, allowed `l.shared_bytes`; arguments as it takes them.
    module.launch_function(stream, function, cfg, cluster_z, &mut args.pointers(), settings.programmatic)
}

/// A launch's tag for its words in the workspace (`RpaParams::launch_tag`: the merge blocks'
/// counters, the warp-specialized kernel's plan state): never 0, and
/// distinct for 2^32 - 1 launches in a row (an odd multiplier is a bijection of u32; spread over
/// the bits so that the tag does not look like the small integers a workspace may hold).
fn next_launch_tag() -> u32 {
    static LAUNCHES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    loop {
        let n = LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n != 0 {
            return n.wrapping_mul(0x9e37_79b1);
        }
    }
}

/// The tensor map of the KV pool for the warp-specialized kernel's bulk copies: tokens × (2
/// num_kv_heads K and V rows) × head_dim, boxes of 16 tokens (a page's 16-key block) × one row ×
/// 64 dims (a 128-byte swizzled column block).
pub fn kv_tensor_map(spec: &PagedAttention, kv: u64) -> Result<[u64; 16]> {
    let (d, rows) = (spec.head_dim as u64, 2 * spec.num_kv_heads as u64);
    TiledTensorMap {
        address: kv,
        dims: [d, rows, spec.total_pages as u64 * spec.page_size as u64],
        strides: [d * 2, rows * d * 2],
        boxes: [64, 1, WS_BLOCK_KEYS],
        bf16: spec.q_dtype == DType::BF16,
    }
    .encode()
}

/// The tensor map of a tensor of the queries' shape (the queries at `q` for the warp-specialized
/// kernel's Q loads, the output at `out` for its bulk stores of output tiles): `max_tokens` tokens ×
/// query heads × head_dim, boxes of one consumer's 64 M rows (`ws_q_box`: a GQA group's heads of
/// `64 / group` tokens) × 64 dims (a 128-byte swizzled column block); zeros, never read, where the
/// kernel loads Q with `cp.async` instead (not `ws_q_by_tma`).
pub fn ws_token_tensor_map(spec: &PagedAttention, address: u64) -> Result<[u64; 16]> {
    let group = spec.group();
    if !ws_q_by_tma(spec.head_dim, group) {
        return Ok([0; 16]);
    }
    let (d, heads) = (spec.head_dim as u64, spec.num_q_heads as u64);
    TiledTensorMap {
        address,
        dims: [d, heads, spec.max_tokens as u64],
        strides: [d * 2, heads * d * 2],
        boxes: ws_q_box(group),
        bf16: spec.q_dtype == DType::BF16,
    }
    .encode()
}

/// The tiled kernel: [`rpa_plan`](kernels_gpu::kernels::paged_attention_tiled::rpa_plan) writes
/// the work items into `plan` (scratch), then one block per (item, KV head) runs. The
/// warp-specialized kernel at head dims 64 and 128 with persistent blocks plans in its block 0
/// instead (one launch: a launch is ~2.5 µs of host time). With a mixed batch's decode rows apart
/// the pipelined decode kernel runs first; with [`DECODE_APART_ENV_VAR`] 2 the tile kernel runs
/// beside it (`TiledPlan::overlaps_decode`), its plan published under the call's tag: by its
/// block 0 once the decode kernel's first block says the inputs are written (two launches), or
/// by the plan kernel before the decode kernel where its blocks are not persistent (three). With
/// `t.one_launch` ([`mix_in_one_launch`]) the mix kernel runs both: its first blocks the decode
/// rows, three decode blocks each, then the tile kernel's persistent blocks (one launch).
///
/// # Safety
/// As [`launch_cuda`]; `plan` holds `t`'s scratch bytes (`LaunchPlan::scratch_bytes`).
unsafe fn launch_tiled(
    module: &ContextModule,
    stream: Stream,
    spec: &PagedAttention,
    bufs: DeviceBuffers,
    plan: u64,
    t: TiledPlan,
    resolved: &ResolvedPlan,
) -> Result<()> {
    let settings = settings()?;
    // The tile kernels' copies take a fixed L2 hint: `copy_hint` stays 0.
    let mut params = spec.kernel_params(1, spec.max_visited_keys());
    params.tile_rows = t.rows;
    params.plan_capacity = t.capacity as u32;
    let persistent = settings.persistent != 0;
    let grid = tile_grid(module, spec, &t, persistent);
    if t.warp_specialized {
        params.consumer_schedule = settings.consumer_schedule;
        params.dynamic_pairs = u32::from(settings.persistent == 2);
    }
    let plans_itself = t.plans_itself(persistent, settings.decode_apart);
    // With decode rows apart: 3 in one launch, 2 where the tile kernel plans itself after the
    // decode kernel, 1 where a plan kernel comes first.
    params.decode_apart = match t.decode {
        None => 0,
        Some(_) if t.one_launch => DECODE_APART_ONE_LAUNCH,
        Some(_) if plans_itself => 2,
        Some(_) => 1,
    };
    if plans_itself || t.overlaps_decode(settings.decode_apart) {
        // Tags the plan's state word in the workspace (`plan_or_wait`: published by the kernel's
        // block 0 or the plan kernel) and, with decode rows apart where the kernel plans itself,
        // the decode kernel's inputs word.
        params.launch_tag = next_launch_tag();
    }
    // The warp-specialized kernel's K/V, Q and output maps: for its plan kernel, or for itself.
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
    if !plans_itself {
        let mut args = KernelArgs::new();
        args.push(bufs.cu_q_lens).push(bufs.num_seqs).push(plan).push(params);
        for map in maps.iter().flatten() {
            // `rpa_plan_ws` stores them after the plan, in `WsMap`'s order.
            args.push(*map);
        }
        let cfg = LaunchConfig { grid: (1, 1, 1), block: (PLAN_THREADS, 1, 1), shared_bytes: PLAN_SHARED_BYTES };
        // SAFETY: the plan's kernel 0 is the plan kernel, allowed PLAN_SHARED_BYTES.
        module.launch_function(stream, resolved.function(0), cfg, 1, &mut args.pointers(), settings.programmatic)?;
    }
    let mut args = KernelArgs::new();
    push_inputs(&mut args, &bufs);
    args.push(plan).push(bufs.out).push(params);
    let mut grid_x = grid.0;
    match t.decode {
        Some(decode) if t.one_launch => {
            // The decode blocks' parameters and count follow the tile blocks' parameters
            // (`paged_attention_mix`); their blocks come first in the grid.
            let mut decode_params = direct_params(spec, &decode, &settings);
            decode_params.decode_apart = DECODE_APART_ONE_LAUNCH;
            decode_params.launch_tag = params.launch_tag;
            decode_params.pipe_stages = MIX_DECODE_STAGES;
            let decode_blocks = mix_decode_blocks(spec.max_num_seqs, spec.num_q_heads, spec.num_kv_heads);
            args.push(decode_params).push(decode_blocks);
            grid_x += decode_blocks;
        }
        Some(decode) => {
            // Before the tile kernel: the decode rows are most of a mixed batch's bytes. Where the
            // tile kernel plans itself its block 0 waits for the decode kernel's inputs word, under
            // the call's tag.
            let tag = if plans_itself { params.launch_tag } else { 0 };
            // SAFETY: the plan's kernel 2 is `decode.name`; `plan` holds the call's plan header.
            launch_apart_decode(module, stream, spec, &bufs, plan, decode, tag, resolved.function(2), &settings)?;
        }
        None => {}
    }
    for map in maps.iter().flatten() {
        // Where it plans itself, its first block stores them after the plan.
        args.push(*map);
    }
    let cfg = LaunchConfig { grid: (grid_x, grid.1, 1), block: (t.threads, 1, 1), shared_bytes: t.shared_bytes };
    // SAFETY: the plan's kernel 1 is `t.name`, allowed `t.shared_bytes`; where the
    // warp-specialized kernel plans itself the workspace's contents may be anything (its plan
    // state is tagged), else it holds the plan just enqueued.
    module.launch_function(stream, resolved.function(1), cfg, 1, &mut args.pointers(), settings.programmatic)
}

/// The tile kernel's grid (x, y). The mma.sync and wgmma tile kernels: one block per (plan item,
/// KV head), surplus blocks exiting at once. The warp-specialized kernel walks (item, KV head)
/// pairs in one grid row (`paged_attention_tiled_ws::for_each_pair`): one block per pair, or with
/// `persistent` as many blocks as there are multiprocessors (one block fits on each) when there
/// are more pairs. Persistent blocks need not restart per item (block launch, barrier setup),
/// their producer loads the next item's Q and first tiles under the consumers' last tiles and
/// epilogue, and every multiprocessor works to the end (no tail of a partly filled wave).
fn tile_grid(module: &ContextModule, spec: &PagedAttention, t: &TiledPlan, persistent: bool) -> (u32, u32) {
    let heads = spec.num_kv_heads.max(1);
    if !t.warp_specialized {
        return (t.capacity as u32, heads);
    }
    // < 2^32 / 3 (`ws_work_indices_fit`).
    let pairs = (t.capacity * heads as u64) as u32;
    let blocks = module.multiprocessors.max(1);
    (if persistent { pairs.min(blocks) } else { pairs }, 1)
}

/// Whether the warp-specialized kernel's work indices ((item, KV head) pairs and, in the plan's
/// fallback, rows times heads, with a grid's width of slack) stay below 2^32.
fn ws_work_indices_fit(spec: &PagedAttention) -> bool {
    let group = spec.group();
    let rows = ws_tile_rows(group.max(1)).max(1) as u64;
    let capacity = plan_capacity(spec.max_tokens as u64, spec.max_num_seqs as u64, rows);
    3 * capacity.max(spec.max_tokens as u64) * spec.num_kv_heads as u64 <= u32::MAX as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wgmma_tiles_for_prefill_shaped_calls_only() {
        let spec = |max_tokens, max_num_seqs| PagedAttention {
            q_dtype: DType::BF16,
            kv_dtype: DType::BF16,
            max_tokens,
            num_q_heads: 32,
            num_kv_heads: 8,
            head_dim: 128,
            total_pages: 4096,
            page_size: 16,
            max_num_seqs,
            pages_per_seq: 512,
            attrs: crate::ops::paged_attention::Attributes::default(),
        };
        // The peers' prefill cases: 1 x 2k, 4 x 1k, chunked 8 x 512.
        assert!(wgmma_tiles_preferred(&spec(2048, 1)));
        assert!(wgmma_tiles_preferred(&spec(4096, 4)));
        assert!(wgmma_tiles_preferred(&spec(4096, 8)));
        // The mixes (4 x 256 + 124 decode rows; 16 x 128 + 240) and a serving engine's steps.
        assert!(!wgmma_tiles_preferred(&spec(1148, 128)));
        assert!(!wgmma_tiles_preferred(&spec(2288, 256)));
        assert!(!wgmma_tiles_preferred(&spec(8192, 256)));
    }

    #[test]
    fn warp_specialized_tiles_need_whole_16_key_blocks_of_a_page() {
        let spec = |page_size, total_pages| PagedAttention {
            q_dtype: DType::BF16,
            kv_dtype: DType::BF16,
            max_tokens: 4096,
            num_q_heads: 32,
            num_kv_heads: 8,
            head_dim: 128,
            total_pages,
            page_size,
            max_num_seqs: 4,
            pages_per_seq: 64,
            attrs: crate::ops::paged_attention::Attributes::default(),
        };
        for page_size in [16, 32, 48, 128, 256] {
            assert!(tiled_ws_applies(&spec(page_size, 4096), 90), "page {page_size}");
            assert_eq!(
                resolve_kernel(&spec(page_size, 4096), 90, KernelChoice::TiledWarpSpecialized).ok(),
                Some(KernelChoice::TiledWarpSpecialized)
            );
        }
        // head_dim 256 too (64-key tiles), which the other tile kernels lack.
        let d256 = PagedAttention { head_dim: 256, ..spec(16, 4096) };
        assert!(tiled_ws_applies(&d256, 90) && !tiled_applies(&d256, 90));
        assert!(!tiled_ws_applies(&d256, 80), "the sm_90a image only");
        for page_size in [1, 8, 24] {
            assert!(!tiled_ws_applies(&spec(page_size, 4096), 90), "page {page_size}");
            let err = resolve_kernel(&spec(page_size, 4096), 90, KernelChoice::TiledWarpSpecialized).unwrap_err();
            assert!(err.to_string().contains("multiple of 16"), "{err}");
        }
        // The copies' token coordinate is an int32.
        assert!(tiled_ws_applies(&spec(16, (i32::MAX as u32) / 16), 90));
        assert!(!tiled_ws_applies(&spec(16, (i32::MAX as u32) / 16 + 1), 90));
        // The kernel's (item, KV head) work indices are u32: about 2^30 rows times heads.
        let rows = |max_tokens| PagedAttention { max_tokens, ..spec(16, 4096) };
        assert!(tiled_ws_applies(&rows(1 << 20), 90));
        assert!(!tiled_ws_applies(&rows(1 << 28), 90));
        let err = resolve_kernel(&rows(1 << 28), 90, KernelChoice::TiledWarpSpecialized).unwrap_err();
        assert!(err.to_string().contains("query rows times KV heads"), "{err}");
    }

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

    #[test]
    fn merge_modes_and_the_merge_blocks_workspace() {
        // Mode 0 by split count; mode 3 only where the kernel's grid can hold merge blocks; mode 4
        // (the default) as mode 3 for a host-bound call (short, outside stream capture), else as
        // mode 0. Host-bound or not changes nothing else.
        for host_bound in [false, true] {
            assert_eq!(PartialsMerge::for_mode(0, 16, true, host_bound), PartialsMerge::LoopKernel);
            assert_eq!(PartialsMerge::for_mode(0, 17, true, host_bound), PartialsMerge::GroupKernel);
            assert_eq!(PartialsMerge::for_mode(2, 4, true, host_bound), PartialsMerge::GroupKernel);
            assert_eq!(PartialsMerge::for_mode(3, 47, true, host_bound), PartialsMerge::Blocks);
            assert_eq!(PartialsMerge::for_mode(3, 47, false, host_bound), PartialsMerge::GroupKernel);
            assert_eq!(PartialsMerge::for_mode(3, 8, false, host_bound), PartialsMerge::LoopKernel);
            assert_eq!(PartialsMerge::for_mode(4, 8, false, host_bound), PartialsMerge::LoopKernel);
        }
        assert_eq!(PartialsMerge::for_mode(4, 47, true, true), PartialsMerge::Blocks);
        assert_eq!(PartialsMerge::for_mode(4, 47, true, false), PartialsMerge::GroupKernel);
        assert_eq!(PartialsMerge::for_mode(4, 8, true, false), PartialsMerge::LoopKernel);
        assert_eq!(DEFAULT_MERGE_MODE, MERGE_BY_CAPTURE);
        // The counters follow the partials: 8 bytes per (row, head chunk), 4 for alignment.
        // One decode row, 32 q / 8 KV heads, head_dim 128.
        let spec =
            super::super::tests::check(&[1, 32, 128], &[2048, 16, 16, 128], DType::BF16, Default::default()).unwrap();
        let partials = 47 * bytes_per_split(&spec);
        assert_eq!(split_scratch_bytes(&spec, 47, 8, PartialsMerge::GroupKernel), partials);
        assert_eq!(split_scratch_bytes(&spec, 47, 8, PartialsMerge::Blocks), partials + 4 + 8 * 8);
        assert_eq!(split_scratch_bytes(&spec, 1, 8, PartialsMerge::Blocks), 0);
        // The default's one-launch bound: 1 x 32k (128 MiB of bf16 KV) within, 4 x 32k not.
        let long = PagedAttention { pages_per_seq: 2048, ..spec };
        assert_eq!(kv_read_bound(&long), 128 << 20);
        assert!(kv_read_bound(&long) <= ONE_LAUNCH_MAX_KV_BYTES);
        assert!(kv_read_bound(&PagedAttention { max_tokens: 4, ..long }) > ONE_LAUNCH_MAX_KV_BYTES);
    }

    #[test]
    fn plan_log_lines_name_the_device_the_shapes_and_the_plan() {
        let spec = PagedAttention {
            q_dtype: DType::BF16,
            kv_dtype: DType::F8E4M3FN,
            max_tokens: 1,
            num_q_heads: 32,
            num_kv_heads: 8,
            head_dim: 128,
            total_pages: 4096,
            page_size: 16,
            max_num_seqs: 1,
            pages_per_seq: 2048,
            attrs: crate::ops::paged_attention::Attributes::default(),
        };
        let plan = LaunchPlan::Direct(DirectPlan {
            name: "rpa_pipe_bf16_e4m3_d128",
            threads: 128,
            shared_bytes: 32768,
            stages: 2,
            grid_y: 8,
            splits: 47,
            split_len: 704,
            cluster: false,
            merge: PartialsMerge::GroupKernel,
            merge_blocks: 0,
            pipe_mode: 1,
        });
        let device = "sm_90 (sm_90a), 132 SMs, 25.4 GB/s of DRAM per SM";
        let line = plan_log_text(device, &spec, KernelChoice::Auto, Some(1 << 20), true, &plan);
        assert!(line.starts_with("xla_gpu_kernels: plan on sm_90 (sm_90a), 132 SMs, 25.4 GB/s"), "{line}");
        for part in
            ["1 rows, 32 q / 8 kv heads, head_dim 128", "page 16, 2048 pages per sequence", "1048576 bytes given"]
        {
            assert!(line.contains(part), "{part}: {line}");
        }
        assert!(line.contains(", captured -> Direct(DirectPlan {"), "{line}");
        assert!(line.contains("splits: 47, split_len: 704") && line.contains("pipe_mode: 1"), "{line}");
        assert!(!line.contains('\n'), "one line: {line}");
        let line = plan_log_text(device, &spec, KernelChoice::Auto, None, false, &plan);
        assert!(line.contains("workspace allocated -> Direct("), "{line}");
    }
}
