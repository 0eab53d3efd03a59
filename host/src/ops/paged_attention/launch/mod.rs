//! The launch of ragged paged attention on CUDA: the call's buffers and workspace, the plan
//! lookup, and the kernels each plan enqueues (`direct.rs`, `merge.rs`, `tiled.rs`, `mix.rs`).

mod direct;
mod merge;
mod mix;
mod tensor_maps;
mod tiled;

pub use tensor_maps::{kv_tensor_map, ws_token_tensor_map};

use std::ffi::c_void;

use super::plan::{LaunchPlan, SplitMerge};
use super::plan_cache::{cached_plan, settings};
use super::settings::{KernelChoice, MergeSetting};
use super::PagedAttention;
use crate::ensure;
use crate::error::Result;
use crate::ops::aligned;
use crate::runtime::{stream_is_capturing, KernelArgs, KernelModule, Stream};

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
/// the default merge of split partials ([`MergeSetting::ByCapture`]) where the direct plan merges
/// them in merge blocks.
fn plan_asks_for_capture(direct: &LaunchPlan) -> Result<bool> {
    let merge_blocks =
        matches!(direct, LaunchPlan::Direct(d) if matches!(d.split_merge(), SplitMerge::MergeBlocks { .. }));
    Ok(merge_blocks && settings()?.merge_mode == MergeSetting::ByCapture)
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
        LaunchPlan::Tiled(t) => tiled::launch_tiled(&module, stream, spec, bufs, scratch, t, &resolved),
        LaunchPlan::Direct(d) => direct::launch_direct(&module, stream, spec, bufs, scratch, d, &resolved),
    };
    // Free even when a launch failed, so an error does not leak device memory.
    let freed = owned.map_or(Ok(()), |s| s.free());
    launched.and(freed)
}

/// Pushes the op's six inputs, in the contract's order: every attention kernel's first
/// parameters.
pub(super) fn push_inputs(args: &mut KernelArgs, bufs: &DeviceBuffers) {
    args.push(bufs.q)
        .push(bufs.kv_pages)
        .push(bufs.kv_lens)
        .push(bufs.page_indices)
        .push(bufs.cu_q_lens)
        .push(bufs.num_seqs);
}

/// A launch's tag for its words in the workspace (`RpaParams::launch_tag`: the merge blocks'
/// counters, the warp-specialized kernel's plan state): never 0, and
/// distinct for 2^32 - 1 launches in a row (an odd multiplier is a bijection of u32; spread over
/// the bits so that the tag does not look like the small integers a workspace may hold).
pub(super) fn next_launch_tag() -> u32 {
    static LAUNCHES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    loop {
        let n = LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n != 0 {
            return n.wrapping_mul(0x9e37_79b1);
        }
    }
}
