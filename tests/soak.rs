//! Soak: many random calls (valid and invalid shapes, dtypes, attributes and metadata; simple_add
//! and paged attention) through the C API from 8 threads, each on its own stream. Asserts: no
//! crash, every valid call succeeds, every invalid one is rejected with a message, sampled outputs
//! match the CPU implementation, and device memory and the loaded-module count are the same after
//! the first 1 000 calls and at the end.
//!
//! `XGK_SOAK_CALLS` (default 100 000) sets the number of calls; `XGK_SOAK_REPORT` a file to write
//! the figures to. Needs a CUDA GPU: `cargo test --release --test soak -- --include-ignored`.

mod common;

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use common::*;
use cudarc::driver::{result, CudaContext, CudaSlice, CudaStream, DevicePtr};
use rand::prelude::*;
use xla_gpu_kernels::host::capi::{XgkPagedAttentionAttrs, XgkTensor, ALLOCATE_WORKSPACE};
use xla_gpu_kernels::host::ops::paged_attention::{workspace_bytes_with, KernelChoice};
use xla_gpu_kernels::host::DType;
use xla_gpu_kernels::{xgk_paged_attention, xgk_simple_add, KERNELS};

const THREADS: usize = 8;
/// Calls before the memory baseline (everything loaded, pools warm).
const WARM_CALLS: usize = 1000;
/// One valid attention call in this many is downloaded and checked against the CPU.
const CHECK_EVERY: usize = 20;

/// A case uploaded once, with its CPU reference.
struct DeviceCase {
    case: Case,
    cpu: Vec<u8>,
    q: CudaSlice<u8>,
    kv: CudaSlice<u8>,
    kv_lens: CudaSlice<i32>,
    table: CudaSlice<i32>,
    cu: CudaSlice<i32>,
    ns: CudaSlice<i32>,
    out: CudaSlice<u8>,
    workspace: CudaSlice<u8>,
    workspace_bytes: usize,
}

fn ptr<T>(s: &CudaSlice<T>, stream: &Arc<CudaStream>) -> *mut c_void {
    s.device_ptr(stream).0 as *mut c_void
}

fn random_device_case(rng: &mut StdRng, stream: &Arc<CudaStream>) -> DeviceCase {
    let q_dtype = [DType::F32, DType::F16, DType::BF16][rng.gen_range(0..3)];
    let kv_dtype = match rng.gen_range(0..4) {
        0 => DType::F8E4M3FN,
        1 => DType::F8E5M2,
        _ => q_dtype,
    };
    let head_dim = [64, 128, 256, 96][rng.gen_range(0..4)];
    let (nkv, group) = [(1, 1), (2, 4), (1, 8), (4, 2)][rng.gen_range(0..4)];
    let page = [1, 8, 16, 32][rng.gen_range(0..4)];
    let seqs: Vec<(usize, usize)> = (0..rng.gen_range(1..5))
        .map(|_| {
            let kv = rng.gen_range(1..700);
            (if rng.gen_bool(0.5) { 1 } else { rng.gen_range(1..=kv.min(24)) }, kv)
        })
        .collect();
    let pad = rng.gen_range(0..3);
    let mut case = random_case(rng, q_dtype, kv_dtype, head_dim, nkv, group, page, &seqs, pad);
    case.sm_scale = rng.gen_range(0.05..0.2);
    match rng.gen_range(0..8) {
        0 => case.sliding_window = Some(rng.gen_range(1..300)),
        1 => case.soft_cap = Some(biting_cap(&case, rng)),
        2 if kv_dtype != q_dtype => {
            case.k_scale = Some(rng.gen_range(0.2..2.0));
            case.v_scale = Some(rng.gen_range(0.2..2.0));
        }
        // invalid metadata: the kernels must stay in bounds and do what the CPU does
        3 => case.page_indices.iter_mut().step_by(3).for_each(|p| *p = 1 << 30),
        4 => case.kv_lens[0] = i32::MAX,
        5 => case.num_seqs = 1 << 20,
        _ => {}
    }
    let cpu = case.cpu_output();
    let choice = KernelChoice::configured().unwrap();
    let workspace_bytes = workspace_bytes_with(&KERNELS, 0, &case.spec(), choice).unwrap();
    DeviceCase {
        q: stream.clone_htod(&case.q).unwrap(),
        kv: stream.clone_htod(&case.kv).unwrap(),
        kv_lens: stream.clone_htod(&case.kv_lens).unwrap(),
        table: stream.clone_htod(&case.page_indices).unwrap(),
        cu: stream.clone_htod(&case.cu_q_lens).unwrap(),
        ns: stream.clone_htod(&[case.num_seqs]).unwrap(),
        out: stream.alloc_zeros(case.out_bytes()).unwrap(),
        workspace: stream.alloc_zeros(workspace_bytes.max(1)).unwrap(),
        workspace_bytes,
        cpu,
        case,
    }
}

/// The case's 7 dims arrays (q, kv, kv_lens, page_indices, cu_q_lens, num_seqs, out).
fn dims(c: &Case) -> [Vec<i64>; 7] {
    let q = c.q_dims().to_vec();
    let s = c.max_num_seqs as i64;
    [q.clone(), c.kv_dims().to_vec(), vec![s], vec![s, c.pages_per_seq as i64], vec![s + 1], vec![1], q]
}

fn attrs(c: &Case) -> XgkPagedAttentionAttrs {
    let mut a = XgkPagedAttentionAttrs { sm_scale: c.sm_scale, ..Default::default() };
    if let Some(w) = c.sliding_window {
        (a.has_sliding_window, a.sliding_window) = (1, w as i64);
    }
    if let Some(v) = c.soft_cap {
        (a.has_soft_cap, a.soft_cap) = (1, v);
    }
    if let Some(v) = c.k_scale {
        (a.has_k_scale, a.k_scale) = (1, v);
    }
    if let Some(v) = c.v_scale {
        (a.has_v_scale, a.v_scale) = (1, v);
    }
    a
}

/// Calls the C API on `d` (optionally with one descriptor or attribute broken); returns the code
/// and message.
fn call_attention(d: &DeviceCase, stream: &Arc<CudaStream>, allocate: bool, breakage: Option<u32>) -> (i32, String) {
    let c = &d.case;
    let mut dm = dims(c);
    let dtypes = [c.q_dtype, c.kv_dtype, DType::S32, DType::S32, DType::S32, DType::S32, c.q_dtype];
    let mut codes: Vec<i32> = dtypes.iter().map(|t| t.to_xla()).collect();
    let mut a = attrs(c);
    match breakage {
        Some(0) => codes[0] = DType::S32.to_xla(), // q of an integer dtype
        Some(1) => dm[1][3] += 1,                  // head_dim of kv differs
        Some(2) => dm[4][0] += 1,                  // cu_q_lens of the wrong length
        Some(3) => codes[2] = DType::F32.to_xla(), // kv_lens not int32
        Some(4) => dm[0].push(1),                  // q of rank 4
        Some(5) => (a.has_sliding_window, a.sliding_window) = (1, 0), // window 0
        Some(6) => (a.has_soft_cap, a.soft_cap) = (1, 0.0), // soft cap 0
        Some(7) => dm[1][2] = 3,                   // odd combined KV head axis
        _ => {}
    }
    let ptrs = [
        ptr(&d.q, stream),
        ptr(&d.kv, stream),
        ptr(&d.kv_lens, stream),
        ptr(&d.table, stream),
        ptr(&d.cu, stream),
        ptr(&d.ns, stream),
        ptr(&d.out, stream),
    ];
    let descs: Vec<XgkTensor> = (0..7)
        .map(|i| XgkTensor { data: ptrs[i], dtype: codes[i], rank: dm[i].len() as i64, dims: dm[i].as_ptr() })
        .collect();
    let mut err = [0 as c_char; 512];
    let (ws, ws_bytes) = if allocate {
        (std::ptr::null_mut(), ALLOCATE_WORKSPACE)
    } else {
        (ptr(&d.workspace, stream), d.workspace_bytes)
    };
    let code = unsafe {
        xgk_paged_attention(1, stream.cu_stream() as _, descs.as_ptr(), &a, ws, ws_bytes, err.as_mut_ptr(), err.len())
    };
    (code, unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned())
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    attention: AtomicU64,
    simple_add: AtomicU64,
    rejected: AtomicU64,
    checked: AtomicU64,
}

#[allow(clippy::too_many_arguments)]
fn worker(
    id: usize,
    ctx: Arc<CudaContext>,
    calls: usize,
    warm_calls: usize,
    barrier: &Barrier,
    counters: &Counters,
    seed: u64,
) {
    ctx.bind_to_thread().unwrap();
    let stream = ctx.new_stream().unwrap();
    let mut rng = StdRng::seed_from_u64(seed ^ (id as u64) << 32);
    let cases: Vec<DeviceCase> = (0..12).map(|_| random_device_case(&mut rng, &stream)).collect();
    // simple_add: random inputs of the largest size once; references per dtype.
    let max_n = 1 << 17;
    let a_host: Vec<f64> = (0..max_n).map(|_| rng.gen_range(-100.0..100.0)).collect();
    let b_host: Vec<f64> = (0..max_n).map(|_| rng.gen_range(-100.0..100.0)).collect();
    let add_dtypes = [DType::F32, DType::F16, DType::BF16];
    // Per dtype: device a, b, out, and the expected sum's bytes.
    type AddBuffers = (CudaSlice<u8>, CudaSlice<u8>, CudaSlice<u8>, Vec<u8>);
    let add_bufs: Vec<AddBuffers> = add_dtypes
        .iter()
        .map(|&t| {
            let (a, b) = (encode(t, &a_host), encode(t, &b_host));
            let mut want = vec![0u8; a.len()];
            xla_gpu_kernels::host::ops::simple_add::SimpleAdd { dtype: t, len: max_n }
                .run_cpu(&a, &b, &mut want)
                .unwrap();
            (stream.clone_htod(&a).unwrap(), stream.clone_htod(&b).unwrap(), stream.alloc_zeros(a.len()).unwrap(), want)
        })
        .collect();
    for i in 0..calls {
        if i == warm_calls {
            stream.synchronize().unwrap();
            barrier.wait(); // baseline taken here
            barrier.wait();
        }
        counters.calls.fetch_add(1, Ordering::Relaxed);
        match rng.gen_range(0..100) {
            0..=9 => {
                let k = rng.gen_range(0..3);
                let (t, (a, b, out, want)) = (add_dtypes[k], &add_bufs[k]);
                let n = rng.gen_range(1..=max_n);
                let bad = rng.gen_bool(0.2);
                let dims_a = [n as i64];
                let dims_b = [if bad { n as i64 + 1 } else { n as i64 }];
                let descs = [
                    XgkTensor { data: ptr(a, &stream), dtype: t.to_xla(), rank: 1, dims: dims_a.as_ptr() },
                    XgkTensor { data: ptr(b, &stream), dtype: t.to_xla(), rank: 1, dims: dims_b.as_ptr() },
                    XgkTensor { data: ptr(out, &stream), dtype: t.to_xla(), rank: 1, dims: dims_a.as_ptr() },
                ];
                let mut err = [0 as c_char; 256];
                let code =
                    unsafe { xgk_simple_add(1, stream.cu_stream() as _, descs.as_ptr(), err.as_mut_ptr(), err.len()) };
                if bad {
                    let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned();
                    assert!(
                        code == 1 && msg.contains("shape"),
                        "thread {id} call {i}: bad simple_add gave {code} {msg:?}"
                    );
                    counters.rejected.fetch_add(1, Ordering::Relaxed);
                } else {
                    assert_eq!(code, 0, "thread {id} call {i}: simple_add failed");
                    counters.simple_add.fetch_add(1, Ordering::Relaxed);
                    if i % CHECK_EVERY == 0 {
                        let got = stream.clone_dtoh(out).unwrap();
                        let bytes = n * t.size_bytes().unwrap();
                        assert_eq!(&got[..bytes], &want[..bytes], "thread {id} call {i}: simple_add {t} n={n}");
                        counters.checked.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            10..=19 => {
                let d = &cases[rng.gen_range(0..cases.len())];
                let (code, msg) = call_attention(d, &stream, false, Some(rng.gen_range(0..8)));
                assert!(code == 1 && !msg.is_empty(), "thread {id} call {i}: invalid call gave {code} {msg:?}");
                counters.rejected.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                let d = &cases[rng.gen_range(0..cases.len())];
                // SAFETY: `out` is a live allocation of this many bytes, used on this stream only.
                unsafe {
                    result::memset_d8_async(ptr(&d.out, &stream) as u64, 0xFF, d.case.out_bytes(), stream.cu_stream())
                }
                .unwrap();
                let (code, msg) = call_attention(d, &stream, rng.gen_bool(0.25), None);
                assert_eq!(code, 0, "thread {id} call {i}: attention failed: {msg}");
                counters.attention.fetch_add(1, Ordering::Relaxed);
                if i % CHECK_EVERY == 0 {
                    let got = stream.clone_dtoh(&d.out).unwrap();
                    compare(&d.case, &got, &d.cpu, &format!("thread {id} call {i}"));
                    counters.checked.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
    if calls <= warm_calls {
        barrier.wait();
        barrier.wait();
    }
    stream.synchronize().unwrap();
    // The end figures are taken here, while this thread's buffers still exist (as at the baseline).
    barrier.wait();
    barrier.wait();
}

fn used_device_bytes() -> usize {
    let (free, total) = result::mem_get_info().unwrap();
    total - free
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn soak_random_calls_from_threads_on_their_own_streams() {
    let total: usize = std::env::var("XGK_SOAK_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let seed: u64 = rand::random();
    println!("soak: {total} calls from {THREADS} threads, seed {seed}");
    let ctx = CudaContext::new(0).expect("a CUDA GPU");
    ctx.bind_to_thread().unwrap();
    let per_thread = total / THREADS;
    let warm = (WARM_CALLS / THREADS).min(per_thread);
    let barrier = Barrier::new(THREADS + 1);
    let counters = Counters::default();
    let t0 = std::time::Instant::now();
    let (mut base_mem, mut base_modules, mut end_mem, mut end_modules) = (0, 0, 0, 0);
    std::thread::scope(|s| {
        for id in 0..THREADS {
            let (ctx, barrier, counters) = (ctx.clone(), &barrier, &counters);
            s.spawn(move || worker(id, ctx, per_thread, warm, barrier, counters, seed));
        }
        barrier.wait();
        ctx.synchronize().unwrap();
        (base_mem, base_modules) = (used_device_bytes(), KERNELS.loaded_contexts());
        barrier.wait();
        barrier.wait();
        ctx.synchronize().unwrap();
        (end_mem, end_modules) = (used_device_bytes(), KERNELS.loaded_contexts());
        barrier.wait();
    });
    let drift = end_mem as i64 - base_mem as i64;
    let c = &counters;
    let report = format!(
        "soak: {} calls ({} attention, {} simple_add, {} rejected as invalid, {} outputs checked against the CPU) \
         from {THREADS} threads in {:.1} s, 0 failures; device memory used after {} calls {} MiB, at the end {} MiB \
         (drift {} bytes); loaded modules {} -> {}; seed {seed}",
        c.calls.load(Ordering::Relaxed),
        c.attention.load(Ordering::Relaxed),
        c.simple_add.load(Ordering::Relaxed),
        c.rejected.load(Ordering::Relaxed),
        c.checked.load(Ordering::Relaxed),
        t0.elapsed().as_secs_f64(),
        warm * THREADS,
        base_mem >> 20,
        end_mem >> 20,
        drift,
        base_modules,
        end_modules,
    );
    println!("{report}");
    if let Ok(path) = std::env::var("XGK_SOAK_REPORT") {
        std::fs::write(path, format!("{report}\n")).unwrap();
    }
    assert_eq!(base_modules, end_modules, "modules loaded after the warm-up");
    assert!(drift.abs() <= 8 << 20, "device memory drifted by {drift} bytes");
}
