//! Criterion benchmarks of the library's own host cost per call: decoding XLA's call frame (or the
//! C API's descriptors), validation, module lookup and the launches; what every layer of a decode
//! step pays on the host before the GPU runs anything. The budget is 5 µs per call.
//!
//! - `host_overhead/ffi_decode_validate`: the Host handler on an empty batch (no rows): call-frame
//!   decoding and validation only. Runs anywhere (CI).
//! - `host_overhead/tensor_map_encode` (GPU machine only: the driver's encode): one tensor map
//!   of a prefill call, which encodes three per call.
//! - `host_overhead/ffi_cuda/<case>` and `host_overhead/capi_cuda/<case>` (GPU only): the CUDA
//!   handler / the C API end to end on a real stream, with XLA's workspace. Timed on the host over
//!   bursts of 256 calls; the stream is drained between bursts, untimed, and the calls' metadata
//!   keeps their kernels short (`LIVE_TOKENS`), so that the GPU does not back up into the host's
//!   timing (the kernels themselves are timed by `benches/kernels.rs`).
//! - `host_overhead/ffi_cuda_behind_memset/<case>` (GPU only): the CUDA handler in bursts of 32
//!   calls queued behind a 2 GiB memset: the host's cost alone, even for a call whose kernels
//!   outlast its host work on the GPU.
//! - `host_overhead/plan_launch_prepared`, `plan_ws_launch_prepared` (GPU only; the second on
//!   Hopper): the driver alone launching the tile family's plan kernels with prepared arguments
//!   (three pointers and the parameters each).
//! - `host_overhead/ws_launch_prepared` (GPU only, Hopper): the driver alone launching the
//!   warp-specialized tile kernel itself with prepared arguments, in a prefill call's launch shape
//!   (a block per multiprocessor, 384 threads, ~225 KiB of shared memory, eight pointers, the
//!   parameters and three tensor maps) on a one-row batch: `ffi_cuda/prefill_1x2k` less this is
//!   the library's own work on a prefill call.
//! - `host_overhead/cu_launch_kernel_floor`, `cu_launch_kernel_ex_programmatic_floor` (GPU only):
//!   the driver's floor, one-block launches of simple_add with prepared arguments.
//!
//! `cargo bench --bench host_overhead`.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use cudarc::driver::{sys, CudaContext, CudaSlice, CudaStream, DevicePtr};
use xla_gpu_kernels::host::capi::{XgkPagedAttentionAttrs, XgkTensor};
use xla_gpu_kernels::host::ops::paged_attention::{
    kv_tensor_map, workspace_bytes_with, ws_token_tensor_map, Attributes, KernelChoice, PagedAttention,
};
use xla_gpu_kernels::host::runtime::{ContextModule, KernelArgs};
use xla_gpu_kernels::host::xla::ffi::testing::{take_error, FrameBuilder};
use xla_gpu_kernels::host::{dtype::TensorRef, DType};
use xla_gpu_kernels::*;

const HEADS: i64 = 32;
const KV_HEADS: i64 = 8;
const DIM: i64 = 128;
const PAGE: i64 = 16;
/// Calls per timed burst: well under the driver's launch queue depth.
const BURST: u64 = 256;
/// Keys per sequence, and query rows of a one-sequence call, that the calls' metadata holds at run
/// time: the library plans and launches from the static shapes alone, so these change no host
/// work, but they keep each call's kernels short enough for the GPU to keep pace with a burst (a
/// 2k-token prefill takes ~90 µs of GPU per call: 256 of them queue ~500 launches behind the
/// host, whose launches then wait for room in the driver's queue and time the GPU, not the host).
const LIVE_TOKENS: i64 = 256;

/// Shapes of one call: rows, sequences, pages per sequence, pool pages.
#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    rows: i64,
    seqs: i64,
    pages_per_seq: i64,
    pool_pages: i64,
}

impl Shape {
    fn dims(&self) -> [Vec<i64>; 7] {
        let q = vec![self.rows, HEADS, DIM];
        [
            q.clone(),
            vec![self.pool_pages, PAGE, 2 * KV_HEADS, DIM],
            vec![self.seqs],
            vec![self.seqs, self.pages_per_seq],
            vec![self.seqs + 1],
            vec![1],
            q,
        ]
    }

    fn spec(&self) -> PagedAttention {
        let d = self.dims();
        let dtypes = [DType::BF16, DType::BF16, DType::S32, DType::S32, DType::S32, DType::S32, DType::BF16];
        let t: Vec<TensorRef> =
            d.iter().zip(dtypes).map(|(dims, dtype)| TensorRef { data: std::ptr::null_mut(), dtype, dims }).collect();
        PagedAttention::from_tensors(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], Attributes::default()).unwrap()
    }
}

const SHAPES: [Shape; 5] = [
    // one sequence, 128 keys: one kernel
    Shape { name: "decode_1x128", rows: 1, seqs: 1, pages_per_seq: 8, pool_pages: 64 },
    // one sequence, 32k keys: split-KV kernel, its partials merged by merge blocks of its own
    // grid (the default outside stream capture; the merge kernel after it with
    // XGK_RPA_MERGE_MODE=0)
    Shape { name: "decode_1x32k", rows: 1, seqs: 1, pages_per_seq: 2048, pool_pages: 2048 },
    // 64 sequences, 2k keys
    Shape { name: "decode_64x2k", rows: 64, seqs: 64, pages_per_seq: 128, pool_pages: 8192 },
    // one 2k-token prefill: on Hopper one launch of the warp-specialized kernel, which plans in
    // its block 0, with the K/V, Q and output tensor maps encoded per call
    Shape { name: "prefill_1x2k", rows: 2048, seqs: 1, pages_per_seq: 128, pool_pages: 128 },
    // an engine step's shapes (more rows than sequence slots, under 64 per slot): on Hopper the
    // decode kernel over its one-row sequences, then the warp-specialized kernel beside it
    Shape { name: "mix_1148x128", rows: 1148, seqs: 128, pages_per_seq: 16, pool_pages: 2048 },
];

fn frame_for(shape: &Shape, ptrs: &[*mut c_void; 8], ws_bytes: i64, stream: *mut c_void) -> FrameBuilder {
    let d = shape.dims();
    FrameBuilder::new()
        .stream(stream)
        .arg(DType::BF16, &d[0], ptrs[0])
        .arg(DType::BF16, &d[1], ptrs[1])
        .arg(DType::S32, &d[2], ptrs[2])
        .arg(DType::S32, &d[3], ptrs[3])
        .arg(DType::S32, &d[4], ptrs[4])
        .arg(DType::S32, &d[5], ptrs[5])
        .ret(DType::BF16, &d[6], ptrs[6])
        .ret(DType::U8, &[ws_bytes], ptrs[7])
        .f32_attr("sm_scale", 0.088)
}

fn ffi_decode_validate(c: &mut Criterion) {
    let mut g = c.benchmark_group("host_overhead");
    let empty = Shape { name: "empty", rows: 0, seqs: 64, pages_per_seq: 128, pool_pages: 64 };
    // Host buffers of the right sizes (the handler reads the metadata; there are no rows).
    let (_, kv_elems, _) = empty.spec().element_counts();
    let mut kv = vec![0u16; kv_elems];
    let mut kv_lens = vec![0i32; 64];
    let mut table = vec![0i32; 64 * 128];
    let mut cu = vec![0i32; 65];
    let mut ns = vec![0i32; 1];
    let mut q = vec![0u16; 1];
    let mut ws = vec![0u8; 1];
    let p = |v: *mut c_void| v;
    let ptrs = [
        p(q.as_mut_ptr().cast()),
        p(kv.as_mut_ptr().cast()),
        p(kv_lens.as_mut_ptr().cast()),
        p(table.as_mut_ptr().cast()),
        p(cu.as_mut_ptr().cast()),
        p(ns.as_mut_ptr().cast()),
        p(q.as_mut_ptr().cast()),
        p(ws.as_mut_ptr().cast()),
    ];
    let mut fb = frame_for(&empty, &ptrs, 0, std::ptr::null_mut());
    let frame = fb.frame();
    g.bench_function("ffi_decode_validate", |b| {
        b.iter(|| {
            let err = unsafe { take_error(xla_gpu_paged_attention_host(frame)) };
            assert!(err.is_none());
        })
    });
    g.finish();
}

/// Host seconds of `iters` calls, in bursts with the stream drained (untimed) between them.
fn time_bursts(stream: &Arc<CudaStream>, iters: u64, call: impl FnMut()) -> Duration {
    time_bursts_after(stream, iters, BURST, || {}, call)
}

/// Calls per burst behind a memset (`ffi_cuda_behind_memset`): their host time, at most ~10 µs a
/// call, stays well inside the memset's.
const GATED_BURST: u64 = 32;
/// Bytes the memset before each gated burst writes: 2 GiB, ~0.5 ms of an H100's or H200's copy
/// bandwidth.
const GATE_BYTES: usize = 2 << 30;

/// Host time of `iters` calls in bursts of `burst`, each burst after `before` (untimed) and
/// followed by a drain of the stream (untimed). With `before` a 2 GiB memset on the stream
/// (`ffi_cuda_behind_memset`) the GPU is busy for the whole burst, so the calls' launches only
/// queue, and the figure is the host's cost even where one call's kernels would take longer on
/// the GPU than its host work.
fn time_bursts_after(
    stream: &Arc<CudaStream>,
    iters: u64,
    burst: u64,
    mut before: impl FnMut(),
    mut call: impl FnMut(),
) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(burst);
        before();
        let t0 = Instant::now();
        for _ in 0..n {
            call();
        }
        total += t0.elapsed();
        stream.synchronize().unwrap();
        left -= n;
    }
    total
}

fn cuda_calls(c: &mut Criterion) {
    // SAFETY: probes for the driver library only.
    if !unsafe { sys::is_culib_present() } {
        eprintln!("host_overhead: no CUDA driver; only ffi_decode_validate runs");
        return;
    }
    let Ok(ctx) = CudaContext::new(0) else {
        eprintln!("host_overhead: no CUDA device; only ffi_decode_validate runs");
        return;
    };
    // XLA and torch run custom calls with the stream's context current on the thread.
    ctx.bind_to_thread().unwrap();
    let stream = ctx.new_stream().unwrap();
    let mut g = c.benchmark_group("host_overhead");
    g.measurement_time(Duration::from_secs(3));
    let mut gate: CudaSlice<u8> = stream.alloc_zeros(GATE_BYTES).unwrap();
    for shape in SHAPES {
        let spec = shape.spec();
        let ws_bytes = workspace_bytes_with(&KERNELS, 0, &spec, KernelChoice::Auto).unwrap();
        let (q_elems, kv_elems, _) = spec.element_counts();
        let q: CudaSlice<u16> = stream.alloc_zeros(q_elems).unwrap();
        let kv: CudaSlice<u16> = stream.alloc_zeros(kv_elems).unwrap();
        let live_keys = (shape.pages_per_seq * PAGE).min(LIVE_TOKENS) as i32;
        let kv_lens = stream.clone_htod(&vec![live_keys; shape.seqs as usize]).unwrap();
        let table: Vec<i32> = (0..shape.seqs * shape.pages_per_seq).map(|i| (i % shape.pool_pages) as i32).collect();
        let table = stream.clone_htod(&table).unwrap();
        // Sequences of equal query lengths (one row each for the decode shapes); a one-sequence
        // prefill's rows past LIVE_TOKENS belong to no sequence (zero-filled).
        let live_rows = if shape.seqs == 1 { shape.rows.min(LIVE_TOKENS) } else { shape.rows };
        let cu: Vec<i32> = (0..=shape.seqs).map(|i| (i * live_rows / shape.seqs) as i32).collect();
        let cu = stream.clone_htod(&cu).unwrap();
        let ns = stream.clone_htod(&[shape.seqs as i32]).unwrap();
        let out: CudaSlice<u16> = stream.alloc_zeros(q_elems).unwrap();
        let ws: CudaSlice<u8> = stream.alloc_zeros(ws_bytes.max(1)).unwrap();
        let p = |v: u64| v as *mut c_void;
        let ptrs = [
            p(q.device_ptr(&stream).0),
            p(kv.device_ptr(&stream).0),
            p(kv_lens.device_ptr(&stream).0),
            p(table.device_ptr(&stream).0),
            p(cu.device_ptr(&stream).0),
            p(ns.device_ptr(&stream).0),
            p(out.device_ptr(&stream).0),
            p(ws.device_ptr(&stream).0),
        ];
        let raw_stream = stream.cu_stream() as *mut c_void;

        let mut fb = frame_for(&shape, &ptrs, ws_bytes as i64, raw_stream);
        let frame = fb.frame();
        g.bench_function(BenchmarkId::new("ffi_cuda", shape.name), |b| {
            b.iter_custom(|iters| {
                time_bursts(&stream, iters, || {
                    let err = unsafe { take_error(xla_gpu_paged_attention_cuda(frame)) };
                    assert!(err.is_none(), "{err:?}");
                })
            })
        });
        g.bench_function(BenchmarkId::new("ffi_cuda_behind_memset", shape.name), |b| {
            b.iter_custom(|iters| {
                let gate_burst = || stream.memset_zeros(&mut gate).unwrap();
                time_bursts_after(&stream, iters, GATED_BURST, gate_burst, || {
                    let err = unsafe { take_error(xla_gpu_paged_attention_cuda(frame)) };
                    assert!(err.is_none(), "{err:?}");
                })
            })
        });

        let dims = shape.dims();
        let dtypes = [DType::BF16, DType::BF16, DType::S32, DType::S32, DType::S32, DType::S32, DType::BF16];
        let descs: Vec<XgkTensor> = (0..7)
            .map(|i| XgkTensor {
                data: ptrs[i],
                dtype: dtypes[i].to_xla(),
                rank: dims[i].len() as i64,
                dims: dims[i].as_ptr(),
            })
            .collect();
        let attrs = XgkPagedAttentionAttrs { sm_scale: 0.088, ..Default::default() };
        let mut err = [0 as std::ffi::c_char; 256];
        g.bench_function(BenchmarkId::new("capi_cuda", shape.name), |b| {
            b.iter_custom(|iters| {
                time_bursts(&stream, iters, || {
                    let code = unsafe {
                        xgk_paged_attention(
                            1,
                            raw_stream,
                            descs.as_ptr(),
                            &attrs,
                            ptrs[7],
                            ws_bytes,
                            err.as_mut_ptr(),
                            err.len(),
                        )
                    };
                    assert_eq!(code, 0);
                })
            })
        });
        stream.synchronize().unwrap();
    }

    // The simplest launch the library makes (simple_add on 1024 floats: validation is trivial,
    // one kernel), and the module lookup alone: what every call pays before its own logic.
    let n = 1024usize;
    let a: CudaSlice<f32> = stream.alloc_zeros(n).unwrap();
    let out: CudaSlice<f32> = stream.alloc_zeros(n).unwrap();
    let pa = a.device_ptr(&stream).0 as *const c_void;
    let po = out.device_ptr(&stream).0 as *mut c_void;
    let op = xla_gpu_kernels::host::ops::simple_add::SimpleAdd { dtype: DType::F32, len: n };
    let raw_stream = stream.cu_stream();
    g.bench_function("simple_add_launch_1024", |b| {
        b.iter_custom(|iters| {
            time_bursts(&stream, iters, || unsafe { op.launch_cuda(&KERNELS, raw_stream, pa, pa, po) }.unwrap())
        })
    });
    g.bench_function("module_for_stream", |b| b.iter(|| unsafe { KERNELS.for_stream(raw_stream) }.unwrap()));
    // A prefill call's tensor map: the K/V pool's, as prefill_1x2k's calls encode it (every
    // prefill call encodes it and two of the queries' shape).
    let prefill = SHAPES.iter().find(|s| s.name == "prefill_1x2k").unwrap().spec();
    g.bench_function("tensor_map_encode", |b| b.iter(|| kv_tensor_map(&prefill, pa as u64).unwrap()));
    // The driver's own floor: cuLaunchKernel of the same kernel with prepared arguments.
    let module = unsafe { KERNELS.for_stream(raw_stream) }.unwrap();
    plan_kernel_launches(&mut g, &stream, &module, &prefill);
    ws_kernel_launches(&mut g, &stream, &module);
    let f = module.function_with_shared("simple_add_f32", 0).unwrap();
    let (mut pa2, mut po2, mut n2, mut v2) = (pa as u64, po as u64, n as u64, 1u32);
    let mut params: [*mut c_void; 5] = [
        &mut pa2 as *mut u64 as *mut c_void,
        &mut pa2 as *mut u64 as *mut c_void,
        &mut po2 as *mut u64 as *mut c_void,
        &mut n2 as *mut u64 as *mut c_void,
        &mut v2 as *mut u32 as *mut c_void,
    ];
    g.bench_function("cu_launch_kernel_floor", |b| {
        b.iter_custom(|iters| {
            time_bursts(&stream, iters, || unsafe {
                sys::cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, raw_stream, params.as_mut_ptr(), std::ptr::null_mut())
                    .result()
                    .unwrap()
            })
        })
    });
    // The same launch through cuLaunchKernelEx with the programmatic-stream-serialization
    // attribute, as the attention kernels are launched on Hopper: the driver's own price of it.
    g.bench_function("cu_launch_kernel_ex_programmatic_floor", |b| {
        b.iter_custom(|iters| {
            time_bursts(&stream, iters, || unsafe {
                launch_programmatic(f, 1, 256, 0, raw_stream, params.as_mut_ptr())
            })
        })
    });
    g.finish();
}

/// The tiled family's two plan kernels launched with prepared arguments (programmatic, as the
/// library launches them on Hopper), on an empty batch (`num_seqs` 0: each block writes the
/// plan's header and exits): three pointers and `RpaParams` each, the driver's floor for a
/// launch of one small block; `ffi_cuda/prefill_1x2k` less `plan_ws_launch_prepared` is about
/// the library's own work on such a call (the tile kernel's launch, `ws_launch_prepared`, carries
/// the three 128-byte tensor maps too).
fn plan_kernel_launches(
    g: &mut criterion::BenchmarkGroup<criterion::measurement::WallTime>,
    stream: &Arc<CudaStream>,
    module: &ContextModule,
    spec: &PagedAttention,
) {
    use kernels_gpu::attention::planner::{plan_bytes, plan_capacity, PLAN_SHARED_BYTES, PLAN_THREADS};
    use kernels_gpu::kernels::prefill::hopper::{ws_consumers, ws_tile_rows};
    let rows = ws_tile_rows(spec.group().max(1), ws_consumers(spec.head_dim, false));
    let capacity = plan_capacity(spec.max_tokens as u64, spec.max_num_seqs as u64, rows as u64);
    // Both plan kernels' scratch is the plan alone (`ws_scratch_bytes` is `plan_bytes`).
    let bytes = plan_bytes(capacity) as usize;
    let plan: CudaSlice<u8> = stream.alloc_zeros(bytes).unwrap();
    let cu: CudaSlice<i32> = stream.alloc_zeros(spec.max_num_seqs as usize + 1).unwrap();
    let num_seqs: CudaSlice<i32> = stream.alloc_zeros(1).unwrap();
    let mut params = spec.kernel_params(1, spec.max_visited_keys());
    params.tile_rows = rows;
    params.plan_capacity = capacity as u32;
    let raw_stream = stream.cu_stream();
    // `rpa_plan_ws` is in the sm_90 image only (Hopper).
    let kernels: &[(&str, &str)] = if module.image.has_wgmma() {
        &[("rpa_plan", "plan_launch_prepared"), ("rpa_plan_ws", "plan_ws_launch_prepared")]
    } else {
        &[("rpa_plan", "plan_launch_prepared")]
    };
    for &(name, id) in kernels {
        let f = module.function_with_shared(name, PLAN_SHARED_BYTES).unwrap();
        let mut args = KernelArgs::new();
        args.push(cu.device_ptr(stream).0).push(num_seqs.device_ptr(stream).0).push(plan.device_ptr(stream).0);
        args.push(params);
        g.bench_function(id, |b| {
            b.iter_custom(|iters| {
                time_bursts(stream, iters, || unsafe {
                    launch_programmatic(f, 1, PLAN_THREADS, PLAN_SHARED_BYTES, raw_stream, args.pointers().as_mut_ptr())
                })
            })
        });
    }
    stream.synchronize().unwrap();
}

/// [`plan_kernel_launches`] for the warp-specialized tile kernel itself (`ws_launch_prepared`, see
/// the module docs): `rpa_plan_ws` plans a batch of one row and no sequence once (one zero-fill
/// item per KV head), then the tile kernel is launched from prepared
/// arguments with the prefill call's block size, shared memory and grid (a block per
/// multiprocessor; all but eight exit at once), untagged (it reads the stored plan and leaves it).
fn ws_kernel_launches(
    g: &mut criterion::BenchmarkGroup<criterion::measurement::WallTime>,
    stream: &Arc<CudaStream>,
    module: &ContextModule,
) {
    use kernels_gpu::attention::planner::{plan_capacity, PLAN_SHARED_BYTES, PLAN_THREADS};
    use kernels_gpu::kernels::prefill::hopper::{
        ws_consumers, ws_scratch_bytes, ws_shared_bytes, ws_threads, ws_tile_rows,
    };
    use kernels_gpu::tma::TensorMapImage;
    if !module.image.has_wgmma() {
        return;
    }
    let spec = Shape { name: "ws_1", rows: 1, seqs: 1, pages_per_seq: 1, pool_pages: 1 }.spec();
    let consumers = ws_consumers(DIM as u32, false);
    let rows = ws_tile_rows(spec.group().max(1), consumers);
    let capacity = plan_capacity(spec.max_tokens as u64, spec.max_num_seqs as u64, rows as u64);
    let plan: CudaSlice<u8> = stream.alloc_zeros(ws_scratch_bytes(capacity) as usize).unwrap();
    let zeros_i32 = |n: usize| -> CudaSlice<i32> { stream.alloc_zeros(n).unwrap() };
    let (cu, num_seqs, kv_lens, table) = (zeros_i32(2), zeros_i32(1), zeros_i32(1), zeros_i32(1));
    let q: CudaSlice<u16> = stream.alloc_zeros((HEADS * DIM) as usize).unwrap();
    let out: CudaSlice<u16> = stream.alloc_zeros((HEADS * DIM) as usize).unwrap();
    let kv: CudaSlice<u16> = stream.alloc_zeros((PAGE * 2 * KV_HEADS * DIM) as usize).unwrap();
    let (q, out, kv) = (q.device_ptr(stream).0, out.device_ptr(stream).0, kv.device_ptr(stream).0);
    let mut params = spec.kernel_params(1, spec.max_visited_keys());
    params.tile_rows = rows;
    params.plan_capacity = capacity as u32;
    let maps = [
        TensorMapImage { words: kv_tensor_map(&spec, kv).unwrap() },
        TensorMapImage { words: ws_token_tensor_map(&spec, q).unwrap() },
        TensorMapImage { words: ws_token_tensor_map(&spec, out).unwrap() },
    ];
    let (cu, num_seqs, plan) = (cu.device_ptr(stream).0, num_seqs.device_ptr(stream).0, plan.device_ptr(stream).0);
    let raw_stream = stream.cu_stream();
    let planner = module.function_with_shared("rpa_plan_ws", PLAN_SHARED_BYTES).unwrap();
    let mut args = KernelArgs::new();
    args.push(cu).push(num_seqs).push(plan).push(params);
    // SAFETY: the planner's arguments as it takes them; the plan buffer holds its scratch bytes.
    unsafe {
        launch_programmatic(planner, 1, PLAN_THREADS, PLAN_SHARED_BYTES, raw_stream, args.pointers().as_mut_ptr())
    };
    let shared = ws_shared_bytes(DIM as u32, false, consumers);
    let f = module.function_with_shared("rpa_tile_ws_bf16_bf16_d128", shared).unwrap();
    let mut args = KernelArgs::new();
    args.push(q).push(kv).push(kv_lens.device_ptr(stream).0).push(table.device_ptr(stream).0);
    args.push(cu).push(num_seqs).push(plan).push(out).push(params);
    for map in maps {
        args.push(map);
    }
    let blocks = module.multiprocessors;
    g.bench_function("ws_launch_prepared", |b| {
        b.iter_custom(|iters| {
            time_bursts(stream, iters, || unsafe {
                launch_programmatic(f, blocks, ws_threads(consumers), shared, raw_stream, args.pointers().as_mut_ptr())
            })
        })
    });
    stream.synchronize().unwrap();
}

/// `cuLaunchKernelEx` of `blocks` blocks with the programmatic-stream-serialization attribute, as
/// the attention kernels are launched on Hopper.
///
/// # Safety
/// `f` is a live function of the stream's context taking the arguments `params` points at.
unsafe fn launch_programmatic(
    f: sys::CUfunction,
    blocks: u32,
    threads: u32,
    shared: u32,
    stream: sys::CUstream,
    params: *mut *mut c_void,
) {
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: blocks,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: threads,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: shared,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: as the caller promised; `config` and `attr` outlive the call.
    unsafe { sys::cuLaunchKernelEx(&config, f, params, std::ptr::null_mut()) }.result().unwrap()
}

criterion_group!(benches, ffi_decode_validate, cuda_calls);
criterion_main!(benches);
