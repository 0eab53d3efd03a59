//! The process's launch settings and the launch plans made under them: read once, cached per
//! (device, shapes, choice, workspace, capture), dropped together on [`reload_settings`]; the
//! plan log line ([`LOG_PLANS_ENV_VAR`](super::settings::LOG_PLANS_ENV_VAR)).

use std::collections::HashSet;
use std::sync::Mutex;

use super::plan::LaunchPlan;
use super::plan_choice::plan_launch;
use super::settings::{KernelChoice, LaunchSettings};
use super::PagedAttention;
use crate::error::Result;
use crate::runtime::{CUfunction, ContextModule};

impl KernelChoice {
    /// The process's choice: [`KERNEL_ENV_VAR`](super::KERNEL_ENV_VAR) as read at the first call or the last
    /// [`reload_settings`] (reading the environment takes a lock and a scan: not per call).
    pub fn configured() -> Result<Self> {
        Ok(settings()?.choice)
    }
}

/// The settings, read once; `None` until first read.
static SETTINGS: std::sync::RwLock<Option<LaunchSettings>> = std::sync::RwLock::new(None);

/// The launch settings of the process (see [`KernelChoice::configured`]).
pub(super) fn settings() -> Result<LaunchSettings> {
    if let Some(s) = *SETTINGS.read().unwrap_or_else(|e| e.into_inner()) {
        return Ok(s);
    }
    reload_settings()
}

/// Re-reads the launch settings from the environment ([`LaunchSettings::from_env`]: the variables
/// of `settings.rs`, [`KERNEL_ENV_VAR`](super::KERNEL_ENV_VAR) and the `XGK_RPA_*` / `XGK_WS_*` / `XGK_PDL` /
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
pub(super) struct ResolvedPlan {
    pub plan: LaunchPlan,
    functions: [usize; 3],
}

impl ResolvedPlan {
    fn new(module: &ContextModule, spec: &PagedAttention, plan: LaunchPlan) -> Result<Self> {
        let mut functions = [0usize; 3];
        for (slot, (kernel, shared_bytes)) in functions.iter_mut().zip(plan.kernels(spec)) {
            *slot = module.function_with_shared(kernel.name(), shared_bytes)? as usize;
        }
        Ok(ResolvedPlan { plan, functions })
    }

    /// Handle of the plan's kernel `i` ([`LaunchPlan::kernels`]' order).
    pub(super) fn function(&self, i: usize) -> CUfunction {
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
    /// call merged by blocks outside capture also for its captured plan, [`workspace_bytes_with`](super::workspace_bytes_with))
    /// and to launch (with the workspace as the limit).
    static LAST_PLANS: std::cell::Cell<[MemoPlan; MEMO_PLANS]> = const { std::cell::Cell::new([None; MEMO_PLANS]) };
}

/// [`plan_launch`], cached, with its kernels resolved. `module` lives as long as the process
/// (modules are never dropped), so its address identifies the device.
pub(super) fn cached_plan(
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

/// [`LOG_PLANS_ENV_VAR`](super::settings::LOG_PLANS_ENV_VAR)'s line for a plan just made: the device figures the rules read, the
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
        module.compute_capability, module.image, module.multiprocessors, module.dram_gbs_per_multiprocessor
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ops::paged_attention::kernel_id::{KernelFamily, KernelId};
    use crate::ops::paged_attention::plan::{DirectPlan, PartialsMerge};
    use crate::ops::paged_attention::settings::PipeMode;

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
            kernel: KernelId::attention(KernelFamily::Pipelined, &spec),
            threads: 128,
            shared_bytes: 32768,
            stages: 2,
            grid_y: 8,
            splits: 47,
            split_len: 704,
            cluster: false,
            merge: PartialsMerge::GroupKernel,
            merge_blocks: 0,
            pipe_mode: Some(PipeMode::KeyGroupPipelines),
        });
        let device = "sm_90 (sm_90a), 132 SMs, 25.4 GB/s of DRAM per SM";
        let line = plan_log_text(device, &spec, KernelChoice::Auto, Some(1 << 20), true, &plan);
        assert!(line.starts_with("xla_gpu_kernels: plan on sm_90 (sm_90a), 132 SMs, 25.4 GB/s"), "{line}");
        for part in
            ["1 rows, 32 q / 8 kv heads, head_dim 128", "page 16, 2048 pages per sequence", "1048576 bytes given"]
        {
            assert!(line.contains(part), "{part}: {line}");
        }
        assert!(line.contains(", captured -> Direct(DirectPlan { kernel: \"rpa_pipe_bf16_e4m3_d128\""), "{line}");
        assert!(line.contains("splits: 47, split_len: 704"), "{line}");
        assert!(line.contains("pipe_mode: Some(KeyGroupPipelines)"), "{line}");
        assert!(!line.contains('\n'), "one line: {line}");
        let line = plan_log_text(device, &spec, KernelChoice::Auto, None, false, &plan);
        assert!(line.contains("workspace allocated -> Direct("), "{line}");
    }
}
