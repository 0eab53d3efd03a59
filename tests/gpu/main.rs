//! GPU tests: the kernels against the CPU implementation (itself checked against a float64 oracle
//! and JAX's reference), with fresh random inputs and poisoned outputs. They need a CUDA GPU and
//! are ignored otherwise; run them with `cargo test --release --test gpu -- --include-ignored`
//! (scripts/gpu_check.sh does, on the lent GPU machine).
//!
//! By concern: [`contract`] (the op whatever kernel serves it), [`decode`], [`prefill`] and
//! [`runtime`] (the simple add, the kernel images, programmatic launches, the `wgmma` primitives); this file is their
//! harness: device buffers, the kernels that apply to a case, calls with a poisoned output and
//! workspace, settings switched for one test.

#[path = "../common/mod.rs"]
mod common;
mod contract;
mod decode;
mod prefill;
mod runtime;

use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

use common::*;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use kernels_gpu::kernels::decode::pipelined::layout::{pipelined_shared_bytes, pipelined_tile_keys};
use rand::prelude::*;
use xla_gpu_kernels::host::ops::paged_attention::{
    decode_apart_applies, key_rows_applies, launch_cuda_with, pipelined_applies, reload_settings, tensor_core_applies,
    tiled_applies, tiled_ws_applies, workspace_bytes_with, DeviceBuffers, KernelChoice, Workspace,
    CLUSTER_MERGE_ENV_VAR, DECODE_APART_ENV_VAR, KEY_ROWS_ENV_VAR, MERGE_COST_KEYS_ENV_VAR, MERGE_MODE_ENV_VAR,
    MIN_SPLIT_TILES_ENV_VAR, PIPE_MODE_ENV_VAR, PIPE_STAGES_ENV_VAR, PROGRAMMATIC_LAUNCH_ENV_VAR,
};
use xla_gpu_kernels::host::ops::simple_add::SimpleAdd;
use xla_gpu_kernels::host::runtime::{launch_count, KernelImages, KernelModule, PtxImage};
use xla_gpu_kernels::host::DType;
use xla_gpu_kernels::KERNELS;

/// Every how many generated cases a run keeps: `XGK_GPU_CASES_PERCENT` (default 100) shrinks the
/// case lists evenly, keeping their variety (scripts/sanitize.sh runs the suite under every
/// compute-sanitizer tool at a fraction of the cases).
fn case_stride() -> usize {
    let percent: usize =
        std::env::var("XGK_GPU_CASES_PERCENT").ok().and_then(|v| v.parse().ok()).unwrap_or(100).clamp(1, 100);
    100 / percent
}

fn gpu() -> Arc<CudaStream> {
    let ctx = CudaContext::new(0).expect("a CUDA GPU (these tests are ignored without one)");
    // A non-default stream, as XLA would hand us.
    ctx.new_stream().unwrap()
}

struct Dev<T> {
    buf: CudaSlice<T>,
}

impl<T: cudarc::driver::DeviceRepr> Dev<T> {
    fn from(stream: &Arc<CudaStream>, host: &[T]) -> Self {
        Dev { buf: stream.clone_htod(host).unwrap() }
    }
    fn ptr(&self, stream: &Arc<CudaStream>) -> *mut c_void {
        let (p, _sync) = self.buf.device_ptr(stream);
        p as *mut c_void
    }
}

/// A case's KV pool and metadata on the device; the q, output and workspace of a call vary.
struct CaseInputs {
    kv: Dev<u8>,
    kv_lens: Dev<i32>,
    page_indices: Dev<i32>,
    cu_q_lens: Dev<i32>,
    num_seqs: Dev<i32>,
}

impl CaseInputs {
    fn upload(stream: &Arc<CudaStream>, case: &Case) -> Self {
        CaseInputs {
            kv: Dev::from(stream, &case.kv),
            kv_lens: Dev::from(stream, &case.kv_lens),
            page_indices: Dev::from(stream, &case.page_indices),
            cu_q_lens: Dev::from(stream, &case.cu_q_lens),
            num_seqs: Dev::from(stream, &[case.num_seqs]),
        }
    }

    /// The launch's buffers with q `q`, output `out` and `workspace`.
    fn buffers(&self, stream: &Arc<CudaStream>, q: &Dev<u8>, out: &Dev<u8>, workspace: Workspace) -> DeviceBuffers {
        DeviceBuffers {
            q: q.ptr(stream),
            kv_pages: self.kv.ptr(stream),
            kv_lens: self.kv_lens.ptr(stream),
            page_indices: self.page_indices.ptr(stream),
            cu_q_lens: self.cu_q_lens.ptr(stream),
            num_seqs: self.num_seqs.ptr(stream),
            out: out.ptr(stream),
            workspace,
        }
    }
}

/// The kernels that apply to a case: always the general one, and the tensor-core, pipelined and
/// tiled ones where they apply (every device these tests run on is sm_80+), with the Hopper tile
/// kernels (wgmma, warp-specialized) where device 0 loaded the sm_90a image.
fn kernels_for(case: &Case) -> Vec<KernelChoice> {
    let mut k = vec![KernelChoice::General];
    if tensor_core_applies(&case.spec(), 90) {
        k.push(KernelChoice::TensorCore);
    }
    if pipelined_applies(&case.spec(), 90) {
        k.push(KernelChoice::Pipelined);
    }
    if tiled_applies(&case.spec(), 90) {
        k.push(KernelChoice::Tiled);
        if KERNELS.for_device(0).is_ok_and(|m| m.image.has_wgmma()) {
            k.push(KernelChoice::TiledWgmma);
            if tiled_ws_applies(&case.spec(), 90) {
                k.push(KernelChoice::TiledWarpSpecialized);
            }
        }
    }
    k
}

/// Where a test call's temporary memory comes from.
#[derive(Clone, Copy, Debug)]
enum WorkspaceMode {
    /// The driver's pool, per call.
    Allocate,
    /// A poisoned buffer of exactly `workspace_bytes_with` bytes (what XLA and torch pass).
    Exact,
    /// A buffer of this fraction (in percent) of the exact size: the launch must shrink its
    /// splits (or leave the tiled kernel) and still be right.
    Percent(usize),
}

/// Runs the kernel on a NaN-poisoned output with a workspace sized as XLA sizes it; returns the
/// output bytes.
fn run_gpu(stream: &Arc<CudaStream>, case: &Case, kernel: KernelChoice) -> Vec<u8> {
    run_gpu_with(stream, case, kernel, WorkspaceMode::Exact)
}

/// [`run_gpu`] with the workspace from `mode`.
fn run_gpu_with(stream: &Arc<CudaStream>, case: &Case, kernel: KernelChoice, mode: WorkspaceMode) -> Vec<u8> {
    run_gpu_on(&KERNELS, stream, case, kernel, mode, 1)
}

/// [`run_gpu_with`] through `module`, launching the op `calls` times back to back on the same
/// buffers (no sync between: programmatic launches of one call overlap the previous call's tail).
fn run_gpu_on(
    module: &KernelModule,
    stream: &Arc<CudaStream>,
    case: &Case,
    kernel: KernelChoice,
    mode: WorkspaceMode,
    calls: usize,
) -> Vec<u8> {
    let inputs = CaseInputs::upload(stream, case);
    let q = Dev::from(stream, &case.q);
    let out = Dev::from(stream, &vec![0xFFu8; case.out_bytes()]);
    let exact = workspace_bytes_with(module, 0, &case.spec(), kernel).unwrap();
    let bytes = match mode {
        WorkspaceMode::Allocate => 0,
        WorkspaceMode::Exact => exact,
        WorkspaceMode::Percent(p) => exact * p / 100,
    };
    let ws = Dev::from(stream, &vec![0xFFu8; bytes.max(1)]);
    let workspace = match mode {
        WorkspaceMode::Allocate => Workspace::Allocate,
        _ => Workspace::Given { ptr: ws.ptr(stream) as u64, bytes },
    };
    let bufs = inputs.buffers(stream, &q, &out, workspace);
    for _ in 0..calls {
        unsafe { launch_cuda_with(module, stream.cu_stream(), &case.spec(), bufs, kernel) }.unwrap();
    }
    stream.synchronize().unwrap();
    stream.clone_dtoh(&out.buf).unwrap()
}

/// Replays `graph` (one call captured on `inputs`' buffers, writing `out`) with each metadata set
/// of `sets` written into those buffers (KV lengths, page tables, `cu_q_lens`): once alone (a
/// stale plan, or a state word or counter left set, would show there), then twice back to back
/// with no sync between; each against the CPU. Returns the replays.
fn replay_with_new_metadata(
    stream: &Arc<CudaStream>,
    graph: &cudarc::driver::CudaGraph,
    inputs: &mut CaseInputs,
    out: &mut Dev<u8>,
    sets: &[(&str, &Case)],
    what: &str,
) -> usize {
    let mut replays = 0;
    for &(name, case) in sets {
        stream.memcpy_htod(&case.kv_lens, &mut inputs.kv_lens.buf).unwrap();
        stream.memcpy_htod(&case.page_indices, &mut inputs.page_indices.buf).unwrap();
        stream.memcpy_htod(&case.cu_q_lens, &mut inputs.cu_q_lens.buf).unwrap();
        let cpu = case.cpu_output();
        for launches in [1, 2] {
            stream.memcpy_htod(&vec![0xFFu8; case.out_bytes()], &mut out.buf).unwrap();
            for _ in 0..launches {
                graph.launch().unwrap();
            }
            stream.synchronize().unwrap();
            let got = stream.clone_dtoh(&out.buf).unwrap();
            compare(case, &got, &cpu, &format!("{what} replay, {name}, {launches} launch(es)"));
            replays += launches;
        }
    }
    replays
}

/// Two direct calls (fresh launch tags) of `base`, whose metadata the buffers of `bufs` hold, on
/// the workspace that graph replays used, against the CPU.
fn direct_calls_after_replays(
    stream: &Arc<CudaStream>,
    base: &Case,
    bufs: DeviceBuffers,
    kernel: KernelChoice,
    out: &mut Dev<u8>,
    what: &str,
) {
    stream.memcpy_htod(&vec![0xFFu8; base.out_bytes()], &mut out.buf).unwrap();
    for _ in 0..2 {
        unsafe { launch_cuda_with(&KERNELS, stream.cu_stream(), &base.spec(), bufs, kernel) }.unwrap();
    }
    stream.synchronize().unwrap();
    let direct = stream.clone_dtoh(&out.buf).unwrap();
    compare(base, &direct, &base.cpu_output(), &format!("{what}: direct calls after the replays"));
}

/// A module store holding only the portable PTX image (sm_80; its kernels JIT-compiled one by one
/// on first use), beside [`KERNELS`] (which loads the sm_90a cubin on Hopper).
fn portable_kernels() -> &'static KernelModule {
    static PORTABLE: OnceLock<KernelModule> = OnceLock::new();
    PORTABLE.get_or_init(|| {
        let images: Vec<PtxImage> =
            xla_gpu_kernels::PTX_IMAGES.iter().filter(|i| !i.has_grid_dependency_control()).copied().collect();
        KernelModule::new(KernelImages { ptx: Box::leak(images.into_boxed_slice()), cubins: &[] })
    })
}

/// Runs `f` with the launch setting `var` set to `value` (the process settings, read from the
/// environment; the GPU tests run one at a time, `--test-threads=1`), restoring the previous value
/// after, also when `f` panics.
fn with_setting<R>(var: &'static str, value: &str, f: impl FnOnce() -> R) -> R {
    struct Restore(&'static str, Option<String>);
    impl Drop for Restore {
        fn drop(&mut self) {
            match &self.1 {
                Some(v) => std::env::set_var(self.0, v),
                None => std::env::remove_var(self.0),
            }
            let _ = reload_settings();
        }
    }
    let _restore = Restore(var, std::env::var(var).ok());
    std::env::set_var(var, value);
    reload_settings().unwrap();
    f()
}

/// Runs `f` with programmatic dependent launch switched on or off.
fn with_programmatic_launch<R>(on: bool, f: impl FnOnce() -> R) -> R {
    with_setting(PROGRAMMATIC_LAUNCH_ENV_VAR, if on { "1" } else { "0" }, f)
}

/// A module store holding only the PTX image of the device's own architecture where the library
/// has one (sm_90a on Hopper), else the portable one: the kernels the cubin holds, JIT-compiled
/// one by one on first use.
fn device_ptx_kernels() -> &'static KernelModule {
    static DEVICE_PTX: OnceLock<KernelModule> = OnceLock::new();
    DEVICE_PTX.get_or_init(|| KernelModule::new(KernelImages { ptx: xla_gpu_kernels::PTX_IMAGES, cubins: &[] }))
}
