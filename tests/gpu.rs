//! GPU tests: the kernels against the CPU implementation (itself checked against a float64 oracle
//! and JAX's reference), with fresh random inputs and poisoned outputs. They need a CUDA GPU and
//! are ignored otherwise; run them with `cargo test --release --test gpu -- --include-ignored`
//! (scripts/gpu_check.sh does, on the lent GPU machine).

mod common;

use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

use common::*;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use kernels_gpu::kernels::decode::pipelined::{pipelined_shared_bytes, pipelined_tile_keys};
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

#[test]
#[ignore = "needs a CUDA GPU"]
fn simple_add_matches_cpu_for_every_dtype_size_and_alignment() {
    let stream = gpu();
    let mut rng = seeded_rng();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let elem = dtype.size_bytes().unwrap();
        for n in [1usize, 3, 17, 255, 1000, 4097, (1 << 20) + 5, 10_000_019] {
            for offset in [0usize, 1] {
                let vals =
                    |rng: &mut StdRng| encode(dtype, &(0..n + 1).map(|_| rng.gen_range(-1e3..1e3)).collect::<Vec<_>>());
                let (a, b) = (vals(&mut rng), vals(&mut rng));
                let (da, db) = (Dev::from(&stream, &a), Dev::from(&stream, &b));
                let dout = Dev::from(&stream, &vec![0xFFu8; (n + 1) * elem]); // NaN-poisoned
                let off = |p: *mut c_void| unsafe { (p as *mut u8).add(offset * elem) as *mut c_void };
                let op = SimpleAdd { dtype, len: n };
                unsafe {
                    op.launch_cuda(
                        &KERNELS,
                        stream.cu_stream(),
                        off(da.ptr(&stream)),
                        off(db.ptr(&stream)),
                        off(dout.ptr(&stream)),
                    )
                }
                .unwrap();
                let got = stream.clone_dtoh(&dout.buf).unwrap();
                let mut want = vec![0u8; n * elem];
                op.run_cpu(&a[offset * elem..], &b[offset * elem..], &mut want).unwrap();
                assert_eq!(&got[offset * elem..(offset + n) * elem], &want[..], "{dtype} n={n} offset={offset}");
                // Elements outside [offset, offset + n) stay poisoned.
                let untouched = if offset == 0 { &got[n * elem..] } else { &got[..elem] };
                assert!(untouched.iter().all(|&x| x == 0xFF), "{dtype} n={n}: wrote outside the range");
            }
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

#[test]
#[ignore = "needs a CUDA GPU"]
fn paged_attention_matches_cpu_over_the_feature_matrix() {
    let stream = gpu();
    let mut rng = seeded_rng();
    let dtypes = [
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
        (DType::BF16, DType::BF16),
        (DType::F32, DType::F8E4M3FN),
        (DType::F16, DType::F8E4M3FN),
        (DType::BF16, DType::F8E4M3FN),
        (DType::F32, DType::F8E5M2),
        (DType::F16, DType::F8E5M2),
        (DType::BF16, DType::F8E5M2),
    ];
    let head_dims = [64, 80, 96, 112, 128, 192, 256];
    let page_sizes = [1, 2, 8, 16, 32, 64, 128, 256];
    let heads = [(1, 1), (2, 4), (1, 8), (4, 1), (2, 16), (8, 4)]; // (kv heads, group): MHA, GQA, MQA
    let mut worst = std::collections::BTreeMap::<String, f64>::new();
    let mut count = 0;
    for i in (0..2 * dtypes.len() * head_dims.len()).step_by(case_stride()) {
        let (q_dtype, kv_dtype) = dtypes[i % dtypes.len()];
        let head_dim = head_dims[(i / dtypes.len()) % head_dims.len()];
        let page_size = page_sizes[i % page_sizes.len()];
        let (nkv, group) = heads[i % heads.len()];
        // Ragged mix: decode, prefill, chunked prefill; some long enough to split the keys.
        let seqs: Vec<(usize, usize)> = (0..rng.gen_range(1..5))
            .map(|_| {
                let kv_len = if rng.gen_bool(0.2) { rng.gen_range(1000..5000) } else { rng.gen_range(1..300) };
                let q_len = match rng.gen_range(0..3) {
                    0 => 1,
                    1 => kv_len.min(64),
                    _ => rng.gen_range(1..=kv_len.min(40)),
                };
                (q_len, kv_len)
            })
            .collect();
        let pad = rng.gen_range(0..5);
        let mut case = random_case(&mut rng, q_dtype, kv_dtype, head_dim, nkv, group, page_size, &seqs, pad);
        match i % 5 {
            1 => case.sliding_window = Some(rng.gen_range(1..200)),
            2 => case.soft_cap = Some(biting_cap(&case, &mut rng)),
            3 => case.mask_value = Some(-2.0),
            4 => {
                case.sliding_window = Some(rng.gen_range(1..64));
                case.soft_cap = Some(biting_cap(&case, &mut rng));
            }
            _ => {}
        }
        if kv_dtype == q_dtype && i % 7 == 0 {
            case.k_scale = Some(0.5);
            case.v_scale = Some(2.0);
        }
        let cpu = case.cpu_output();
        for kernel in kernels_for(&case) {
            let label = format!(
                "case {i} {kernel:?}: {q_dtype}/{kv_dtype} d{head_dim} p{page_size} kv{nkv}x{group} seqs {seqs:?}"
            );
            let err = compare(&case, &run_gpu(&stream, &case, kernel), &cpu, &label);
            let w = worst.entry(format!("{kernel:?} {q_dtype}/{kv_dtype}")).or_insert(0.0);
            *w = w.max(err);
            count += 1;
        }
    }
    for (k, v) in &worst {
        println!("worst row-relative |gpu - cpu| {k}: {v:.3e}");
    }
    println!("{count} feature-matrix kernel runs passed");
}

/// The pipelined kernel over what it covers (f16/bf16 q; KV of q's dtype, head_dim 64/128/256, or
/// fp8, head_dim 64/128): decode, prefill and
/// chunked rows, every page size, MHA/GQA/MQA, windows, soft caps, custom mask values, and
/// contexts long enough to split (split and tile boundaries anywhere, invalid-free pages only).
fn check_pipelined_cases(cases: usize, long_contexts: bool) {
    let stream = gpu();
    let mut rng = seeded_rng();
    let page_sizes = [1, 3, 8, 16, 32, 64, 128, 256];
    let heads = [(1, 1), (2, 4), (1, 8), (4, 1), (2, 16), (8, 4), (1, 32)];
    let mut worst = 0.0f64;
    let mut count = 0;
    let mut key_row_runs = 0;
    for i in (0..cases).step_by(case_stride()) {
        let q_dtype = if i % 2 == 0 { DType::BF16 } else { DType::F16 };
        let head_dim = [64, 128, 256][i % 3];
        let page_size = page_sizes[i % page_sizes.len()];
        let (nkv, group) = heads[i % heads.len()];
        let seqs: Vec<(usize, usize)> = (0..rng.gen_range(1..6))
            .map(|_| {
                let kv_len = match rng.gen_range(0..if long_contexts { 4 } else { 2 }) {
                    0 => rng.gen_range(1..65),
                    1 => rng.gen_range(65..700),
                    2 => rng.gen_range(700..6000),
                    _ => rng.gen_range(6000..20000),
                };
                let q_len = match rng.gen_range(0..4) {
                    0 | 1 => 1,
                    2 => kv_len.min(24),
                    _ => rng.gen_range(1..=kv_len.min(8)),
                };
                // Bounds the CPU reference's work on long contexts.
                (if kv_len > 2000 { q_len.min(2) } else { q_len }, kv_len)
            })
            .collect();
        let pad = rng.gen_range(0..3);
        // Every third case on fp8 KV (both formats), scaled or not.
        let kv_dtype = match i % 9 {
            1 | 4 => DType::F8E4M3FN,
            7 => DType::F8E5M2,
            _ => q_dtype, // every head_dim-256 case (fp8 KV stops at 128)
        };
        let mut case = random_case(&mut rng, q_dtype, kv_dtype, head_dim, nkv, group, page_size, &seqs, pad);
        if kv_dtype != q_dtype && i % 2 == 0 {
            case.k_scale = Some(rng.gen_range(0.1..2.0));
            case.v_scale = Some(rng.gen_range(0.1..2.0));
        }
        if kv_dtype != q_dtype && i < 18 && i % 2 == 1 {
            // Every finite byte value in K (the packed conversions' full exponent range, subnormals
            // to the largest), with sm_scale shrunk to keep the logits moderate. V stays moderate:
            // a full-range V cancels catastrophically in the weighted sum, in any implementation.
            let e4m3 = kv_dtype == DType::F8E4M3FN;
            let row = head_dim;
            for (r, chunk) in case.kv.chunks_mut(row).enumerate() {
                if (r % (2 * nkv)) % 2 == 0 {
                    chunk.iter_mut().for_each(|b| *b = random_fp8(&mut rng, e4m3, f64::INFINITY));
                }
            }
            case.sm_scale = if e4m3 { 0.05 / 448.0 } else { 0.05 / 57344.0 };
        }
        match i % 6 {
            1 => case.sliding_window = Some(rng.gen_range(1..3000)),
            2 => case.soft_cap = Some(biting_cap(&case, &mut rng)),
            3 => case.mask_value = Some(-2.0),
            4 => {
                case.sliding_window = Some(rng.gen_range(1..100));
                case.soft_cap = Some(biting_cap(&case, &mut rng));
            }
            _ => {}
        }
        assert!(pipelined_applies(&case.spec(), 90));
        let want = case.cpu_output();
        // Both layouts where the key-rows one applies (GQA groups up to 8, head_dim 64 / 128).
        let layouts: &[&str] = if key_rows_applies(&case.spec()) { &["0", "2"] } else { &["0"] };
        for &key_rows in layouts {
            let label = format!(
                "case {i}: {q_dtype}/{kv_dtype} d{head_dim} p{page_size} kv{nkv}x{group} key rows {key_rows} seqs {seqs:?}"
            );
            let got = with_setting(KEY_ROWS_ENV_VAR, key_rows, || run_gpu(&stream, &case, KernelChoice::Pipelined));
            worst = worst.max(compare(&case, &got, &want, &label));
            count += 1;
            key_row_runs += (key_rows == "2") as usize;
        }
    }
    println!("worst row-relative |gpu - cpu| Pipelined ({cases} cases): {worst:.3e}");
    println!("{count} pipelined-kernel runs passed ({key_row_runs} in the key-rows layout)");
    assert!(key_row_runs > 0, "some case takes the key-rows layout");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn pipelined_kernel_matches_cpu() {
    check_pipelined_cases(48, true);
}

/// Every stage count of the pipelined kernel's K/V ring (`XGK_RPA_STAGES` 2 to 8, where the
/// device's shared memory holds it), with a block barrier per tile and with per-key-group
/// pipelines (`XGK_RPA_PIPE_MODE` 0 and 1), gives the CPU's answer: 16-bit and fp8 KV at head_dim
/// 64 and 128, head_dim 256 (32-key tiles: two warps per key group), splits of fewer tiles than
/// the ring has stages and of many more, back-to-back calls on the same buffers.
#[test]
#[ignore = "needs a CUDA GPU"]
fn pipelined_stage_counts_match_cpu() {
    let stream = gpu();
    let mut rng = seeded_rng();
    let seqs: &[(usize, usize)] = &[(1, 5000), (1, 130), (2, 700), (1, 1)];
    let cases = [
        random_case(&mut rng, DType::BF16, DType::BF16, 128, 2, 4, 16, seqs, 1),
        random_case(&mut rng, DType::BF16, DType::F8E4M3FN, 128, 2, 4, 16, seqs, 0),
        random_case(&mut rng, DType::F16, DType::F8E5M2, 64, 1, 8, 32, seqs, 1),
        random_case(&mut rng, DType::F16, DType::F16, 64, 2, 2, 8, seqs, 0),
        random_case(&mut rng, DType::BF16, DType::BF16, 256, 1, 2, 16, &[(1, 3000), (1, 70)], 0),
    ];
    let wants: Vec<_> = cases.iter().map(|c| c.cpu_output()).collect();
    let scales: Vec<_> = cases.iter().map(value_scale).collect();
    let mut runs = 0;
    for (stages, mode) in (2..=8u32).flat_map(|s| [(s, "0"), (s, "1")]) {
        for (i, case) in cases.iter().enumerate() {
            let label = format!(
                "stages {stages}, pipe mode {mode}, case {i}: {}/{} d{}",
                case.q_dtype, case.kv_dtype, case.head_dim
            );
            let head_dim = case.head_dim as u32;
            let kv_bytes = if case.kv_dtype == case.q_dtype { 2 } else { 1 };
            let tile = pipelined_tile_keys(head_dim);
            if pipelined_shared_bytes(head_dim, kv_bytes, tile, stages) > 227 * 1024 {
                continue;
            }
            // Both layouts where the key-rows one applies; call 1 in the other one.
            let key_rows = if key_rows_applies(&case.spec()) { ["0", "2"] } else { ["0", "0"] };
            with_setting(PIPE_STAGES_ENV_VAR, &stages.to_string(), || {
                with_setting(PIPE_MODE_ENV_VAR, mode, || {
                    for (call, layout) in key_rows.into_iter().enumerate() {
                        let got =
                            with_setting(KEY_ROWS_ENV_VAR, layout, || run_gpu(&stream, case, KernelChoice::Pipelined));
                        let label = format!("{label}, call {call}, key rows {layout}");
                        compare_scaled(case, &got, &wants[i], &label, scales[i]);
                    }
                })
            });
            runs += 1;
        }
    }
    println!("{runs} (stage count, pipe mode, case) runs passed");
    assert!(runs >= 66, "every 16-bit and fp8 case at every stage count from 2 to 8, in both pipe modes");
}

/// The pipelined kernel's two ways of merging its splits give the CPU's answer: in thread-block
/// clusters through distributed shared memory (sm_90 image; forced by pricing the merge kernel
/// out of the split model, and checked to be taken: such a plan needs no workspace) and through
/// partials in global memory, merged by the merge kernels (the loop and the group one) or in the
/// kernel by its merge blocks, whose counters start from the poisoned
/// workspace (`XGK_RPA_CLUSTER_MERGE=0`, `XGK_RPA_MERGE_MODE`, and the portable image). Split counts 2 to
/// 16 (more with the merge priced at nothing), 16-bit and fp8 KV, head_dim 64/128/256, GQA, MHA
/// and MQA groups, windows and soft caps, two calls back to back on the same buffers. Small enough for the
/// sanitizers (scripts/gpu_check.sh).
#[test]
#[ignore = "needs a CUDA GPU"]
fn pipelined_cluster_and_kernel_merges_match_cpu() {
    let stream = gpu();
    let mut rng = seeded_rng();
    let mut cases = Vec::new();
    for i in 0..12 {
        let (q_dtype, kv_dtype, head_dim) = match i % 4 {
            0 => (DType::BF16, DType::BF16, 128),
            1 => (DType::F16, DType::F16, 64),
            2 => (DType::BF16, DType::F8E4M3FN, 128),
            _ => (DType::BF16, DType::BF16, 256),
        };
        // At most 8 (row, head chunk) clusters (4 rows at most): every cluster of the grid runs at
        // once on a Hopper GPU, the condition for the cluster merge.
        let (nkv, group) = [(2, 4), (1, 8), (2, 1), (1, 32)][i % 4];
        // One long sequence (splits up to 16) beside shorter ones (splits past their end).
        let seqs = vec![(1, rng.gen_range(1500..4000)), (1, rng.gen_range(1..300)), (1, 64 * (i + 1))];
        let mut case = random_case(&mut rng, q_dtype, kv_dtype, head_dim, nkv, group, [16, 8, 32][i % 3], &seqs, i % 2);
        match i % 3 {
            // Windows of 1000 keys at least: every case splits.
            1 => case.sliding_window = Some(rng.gen_range(1000..2000)),
            2 => case.soft_cap = Some(biting_cap(&case, &mut rng)),
            _ => {}
        }
        cases.push(case);
    }
    let wants: Vec<_> = cases.iter().map(|c| c.cpu_output()).collect();
    let module = KERNELS.for_device(0).unwrap();
    let hopper = module.image.has_clusters();
    if hopper {
        let (name, shared) = ("rpa_pipe_bf16_bf16_d128", pipelined_shared_bytes(128, 2, 64, 3));
        let active: Vec<_> =
            [2, 4, 8, 16].iter().map(|&n| (n, module.active_clusters(name, 128, shared, n).unwrap())).collect();
        println!("active clusters (size, clusters) of {name} with 3 stages: {active:?}");
    }
    let mut clustered = 0;
    // Merge modes: "0" by split count, "1" the loop kernel, "2" the group kernel, "3" in the
    // kernel's merge blocks (with the merge priced at nothing, for the most splits: several rounds
    // of the group merge's loads at head_dim 256); "" the default, merge blocks for these direct
    // calls.
    let modes = [
        ("1", "65536", ""),
        ("1", "", ""),
        ("0", "", "0"),
        ("0", "", ""),
        ("0", "", "1"),
        ("0", "", "2"),
        ("0", "0", "2"),
        ("0", "", "3"),
        ("0", "0", "3"),
    ];
    // Each mode in both layouts (the key-rows one where it applies: GQA groups up to 8, head_dim
    // 64 / 128).
    for (cluster, merge_cost, merge_mode, key_rows) in
        modes.iter().flat_map(|&(c, m, k)| [(c, m, k, "0"), (c, m, k, "2")])
    {
        with_setting(KEY_ROWS_ENV_VAR, key_rows, || {
            with_setting(CLUSTER_MERGE_ENV_VAR, cluster, || {
                with_setting(MERGE_COST_KEYS_ENV_VAR, merge_cost, || {
                    with_setting(MERGE_MODE_ENV_VAR, merge_mode, || {
                        for (i, case) in cases.iter().enumerate() {
                            let label = format!(
                            "cluster merge {cluster}, merge cost {merge_cost:?}, merge mode {merge_mode:?}, key rows \
                             {key_rows}, case {i}"
                        );
                            let workspace =
                                workspace_bytes_with(&KERNELS, 0, &case.spec(), KernelChoice::Pipelined).unwrap();
                            if cluster == "0" || !hopper {
                                assert!(workspace > 0, "{label}: the merge kernel's partials need a workspace");
                            } else if merge_cost == "65536" {
                                assert_eq!(workspace, 0, "{label}: splits merged in clusters need no workspace");
                                clustered += 1;
                            }
                            let got =
                                run_gpu_on(&KERNELS, &stream, case, KernelChoice::Pipelined, WorkspaceMode::Exact, 2);
                            compare(case, &got, &wants[i], &label);
                        }
                    })
                })
            })
        });
    }
    for case in &cases[..4] {
        let got = run_gpu_on(portable_kernels(), &stream, case, KernelChoice::Pipelined, WorkspaceMode::Exact, 1);
        compare(case, &got, &case.cpu_output(), "portable image");
    }
    println!("cluster-merged cases: {clustered} (Hopper: {hopper})");
    assert!(!hopper || clustered == 2 * cases.len());
}

/// Short contexts only, every variant of the pipelined kernel: small enough to run under
/// compute-sanitizer's racecheck and synccheck (scripts/gpu_check.sh).
#[test]
#[ignore = "needs a CUDA GPU"]
fn pipelined_kernel_small_cases() {
    check_pipelined_cases(18, false);
}

/// The tiled kernel over what it covers (f16/bf16 q and KV, head_dim 64/128 (and 256 for the
/// warp-specialized one), groups up to 64):
/// prefills of hundreds of rows (many query tiles, causal diagonal inside and across key tiles),
/// chunked prefill over longer contexts, decode and few-row (short-item) sequences in the same
/// batch, padding rows, every page size, windows, soft caps and custom mask values.
fn check_tiled_cases(cases: usize, big: bool) {
    check_tiled_cases_with(KernelChoice::Tiled, cases, big)
}

fn check_tiled_cases_with(kernel: KernelChoice, cases: usize, big: bool) {
    let stream = gpu();
    let mut rng = seeded_rng();
    // The warp-specialized kernel's bulk copies move 16-key blocks of a page.
    let page_sizes: &[usize] = if kernel == KernelChoice::TiledWarpSpecialized {
        &[16, 32, 64, 128, 256, 48]
    } else {
        &[1, 3, 8, 16, 32, 64, 128, 256]
    };
    let heads = [(1, 1), (2, 4), (1, 8), (4, 1), (2, 16), (8, 4), (1, 32), (1, 64), (2, 3)];
    let mut worst = 0.0f64;
    let mut fp8_cases = 0;
    for i in (0..cases).step_by(case_stride()) {
        let q_dtype = if i % 2 == 0 { DType::BF16 } else { DType::F16 };
        // The warp-specialized kernel also takes head_dim 256 (64-key tiles).
        let head_dim = if kernel == KernelChoice::TiledWarpSpecialized {
            [128, 64, 256][(i / 2) % 3]
        } else {
            [128, 64][(i / 2) % 2]
        };
        let page_size = page_sizes[i % page_sizes.len()];
        let (nkv, group) = heads[i % heads.len()];
        let max_rows = if big { 200 } else { 90 };
        let seqs: Vec<(usize, usize)> = (0..rng.gen_range(1..5))
            .map(|_| match rng.gen_range(0..5) {
                0 => (1, rng.gen_range(1..3000)),                  // decode
                1 => (rng.gen_range(2..5), rng.gen_range(4..600)), // speculative rows
                2 => {
                    let q = rng.gen_range(1..max_rows); // whole prefill
                    (q, q)
                }
                3 => (rng.gen_range(1..max_rows), rng.gen_range(max_rows..2 * max_rows + 300)), // chunk
                _ => (rng.gen_range(17..80), rng.gen_range(80..300)),
            })
            .collect();
        let pad = rng.gen_range(0..70);
        // The warp-specialized kernel also takes fp8 KV at head dims 64 and 128: cases 0-2 of
        // every 12 (bf16 and f16 q, both head dims; e4m3, then e5m2 every other 12), scaled or
        // with every finite byte value in K.
        let ws = kernel == KernelChoice::TiledWarpSpecialized;
        let kv_dtype =
            if ws && head_dim != 256 && i % 12 < 3 { [DType::F8E4M3FN, DType::F8E5M2][(i / 12) % 2] } else { q_dtype };
        let mut case = random_case(&mut rng, q_dtype, kv_dtype, head_dim, nkv, group, page_size, &seqs, pad);
        if kv_dtype != q_dtype {
            if (i / 3) % 2 == 0 {
                case.k_scale = Some(rng.gen_range(0.1..2.0));
                case.v_scale = Some(rng.gen_range(0.1..2.0));
            } else {
                // Every finite byte value in K, with sm_scale shrunk to keep the logits moderate.
                let e4m3 = kv_dtype == DType::F8E4M3FN;
                for (r, chunk) in case.kv.chunks_mut(head_dim).enumerate() {
                    if (r % (2 * nkv)) % 2 == 0 {
                        chunk.iter_mut().for_each(|b| *b = random_fp8(&mut rng, e4m3, f64::INFINITY));
                    }
                }
                case.sm_scale = if e4m3 { 0.05 / 448.0 } else { 0.05 / 57344.0 };
            }
        }
        match i % 6 {
            1 => case.sliding_window = Some(rng.gen_range(1..300)),
            2 => case.soft_cap = Some(biting_cap(&case, &mut rng)),
            3 => case.mask_value = Some(-2.0),
            4 => {
                case.sliding_window = Some(rng.gen_range(1..100));
                case.soft_cap = Some(biting_cap(&case, &mut rng));
            }
            _ => {}
        }
        if kernel == KernelChoice::TiledWarpSpecialized {
            assert!(tiled_ws_applies(&case.spec(), 90));
        } else {
            assert!(tiled_applies(&case.spec(), 90));
        }
        let label =
            format!("case {i}: {q_dtype}/{kv_dtype} d{head_dim} p{page_size} kv{nkv}x{group} pad {pad} seqs {seqs:?}");
        let err = compare(&case, &run_gpu(&stream, &case, kernel), &case.cpu_output(), &label);
        worst = worst.max(err);
        fp8_cases += (kv_dtype != q_dtype) as usize;
    }
    let all_cases = case_stride() == 1 && cases >= 12;
    assert!(kernel != KernelChoice::TiledWarpSpecialized || !all_cases || fp8_cases > 0, "some case runs fp8 KV");
    println!("worst row-relative |gpu - cpu| {kernel:?} ({cases} cases): {worst:.3e}");
    println!("{} {kernel:?} cases passed ({fp8_cases} with fp8 KV)", cases.div_ceil(case_stride()));
}

/// The warpgroup-MMA tiled kernel (sm_90a image, explicit `tiled-wgmma`) over the tiled kernel's
/// case generator: every dtype, head dim, page size, GQA group, window, soft cap and mask value.
#[test]
#[ignore = "needs a CUDA GPU"]
fn tiled_wgmma_kernel_matches_cpu() {
    let image = KERNELS.for_device(0).map(|m| m.image.arch);
    assert_eq!(image.ok(), Some("sm_90a"), "tiled-wgmma needs the sm_90a image (a Hopper GPU)");
    check_tiled_cases_with(KernelChoice::TiledWgmma, 36, true);
}

/// The warp-specialized tile kernel (sm_90a image, explicit `tiled-ws`) over the same cases.
#[test]
#[ignore = "needs a CUDA GPU"]
fn tiled_ws_kernel_matches_cpu() {
    let image = KERNELS.for_device(0).map(|m| m.image.arch);
    assert_eq!(image.ok(), Some("sm_90a"), "tiled-ws needs the sm_90a image (a Hopper GPU)");
    check_tiled_cases_with(KernelChoice::TiledWarpSpecialized, 54, true);
}

/// Small cases of the warp-specialized kernel, for compute-sanitizer's racecheck and synccheck
/// (its mbarrier rings are shared-memory handshakes between warpgroups).
#[test]
#[ignore = "needs a CUDA GPU"]
fn tiled_ws_kernel_small_cases() {
    let image = KERNELS.for_device(0).map(|m| m.image.arch);
    assert_eq!(image.ok(), Some("sm_90a"), "tiled-ws needs the sm_90a image (a Hopper GPU)");
    check_tiled_cases_with(KernelChoice::TiledWarpSpecialized, 24, false);
}

/// The warp-specialized kernel at head dims 64 and 128 plans in its first block, under a launch tag
/// that a captured CUDA graph replays unchanged: every launch must leave the plan's state word free
/// for the next. Likewise a mixed batch's decode rows apart (Auto), where the tile kernel's block 0
/// plans once the decode kernel's first block has published the inputs word under the tag, and the
/// tile kernel does not wait for the decode kernel between (`XGK_RPA_DECODE_APART=2`; with
/// `XGK_WS_PERSISTENT=0` the planning kernel publishes the plan). One call captured in a graph,
/// then replayed once, and twice back to back (no sync between), for each of several metadata sets
/// written into the same buffers: new KV lengths and page tables, new query splits (another plan),
/// a decreasing `cu_q_lens` (the plan's fallback), and the first set again; each against the CPU.
/// Then direct calls on the same workspace (that a mix's tile grid ends after its decode grid: see
/// `programmatic_launches_chained_through_data_match_cpu`). A prefill call is one launch (the
/// library's count), a mix two (decode, tiles: the tile kernel's block 0 plans once the decode
/// kernel's first block says the inputs are written); one more each with `XGK_WS_PERSISTENT=0` (the
/// planning kernel first).
#[test]
#[ignore = "needs a CUDA GPU"]
fn tiled_ws_graph_replays_follow_new_metadata() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let image = KERNELS.for_device(0).map(|m| m.image.arch);
    assert_eq!(image.ok(), Some("sm_90a"), "tiled-ws needs the sm_90a image (a Hopper GPU)");
    let stream = gpu();
    let mut rng = seeded_rng();
    let per_pair = std::env::var("XGK_WS_PERSISTENT").is_ok_and(|v| v.trim() == "0");
    let mut replays = 0;
    /// A call to capture: (head_dim, KV heads, group), the kernel, its sequences (q, kv), another
    /// split of their rows (`cu_q_lens`), padding rows.
    struct Replayed {
        shape: (usize, usize, usize),
        kernel: KernelChoice,
        seqs: &'static [(usize, usize)],
        other_cu: &'static [i32],
        pad: usize,
        /// `XGK_RPA_DECODE_APART=3` (with unsplit decode rows: one launch, `kernels::mix`).
        one_launch: bool,
    }
    const PREFILL: &[(usize, usize)] = &[(150, 400), (90, 90), (40, 700)];
    const MIX: &[(usize, usize)] = &[(30, 400), (1, 3000), (1, 200), (12, 60), (1, 900), (1, 0)];
    let ws = KernelChoice::TiledWarpSpecialized;
    let prefill =
        |shape| Replayed { shape, kernel: ws, seqs: PREFILL, other_cu: &[0, 10, 200, 280], pad: 20, one_launch: false };
    let mix = |shape, one_launch| Replayed {
        shape,
        kernel: KernelChoice::Auto,
        seqs: MIX,
        other_cu: &[0, 1, 2, 32, 33, 45, 46],
        pad: 3,
        one_launch,
    };
    let configs = [
        prefill((128, 2, 4)),
        prefill((64, 1, 8)),
        mix((128, 2, 4), false),
        mix((128, 2, 4), true),
        mix((64, 1, 8), true),
    ];
    for Replayed { shape: (head_dim, nkv, group), kernel, seqs, other_cu, pad, one_launch } in configs {
        let mut config = || {
            let base = random_case(&mut rng, DType::BF16, DType::BF16, head_dim, nkv, group, 16, seqs, pad);
            let spec = base.spec();
            assert!(tiled_ws_applies(&spec, 90));
            let apart = kernel == KernelChoice::Auto;
            if apart {
                let ctx = unsafe { KERNELS.for_stream(stream.cu_stream()) }.unwrap();
                assert!(decode_apart_applies(&ctx, &spec).unwrap(), "the mix runs its decode rows apart");
            }
            // The same shapes with other metadata values (the CPU defines every value).
            let mut other = base.clone();
            let max_kv = seqs.iter().map(|s| s.1).max().unwrap() as i32;
            other.kv_lens = (0..seqs.len()).map(|_| rng.gen_range(1..=max_kv)).collect();
            other.kv_lens.resize(base.max_num_seqs, 0);
            other.page_indices.shuffle(&mut rng);
            other.cu_q_lens = other_cu.to_vec();
            other.cu_q_lens.resize(base.max_num_seqs + 1, *other_cu.last().unwrap());
            let mut decreasing = base.clone();
            decreasing.cu_q_lens.swap(1, 2);
            let mut inputs = CaseInputs::upload(&stream, &base);
            let q = Dev::from(&stream, &base.q);
            let mut out = Dev::from(&stream, &vec![0xFFu8; base.out_bytes()]);
            let bytes = workspace_bytes_with(&KERNELS, 0, &spec, kernel).unwrap();
            let ws = Dev::from(&stream, &vec![0xFFu8; bytes]);
            let bufs = inputs.buffers(&stream, &q, &out, Workspace::Given { ptr: ws.ptr(&stream) as u64, bytes });
            // A call outside the capture resolves and caches the plan (no first-use calls under it).
            // With persistent blocks (the default schedule) a prefill call is one launch; one block
            // per pair launches the planning kernel first.
            let before = launch_count();
            unsafe { launch_cuda_with(&KERNELS, stream.cu_stream(), &spec, bufs, kernel) }.unwrap();
            let launches = if one_launch && !per_pair { 1 } else { 1 + u64::from(apart) + u64::from(per_pair) };
            assert_eq!(launch_count() - before, launches, "launches of one call");
            stream.synchronize().unwrap();
            stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED).unwrap();
            let launched = unsafe { launch_cuda_with(&KERNELS, stream.cu_stream(), &spec, bufs, kernel) };
            let graph = stream.end_capture(CUgraphInstantiate_flags(0)).unwrap().expect("a captured graph");
            launched.unwrap();
            let what = format!(
                "d{head_dim} {}",
                if one_launch {
                    "mix, one launch"
                } else if apart {
                    "mix"
                } else {
                    "prefill"
                }
            );
            let sets = [("base", &base), ("other", &other), ("decreasing", &decreasing), ("base again", &base)];
            replays += replay_with_new_metadata(&stream, &graph, &mut inputs, &mut out, &sets, &what);
            // Direct calls (fresh tags) on the workspace the replays used, the base metadata in place.
            direct_calls_after_replays(&stream, &base, bufs, kernel, &mut out, &what);
        };
        if one_launch {
            // Splits of at least 64 tiles: the decode rows unsplit, so the mix is one launch.
            with_setting(DECODE_APART_ENV_VAR, "3", || with_setting(MIN_SPLIT_TILES_ENV_VAR, "64", &mut config));
        } else {
            // Two launches (a prefill call is one either way).
            with_setting(DECODE_APART_ENV_VAR, "2", &mut config);
        }
    }
    println!("{replays} graph replays passed");
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

/// A split decode call whose splits merge in the pipelined kernel's merge blocks
/// (`XGK_RPA_MERGE_MODE=3`) counts its splits in at counters in the workspace under a launch tag
/// that a captured CUDA graph replays unchanged: each launch must leave them at 0 under the tag for
/// the next. Also the merge kernels' call (mode 0, two launches), and the default (mode unset):
/// merge blocks for a direct call, the merge kernel under capture, on one workspace sized for
/// both. One call captured, then replayed once, and twice back to back (no sync between), for
/// several metadata sets written into the same buffers (new KV lengths and page tables, then the
/// first set again), each against the CPU; then direct calls (fresh tags) on the same workspace.
/// A call with merge blocks is one launch.
#[test]
#[ignore = "needs a CUDA GPU"]
fn split_decode_graph_replays_follow_new_metadata() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let stream = gpu();
    let mut rng = seeded_rng();
    let mut replays = 0;
    const SEQS: &[(usize, usize)] = &[(1, 3000), (1, 200), (1, 1500), (1, 0)];
    for (mode, shape, q_dtype) in [
        ("0", (128, 2, 4), DType::BF16),
        ("", (128, 2, 4), DType::BF16),
        ("", (64, 1, 8), DType::F16),
        ("3", (128, 2, 4), DType::BF16),
        ("3", (64, 1, 8), DType::F16),
        ("3", (128, 1, 16), DType::BF16),
    ] {
        let (head_dim, nkv, group) = shape;
        let base = random_case(&mut rng, q_dtype, q_dtype, head_dim, nkv, group, 16, SEQS, 2);
        let spec = base.spec();
        let mut other = base.clone();
        other.kv_lens = (0..SEQS.len()).map(|_| rng.gen_range(1..=3000)).collect();
        other.kv_lens.resize(base.max_num_seqs, 0);
        other.page_indices.shuffle(&mut rng);
        // Launches of a direct call and of a captured one.
        let (direct_launches, captured_launches) = match mode {
            "0" => (2, 2),
            "" => (1, 2),
            _ => (1, 1),
        };
        with_setting(CLUSTER_MERGE_ENV_VAR, "0", || {
            with_setting(MERGE_MODE_ENV_VAR, mode, || {
                let what = format!("merge mode {mode:?}, d{head_dim} group {group}");
                let kernel = KernelChoice::Pipelined;
                let mut inputs = CaseInputs::upload(&stream, &base);
                let q = Dev::from(&stream, &base.q);
                let mut out = Dev::from(&stream, &vec![0xFFu8; base.out_bytes()]);
                let bytes = workspace_bytes_with(&KERNELS, 0, &spec, kernel).unwrap();
                assert!(bytes > 0, "{what}: the splits leave partials in the workspace");
                let ws = Dev::from(&stream, &vec![0xFFu8; bytes]);
                let bufs = inputs.buffers(&stream, &q, &out, Workspace::Given { ptr: ws.ptr(&stream) as u64, bytes });
                let before = launch_count();
                unsafe { launch_cuda_with(&KERNELS, stream.cu_stream(), &spec, bufs, kernel) }.unwrap();
                assert_eq!(launch_count() - before, direct_launches, "{what}: launches of a direct call");
                stream.synchronize().unwrap();
                stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED).unwrap();
                let before = launch_count();
                let launched = unsafe { launch_cuda_with(&KERNELS, stream.cu_stream(), &spec, bufs, kernel) };
                let captured = launch_count() - before;
                let graph = stream.end_capture(CUgraphInstantiate_flags(0)).unwrap().expect("a captured graph");
                launched.unwrap();
                assert_eq!(captured, captured_launches, "{what}: launches of a captured call");
                let sets = [("base", &base), ("other", &other), ("base again", &base)];
                replays += replay_with_new_metadata(&stream, &graph, &mut inputs, &mut out, &sets, &what);
                direct_calls_after_replays(&stream, &base, bufs, kernel, &mut out, &what);
            })
        });
    }
    println!("{replays} graph replays passed");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tiled_kernel_matches_cpu() {
    check_tiled_cases(27, true);
}

/// Small prefills: every path of the tiled kernel, small enough for compute-sanitizer's racecheck
/// and synccheck (scripts/gpu_check.sh).
#[test]
#[ignore = "needs a CUDA GPU"]
fn tiled_kernel_small_cases() {
    check_tiled_cases(18, false);
}

/// The device planner's two ways of writing a plan, through every tile kernel the image has:
/// more sequences than the planning block has threads (each thread counts and writes a run of
/// them), and one sequence with more tile items than the block has threads (with one sequence per
/// thread every thread writes tile items, `k`, `k + threads`, ...). The planning blocks have 256
/// threads (the planning kernel), 384 and 512 (the warp-specialized kernel at head dims 128 and
/// 64); GQA group 64 makes the tiles 1-3 query tokens tall.
#[test]
#[ignore = "needs a CUDA GPU"]
fn tile_plans_of_many_and_long_sequences_match_cpu() {
    let stream = gpu();
    let mut rng = seeded_rng();
    let many: Vec<(usize, usize)> = (0..700)
        .map(|_| match rng.gen_range(0..4) {
            0 => (1, rng.gen_range(1..200)),                     // decode
            1 => (rng.gen_range(2..5), rng.gen_range(4..150)),   // speculative rows
            2 => (rng.gen_range(5..30), rng.gen_range(30..150)), // a prefill chunk
            _ => (0, rng.gen_range(0..50)),                      // no rows this step
        })
        .collect();
    let long = [(800, 800), (1, 700), (3, 40)];
    let mut ran = 0;
    for (name, seqs, head_dim, (nkv, group)) in
        [("many", &many[..], 128, (2, 4)), ("many", &many[..], 64, (1, 8)), ("long", &long[..], 128, (1, 64))]
    {
        let case = random_case(&mut rng, DType::BF16, DType::BF16, head_dim, nkv, group, 16, seqs, 9);
        let cpu = case.cpu_output();
        let mut kernels = vec![KernelChoice::Tiled];
        if KERNELS.for_device(0).is_ok_and(|m| m.image.has_wgmma()) {
            kernels.extend([KernelChoice::TiledWgmma, KernelChoice::TiledWarpSpecialized]);
        }
        for kernel in kernels {
            let label = format!("{name}: d{head_dim} kv{nkv}x{group}, {} sequences, {kernel:?}", seqs.len());
            compare(&case, &run_gpu(&stream, &case, kernel), &cpu, &label);
            ran += 1;
        }
    }
    println!("{ran} planner cases passed");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn paged_attention_long_context_128k() {
    let stream = gpu();
    let mut rng = seeded_rng();
    // One 128k-token sequence (decode + a 3-row chunk) beside a short one: split-KV path. Smooth
    // logits (spread ~0.3), then peaky ones (spread 3) with a cap that bites and a window longer
    // than a split; against the CPU path on every row and, on the first, middle and last row of
    // each sequence, against the float64 oracle of tests/common (written from the contract, no
    // code shared with the kernels).
    // Under the sanitizers (XGK_GPU_CASES_PERCENT < 100, scripts/sanitize.sh) the peaky one only.
    let variants: &[&str] =
        if case_stride() > 1 { &["peaky, cap, window 20000"] } else { &["smooth", "peaky, cap, window 20000"] };
    for &variant in variants {
        let mut case =
            random_case(&mut rng, DType::BF16, DType::BF16, 128, 2, 4, 16, &[(1, 131_072), (3, 131_075), (2, 40)], 2);
        case.sm_scale = 0.08;
        if variant == "smooth" {
            make_peaky(&mut case, 0.3);
        } else {
            make_peaky(&mut case, 3.0);
            case.soft_cap = Some(biting_cap(&case, &mut rng));
            case.sliding_window = Some(20_000);
        }
        let cpu = case.cpu_output();
        let rows = sampled_rows(&case);
        let exact = case.oracle_of_rows(Fault::None, Some(&rows));
        for kernel in kernels_for(&case) {
            let label = format!("128k {variant} {kernel:?}");
            let got = run_gpu(&stream, &case, kernel);
            let err = compare(&case, &got, &cpu, &label);
            let rel = assert_rows_close(&case, &got, &exact, &rows, &label);
            println!(
                "worst row-relative |gpu - cpu| 128k bf16 {variant} {kernel:?}: {err:.3e}; |gpu - float64| {rel:.3e}"
            );
        }
    }
}

/// Invalid metadata: the kernel must write every element, finite, never out of bounds (run this
/// under `compute-sanitizer --tool memcheck`), and compute what the CPU implementation does.
#[test]
#[ignore = "needs a CUDA GPU"]
fn paged_attention_invalid_metadata_stays_in_bounds() {
    let stream = gpu();
    let mut rng = seeded_rng();
    let base = random_case(&mut rng, DType::BF16, DType::BF16, 128, 2, 4, 16, &[(3, 300), (1, 2000), (5, 40)], 3);
    let mut cases = vec![("valid", base.clone())];
    let mut c = base.clone();
    c.page_indices.iter_mut().step_by(3).for_each(|p| *p = 1_000_000_007);
    cases.push(("page index past the pool", c));
    let mut c = base.clone();
    c.page_indices.iter_mut().step_by(2).for_each(|p| *p = -7);
    cases.push(("negative page index", c));
    let mut c = base.clone();
    c.kv_lens[1] = i32::MAX;
    cases.push(("kv_len beyond the pages", c));
    let mut c = base.clone();
    c.kv_lens[0] = -100;
    cases.push(("negative kv_len", c));
    let mut c = base.clone();
    let n = c.cu_q_lens.len();
    c.cu_q_lens = (0..n as i32).map(|i| [0, 7, 2, 12, i32::MAX][i as usize % 5]).collect();
    cases.push(("decreasing and huge cu_q_lens", c));
    let mut c = base.clone();
    c.cu_q_lens[1] = -50;
    cases.push(("negative cu_q_lens", c));
    let mut c = base.clone();
    c.num_seqs = 1 << 28;
    cases.push(("num_seqs > max_num_seqs", c));
    let mut c = base.clone();
    c.cu_q_lens.iter_mut().for_each(|v| *v += 2);
    cases.push(("rows before cu_q_lens[0]", c));
    let mut c = base.clone();
    c.kv_lens[2] = 1; // q_len 5 > kv_len 1
    cases.push(("q_len > kv_len", c));
    for (label, case) in &cases {
        let cpu = case.cpu_output();
        // Auto runs this mix's decode sequences apart (`decode_rows_apart_match_cpu`).
        for kernel in [KernelChoice::Auto].into_iter().chain(kernels_for(case)) {
            compare(case, &run_gpu(&stream, case, kernel), &cpu, &format!("{label} {kernel:?}"));
        }
    }
    println!("{} invalid-metadata cases stayed in bounds and matched the CPU", cases.len());
}

/// A mixed batch's decode sequences apart (Auto, `XGK_RPA_DECODE_APART`): the pipelined kernel on
/// a grid of sequences over the one-row ones (split in clusters where long, on Hopper), a tile
/// kernel over the other rows (the warp-specialized one where it applies on Hopper, the wgmma or
/// mma.sync tiles elsewhere). Both images; the setting on and off; empty sequence slots, padding
/// rows, speculative rows (short tile items), windows and soft caps; and decreasing `cu_q_lens`,
/// whose plan fallback gives every row back to the tile kernel; fp8 KV (the warp-specialized
/// kernel's fp8 twins, two launches) in some cases.
#[test]
#[ignore = "needs a CUDA GPU"]
fn decode_rows_apart_match_cpu() {
    let stream = gpu();
    let mut rng = seeded_rng();
    let modules: [(&str, &KernelModule); 2] = [("default image", &KERNELS), ("portable image", portable_kernels())];
    let (mut runs, mut worst, mut mix_runs, mut one_launch_runs) = (0, 0.0f64, 0u32, 0u32);
    for i in (0..30).step_by(case_stride()) {
        let q_dtype = if i % 2 == 0 { DType::BF16 } else { DType::F16 };
        let head_dim = [128, 64, 256][i % 3];
        let page_size = [16, 32, 8, 64, 128][(i / 3) % 5];
        let (nkv, group) = [(2, 4), (1, 8), (4, 1), (2, 2), (1, 16)][i % 5];
        let n = rng.gen_range(3..14);
        let mut seqs: Vec<(usize, usize)> = (0..n)
            .map(|_| match rng.gen_range(0..7) {
                0 => (rng.gen_range(2..5), rng.gen_range(4..400)), // speculative rows
                1 => {
                    let q = rng.gen_range(5..50); // a prefill chunk
                    (q, q + rng.gen_range(0..300))
                }
                2 => (1, rng.gen_range(2000..7000)), // a long decode row: split
                3 => (1, 0),                         // an empty context
                _ => (1, rng.gen_range(1..800)),
            })
            .collect();
        seqs[0] = (rng.gen_range(5..40), rng.gen_range(40..300));
        seqs.shuffle(&mut rng);
        let pad = rng.gen_range(0..20);
        // fp8 KV (scaled; e4m3 and e5m2) at head dims 64 and 128 in some cases, bf16 and f16 q:
        // the warp-specialized kernel's fp8 twins take the rows the decode kernel leaves.
        let fp8 = head_dim != 256 && (i % 4 == 0 || i % 8 == 3);
        let kv_dtype = if fp8 { [DType::F8E4M3FN, DType::F8E5M2][(i / 4) % 2] } else { q_dtype };
        let mut case = random_case(&mut rng, q_dtype, kv_dtype, head_dim, nkv, group, page_size, &seqs, pad);
        if fp8 {
            case.k_scale = Some(rng.gen_range(0.1..2.0));
            case.v_scale = Some(rng.gen_range(0.1..2.0));
        }
        match i % 4 {
            1 => case.sliding_window = Some(rng.gen_range(1..500)),
            2 => case.soft_cap = Some(biting_cap(&case, &mut rng)),
            _ => {}
        }
        let fallback = i % 7 == 6;
        if fallback {
            case.cu_q_lens.swap(1, 2); // decreasing: the tile plan's fallback
        }
        let cpu = case.cpu_output();
        let label = |how: &str| {
            format!(
                "case {i} {how}: {q_dtype}/{kv_dtype} d{head_dim} p{page_size} kv{nkv}x{group} pad {pad} seqs {seqs:?}"
            )
        };
        for (image, module) in modules {
            let ctx = unsafe { module.for_stream(stream.cu_stream()) }.unwrap();
            if !decode_apart_applies(&ctx, &case.spec()).unwrap() {
                // Only head_dim 256 or fp8 KV where the warp-specialized kernel does not apply (the
                // portable image, pages not of whole 16-key blocks): no tile kernel for them there.
                let ws = ctx.image.has_wgmma() && page_size % 16 == 0;
                assert!((head_dim == 256 || fp8) && !ws, "{}: decode rows not apart", label(image));
                continue;
            }
            let out = run_gpu_on(module, &stream, &case, KernelChoice::Auto, WorkspaceMode::Exact, 1);
            worst = worst.max(compare(&case, &out, &cpu, &label(image)));
            runs += 1;
        }
        // Both in one launch (`kernels::mix`) where the decode plan does not split (splits
        // of at least 64 tiles: every unsplit row up to 4096 keys), else two launches as `2`; the
        // call three times back to back (fresh tags, no sync between).
        with_setting(DECODE_APART_ENV_VAR, "3", || {
            with_setting(MIN_SPLIT_TILES_ENV_VAR, "64", || {
                let before = launch_count();
                let out = run_gpu_on(&KERNELS, &stream, &case, KernelChoice::Auto, WorkspaceMode::Exact, 3);
                let launches = launch_count() - before;
                worst = worst.max(compare(&case, &out, &cpu, &label(&format!("{launches} launches for 3 calls"))));
                // A mix (decode rows apart, a head dim the mix kernel has) in one launch per call.
                let ctx = unsafe { KERNELS.for_stream(stream.cu_stream()) }.unwrap();
                // (The mix kernels are for KV of q's dtype.)
                let mix = decode_apart_applies(&ctx, &case.spec()).unwrap() && matches!(head_dim, 64 | 128) && !fp8;
                mix_runs += u32::from(mix);
                one_launch_runs += u32::from(mix && launches == 3);
                runs += 1;
            })
        });
        // The tile kernel after the decode kernel's end (the default does not wait for it).
        with_setting(DECODE_APART_ENV_VAR, "1", || {
            let out = run_gpu(&stream, &case, KernelChoice::Auto);
            worst = worst.max(compare(&case, &out, &cpu, &label("tiles after the decode kernel")));
            runs += 1;
        });
        with_setting(DECODE_APART_ENV_VAR, "0", || {
            let ctx = unsafe { KERNELS.for_stream(stream.cu_stream()) }.unwrap();
            assert!(!decode_apart_applies(&ctx, &case.spec()).unwrap());
            compare(&case, &run_gpu(&stream, &case, KernelChoice::Auto), &cpu, &label("setting off"));
        });
    }
    println!("worst row-relative |gpu - cpu| decode rows apart: {worst:.3e}");
    println!("{runs} decode-apart runs passed; of {mix_runs} mixes under setting 3, {one_launch_runs} in one launch per call");
    if KERNELS.for_device(0).is_ok_and(|m| m.image.has_wgmma()) && mix_runs >= 10 {
        // About half the cases have no decode row over 4096 keys (their decode plan unsplit at 64
        // tiles a split); at small case strides `tiled_ws_graph_replays_follow_new_metadata`
        // asserts one launch per call on its own mixes.
        assert!(one_launch_runs >= 1, "no mix ran in one launch");
    }
}

/// Every source of temporary memory gives the same, right answer: the driver's pool, a workspace
/// of exactly `workspace_bytes` (what XLA and torch pass), and workspaces too small for the chosen
/// splits or plan (a workspace sized for another device), down to none at all.
#[test]
#[ignore = "needs a CUDA GPU"]
fn paged_attention_workspace_modes_agree() {
    let stream = gpu();
    let mut rng = seeded_rng();
    let cases = [
        // decode at batch 1 over a long context: many splits
        random_case(&mut rng, DType::BF16, DType::BF16, 128, 2, 4, 16, &[(1, 9000)], 1),
        // prefill + decode: the tiled kernel's plan
        random_case(&mut rng, DType::F16, DType::F16, 64, 1, 8, 16, &[(40, 300), (1, 5000), (7, 7)], 2),
        // f32: the general kernel's splits
        random_case(&mut rng, DType::F32, DType::F32, 96, 2, 2, 8, &[(1, 3000), (2, 700)], 0),
    ];
    let mut runs = 0;
    for case in &cases {
        let cpu = case.cpu_output();
        for kernel in [KernelChoice::Auto].into_iter().chain(kernels_for(case)) {
            let exact = workspace_bytes_with(&KERNELS, 0, &case.spec(), kernel).unwrap();
            let explicit_tiles =
                matches!(kernel, KernelChoice::Tiled | KernelChoice::TiledWgmma | KernelChoice::TiledWarpSpecialized);
            let modes: Vec<WorkspaceMode> = if explicit_tiles {
                vec![WorkspaceMode::Allocate, WorkspaceMode::Exact] // an explicit Tiled needs its plan
            } else {
                vec![
                    WorkspaceMode::Allocate,
                    WorkspaceMode::Exact,
                    WorkspaceMode::Percent(40),
                    WorkspaceMode::Percent(0),
                ]
            };
            for mode in modes {
                let label = format!("{kernel:?} {mode:?} (exact {exact} bytes) {:?}", case.kv_lens);
                compare(case, &run_gpu_with(&stream, case, kernel, mode), &cpu, &label);
                runs += 1;
            }
        }
    }
    println!("{runs} workspace-mode runs passed");
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

/// The native code (the default store's cubin), the Hopper PTX image and the portable PTX image
/// (each compiled kernel by kernel on first use) give the CPU's answer, with the launches
/// programmatic (between the split kernel and its merge, the plan and the tile kernel, and from
/// one call to the next) and not, one call or several back to back on the same buffers. On a
/// Hopper GPU the default store must load the sm_90a cubin.
#[test]
#[ignore = "needs a CUDA GPU"]
fn kernel_images_and_programmatic_launch_agree() {
    let stream = gpu();
    let mut rng = seeded_rng();
    let loaded = unsafe { KERNELS.for_stream(stream.cu_stream()) }.unwrap();
    let device_ptx = unsafe { device_ptx_kernels().for_stream(stream.cu_stream()) }.unwrap();
    let portable = unsafe { portable_kernels().for_stream(stream.cu_stream()) }.unwrap();
    println!(
        "compute capability {}: default store loaded {:?} (programmatic launch {}), PTX store {:?}, portable store {:?}",
        loaded.compute_capability, loaded.image, loaded.programmatic_launch, device_ptx.image, portable.image
    );
    let defaults = option_env!("XGK_CUDA_ARCHS").is_none()
        && option_env!("XGK_CUBIN_ARCHS").is_none()
        && std::env::var_os("XGK_PTX_ARCH").is_none();
    if loaded.compute_capability == 90 && defaults {
        assert_eq!((loaded.image.arch, loaded.image.native), ("sm_90a", true), "Hopper loads the sm_90a cubin");
        assert!(loaded.programmatic_launch, "a Hopper GPU with a CUDA 12.3+ driver launches programmatically");
        assert_eq!((device_ptx.image.arch, device_ptx.image.native), ("sm_90a", false));
    }
    assert!(!device_ptx.image.native);
    assert_eq!((portable.image.arch, portable.image.native), ("sm_80", false));
    assert!(!portable.programmatic_launch);
    let cases = [
        // decode over long contexts: split kernel + merge
        random_case(&mut rng, DType::BF16, DType::BF16, 128, 4, 8, 16, &[(1, 9000), (1, 3000)], 1),
        // prefill + decode: plan + tile kernel
        random_case(&mut rng, DType::F16, DType::F16, 64, 1, 8, 16, &[(40, 300), (1, 5000), (7, 7)], 2),
        // fp8 KV, scaled: the pipelined kernel's splits
        random_case(&mut rng, DType::BF16, DType::F8E4M3FN, 128, 2, 4, 16, &[(1, 4000)], 1),
        // f32: the general kernel's splits
        random_case(&mut rng, DType::F32, DType::F32, 96, 2, 2, 8, &[(1, 3000), (2, 700)], 0),
    ];
    let (mut runs, mut combination) = (0, 0);
    let stride = case_stride();
    for case in &cases {
        let cpu = case.cpu_output();
        for kernel in [KernelChoice::Auto].into_iter().chain(kernels_for(case)) {
            for programmatic in [true, false] {
                let stores =
                    [(&KERNELS, "default"), (device_ptx_kernels(), "device PTX"), (portable_kernels(), "portable")];
                for (store, name) in stores {
                    let hopper_only = matches!(kernel, KernelChoice::TiledWgmma | KernelChoice::TiledWarpSpecialized);
                    if hopper_only && name == "portable" {
                        continue; // the sm_80 image has no wgmma kernels
                    }
                    for calls in [1, 3] {
                        combination += 1;
                        if combination % stride != 0 {
                            continue;
                        }
                        let out = with_programmatic_launch(programmatic, || {
                            run_gpu_on(store, &stream, case, kernel, WorkspaceMode::Exact, calls)
                        });
                        let label = format!("{kernel:?} {name} programmatic={programmatic} calls={calls}");
                        compare(case, &out, &cpu, &label);
                        runs += 1;
                    }
                }
            }
        }
    }
    println!("{runs} image / programmatic-launch runs passed");
    assert!(runs > 0, "no run: XGK_TEST_STRIDE skipped every combination");
}

/// Calls chained through their data on one stream, with no sync between them: each call's output
/// is the next call's q, and all share one workspace. A programmatic launch that touched memory
/// before its `griddepcontrol.wait` would read a q the call before it is still writing, or
/// overwrite partials that call's merge is still reading. Each link is checked against the CPU
/// run on the GPU's own input to that link, so rounding does not compound. The mixes run their
/// decode rows apart (Auto, on Hopper beside the warp-specialized tile kernel, which waits for
/// the decode grid only before its blocks end): the last, whose decode row (30k keys) outlasts
/// its prefill rows, shows that a call's tile grid ends after its decode grid, or the next
/// link's decode kernel, which waits for that tile grid only, would read rows not yet written.
#[test]
#[ignore = "needs a CUDA GPU"]
fn programmatic_launches_chained_through_data_match_cpu() {
    let stream = gpu();
    let mut rng = seeded_rng();
    let cases = [
        // split kernel + merge
        random_case(&mut rng, DType::BF16, DType::BF16, 128, 4, 8, 16, &[(1, 9000), (1, 3000)], 1),
        // plan + tile kernel
        random_case(&mut rng, DType::F16, DType::F16, 64, 1, 8, 16, &[(40, 300), (1, 5000), (7, 7)], 2),
        // a mix whose decode row is the longest work
        random_case(&mut rng, DType::BF16, DType::BF16, 128, 2, 4, 16, &[(20, 100), (1, 30_000), (1, 50)], 2),
    ];
    const LINKS: usize = 4;
    for programmatic in [true, false] {
        for case in &cases {
            with_programmatic_launch(programmatic, || {
                let spec = case.spec();
                let inputs = CaseInputs::upload(&stream, case);
                let bytes = workspace_bytes_with(&KERNELS, 0, &spec, KernelChoice::Auto).unwrap();
                let ws = Dev::from(&stream, &vec![0xFFu8; bytes.max(1)]);
                // buffers[0] is q; buffers[k] the output of link k and the q of link k + 1.
                let buffers: Vec<Dev<u8>> = std::iter::once(Dev::from(&stream, &case.q))
                    .chain((0..LINKS).map(|_| Dev::from(&stream, &vec![0xFFu8; case.out_bytes()])))
                    .collect();
                for link in 0..LINKS {
                    let workspace = Workspace::Given { ptr: ws.ptr(&stream) as u64, bytes };
                    let bufs = inputs.buffers(&stream, &buffers[link], &buffers[link + 1], workspace);
                    unsafe { launch_cuda_with(&KERNELS, stream.cu_stream(), &spec, bufs, KernelChoice::Auto) }.unwrap();
                }
                stream.synchronize().unwrap();
                let host: Vec<Vec<u8>> = buffers.iter().map(|b| stream.clone_dtoh(&b.buf).unwrap()).collect();
                for link in 0..LINKS {
                    let mut input = case.clone();
                    input.q = host[link].clone();
                    let label = format!("programmatic={programmatic} link {link} {:?}", case.kv_lens);
                    compare(&input, &host[link + 1], &input.cpu_output(), &label);
                }
            });
        }
    }
    println!("{} chained links passed", 2 * cases.len() * LINKS);
}

/// Device memory exhausted: a call that must allocate its scratch from the driver's pool (no
/// workspace given) returns an error naming the allocation, and once memory is back the next call
/// runs and is right.
#[test]
#[ignore = "needs a CUDA GPU"]
fn scratch_allocation_failure_is_an_error_and_the_next_call_works() {
    let stream = gpu();
    stream.context().bind_to_thread().unwrap();
    let mut rng = seeded_rng();
    // Batch 1 over 20k keys: the launch splits the keys and needs scratch for the partials.
    let case = random_case(&mut rng, DType::BF16, DType::BF16, 128, 4, 8, 16, &[(1, 20_000)], 1);
    assert!(workspace_bytes_with(&KERNELS, 0, &case.spec(), KernelChoice::Auto).unwrap() > 0, "the case must split");
    let cpu = case.cpu_output();
    let inputs = CaseInputs::upload(&stream, &case);
    let q = Dev::from(&stream, &case.q);
    let out = Dev::from(&stream, &vec![0xFFu8; case.out_bytes()]);
    let bufs = inputs.buffers(&stream, &q, &out, Workspace::Allocate);
    let launch = || unsafe { launch_cuda_with(&KERNELS, stream.cu_stream(), &case.spec(), bufs, KernelChoice::Auto) };
    launch().unwrap(); // loads the module and caches the plan while memory is free
    stream.synchronize().unwrap();

    // Take every byte the driver hands out, in halving chunks down to 64 KiB: first outside the
    // stream-ordered pool, then the free space left inside the pool's reserved chunks (the
    // inputs above came from it), so the pool can neither grow nor serve the scratch.
    let scratch = workspace_bytes_with(&KERNELS, 0, &case.spec(), KernelChoice::Auto).unwrap();
    let cu_stream = stream.cu_stream();
    let (mut hog, mut pooled) = (Vec::new(), Vec::new());
    let mut chunk = 1usize << 32;
    while chunk >= 1 << 16 {
        match unsafe { cudarc::driver::result::malloc_sync(chunk) } {
            Ok(p) => hog.push(p),
            Err(_) => chunk /= 2,
        }
    }
    // Down to single bytes: the scratch may be a few hundred bytes, which a pool chunk's leftover
    // would otherwise still serve (seen once: 96 bytes of scratch allocated after 64 KiB chunks
    // stopped fitting).
    let mut chunk = 1usize << 26;
    while chunk >= 1 {
        match unsafe { cudarc::driver::result::malloc_async(cu_stream, chunk) } {
            Ok(p) => pooled.push(p),
            Err(_) => chunk /= 2,
        }
    }
    let taken = hog.len() + pooled.len();
    let failed = launch();
    for p in pooled {
        unsafe { cudarc::driver::result::free_async(p, cu_stream) }.unwrap();
    }
    let sync = stream.synchronize();
    for p in hog {
        unsafe { cudarc::driver::result::free_sync(p) }.unwrap();
    }
    println!("scratch needed: {scratch} bytes; allocations taken: {taken}");
    let err = failed.expect_err("the scratch allocation cannot succeed with device memory exhausted").to_string();
    println!("with device memory exhausted: {err}");
    assert!(err.contains("cuMemAllocAsync"), "the error names the allocation: {err}");
    sync.unwrap();

    launch().unwrap();
    stream.synchronize().unwrap();
    compare(&case, &stream.clone_dtoh(&out.buf).unwrap(), &cpu, "after the allocation failure");
}

/// The warpgroup MMA primitives of the sm_90a image (`kernels_gpu::wgmma`: descriptors, 128-byte
/// swizzle, `m64n64k16` with both operands in shared memory, `m64n64k16` and `m64n128k16` with A
/// in registers and B K-major or read transposed: the tiled-wgmma kernel's S and P V at head dims
/// 64 and 128) against the CPU, through the `wgmma_selftest_bf16` kernel. Each mode runs
/// with the documented descriptor offsets (asserted) and with swapped ones (printed, to tell a
/// wrong encoding from a wrong layout when the first fails).
#[test]
#[ignore = "needs a CUDA GPU"]
fn wgmma_primitives_match_cpu() {
    use xla_gpu_kernels::host::runtime::{KernelArgs, LaunchConfig};
    let stream = gpu();
    let module = unsafe { KERNELS.for_stream(stream.cu_stream()) }.unwrap();
    assert!(
        module.image.has_wgmma(),
        "the wgmma self-test needs the sm_90a image (a Hopper GPU); this context loaded {}",
        module.image.arch
    );
    let mut rng = seeded_rng();
    let bf16 = |x: f32| half::bf16::from_f32(x).to_bits();
    let value = |bits: u16| half::bf16::from_bits(bits).to_f64();
    // (mode, m, n, k, b stored as [n][k] (K-major) or [k][n], candidate (leading, stride) offsets).
    type Mode = (u32, usize, usize, usize, bool, [(u32, u32); 3]);
    let modes: [Mode; 4] = [
        (0, 64, 64, 64, true, [(16, 1024), (1024, 16), (8192, 1024)]),
        (1, 64, 128, 64, false, [(8192, 1024), (1024, 8192), (16, 1024)]),
        (2, 64, 64, 128, true, [(16, 1024), (1024, 16), (8192, 1024)]),
        (3, 64, 64, 64, false, [(8192, 1024), (1024, 8192), (16, 1024)]),
    ];
    for (mode, m, n, k, b_k_major, candidates) in modes {
        let a: Vec<u16> = (0..m * k).map(|_| bf16(rng.gen_range(-1.0..1.0))).collect();
        let b: Vec<u16> = (0..n * k).map(|_| bf16(rng.gen_range(-1.0..1.0))).collect();
        let b_at = |kk: usize, nn: usize| if b_k_major { b[nn * k + kk] } else { b[kk * n + nn] };
        let want: Vec<f64> =
            (0..m * n).map(|i| (0..k).map(|kk| value(a[(i / n) * k + kk]) * value(b_at(kk, i % n))).sum()).collect();
        let (a_dev, b_dev) = (Dev::from(&stream, &a), Dev::from(&stream, &b));
        for (i, &(leading, stride)) in candidates.iter().enumerate() {
            let d_dev = Dev::from(&stream, &vec![f32::NAN; m * n]);
            let mut args = KernelArgs::new();
            args.push(a_dev.ptr(&stream))
                .push(b_dev.ptr(&stream))
                .push(d_dev.ptr(&stream))
                .push(mode)
                .push(leading)
                .push(stride)
                .push(leading)
                .push(stride);
            let cfg = LaunchConfig {
                grid: (1, 1, 1),
                block: (128, 1, 1),
                shared_bytes: kernels_gpu::kernels::wgmma_selftest::WGMMA_SELFTEST_SHARED_BYTES,
            };
            unsafe { module.launch(stream.cu_stream(), "wgmma_selftest_bf16", cfg, &mut args.pointers(), false) }
                .unwrap();
            stream.synchronize().unwrap();
            let got = stream.clone_dtoh(&d_dev.buf).unwrap();
            let worst = got.iter().zip(&want).map(|(g, w)| (*g as f64 - w).abs()).fold(0.0, f64::max);
            let worst = if got.iter().any(|g| g.is_nan()) { f64::INFINITY } else { worst };
            println!("wgmma mode {mode} (leading {leading}, stride {stride}): worst |gpu - cpu| {worst:.3e}");
            if i == 0 {
                assert!(worst < 1e-3, "wgmma mode {mode} with the documented offsets: worst error {worst:.3e}");
            }
        }
    }
}
