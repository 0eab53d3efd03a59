//! Criterion benchmarks. On a machine with a CUDA GPU: simple_add against the device-to-device
//! copy bandwidth, and ragged paged attention (Llama-3-8B geometry: 32 q heads, 8 KV heads,
//! head_dim 128, bf16, page 16, random page order, KV pool >= 400 MB so L2 does not hold it),
//! timed with CUDA events around back-to-back launches on one stream; fp8 (e4m3fn) KV, and the
//! Gemma-2 geometry (16 q / 8 KV heads, head_dim 256, soft cap, window). Without a GPU: the CPU
//! implementations (the Host handlers) on small problems.
//!
//! `cargo bench --bench kernels`; on the lent GPU machine `scripts/gpu_check.sh` runs the staged
//! binary and writes the result file under `benchmarks/results/`.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use cudarc::driver::{sys, CudaContext, CudaSlice, CudaStream, DevicePtr};
use rand::prelude::*;
use xla_gpu_kernels::host::dtype::TensorRef;
use xla_gpu_kernels::host::ops::paged_attention::{
    launch_cuda_with, run_cpu, Attributes, DeviceBuffers, KernelChoice, PagedAttention, Workspace,
};
use xla_gpu_kernels::host::ops::simple_add::SimpleAdd;
use xla_gpu_kernels::host::DType;
use xla_gpu_kernels::KERNELS;

const HEADS: usize = 32;
const KV_HEADS: usize = 8;
const DIM: usize = 128;
const PAGE: usize = 16;
/// Bytes of K+V per token (bf16).
const KV_TOKEN_BYTES: usize = 2 * KV_HEADS * DIM * 2;

fn gpu() -> Option<Arc<CudaStream>> {
    // SAFETY: probes for the driver library only.
    if !unsafe { sys::is_culib_present() } {
        return None;
    }
    CudaContext::new(0).ok().map(|ctx| ctx.new_stream().unwrap())
}

fn dptr<T>(s: &CudaSlice<T>, stream: &Arc<CudaStream>) -> *mut c_void {
    s.device_ptr(stream).0 as *mut c_void
}

/// A batch's metadata on the device.
struct Metadata {
    kv_lens: CudaSlice<i32>,
    table: CudaSlice<i32>,
    cu_q_lens: CudaSlice<i32>,
    num_seqs: CudaSlice<i32>,
}

impl Metadata {
    fn upload(stream: &Arc<CudaStream>, kv_lens: &[i32], table: &[i32], cu_q_lens: &[i32]) -> Self {
        Metadata {
            kv_lens: stream.clone_htod(kv_lens).unwrap(),
            table: stream.clone_htod(table).unwrap(),
            cu_q_lens: stream.clone_htod(cu_q_lens).unwrap(),
            num_seqs: stream.clone_htod(&[kv_lens.len() as i32]).unwrap(),
        }
    }

    fn buffers<Q, KV>(
        &self,
        stream: &Arc<CudaStream>,
        q: &CudaSlice<Q>,
        kv: &CudaSlice<KV>,
        out: &CudaSlice<Q>,
    ) -> DeviceBuffers {
        DeviceBuffers {
            q: dptr(q, stream),
            kv_pages: dptr(kv, stream),
            kv_lens: dptr(&self.kv_lens, stream),
            page_indices: dptr(&self.table, stream),
            cu_q_lens: dptr(&self.cu_q_lens, stream),
            num_seqs: dptr(&self.num_seqs, stream),
            out: dptr(out, stream),
            workspace: Workspace::Allocate,
        }
    }
}

/// Times `iters` launches with CUDA events.
fn time_gpu(stream: &Arc<CudaStream>, iters: u64, mut launch: impl FnMut()) -> Duration {
    let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let start = stream.record_event(timing).unwrap();
    for _ in 0..iters {
        launch();
    }
    let end = stream.record_event(timing).unwrap();
    end.synchronize().unwrap();
    Duration::from_secs_f64(start.elapsed_ms(&end).unwrap() as f64 * 1e-3 / 1.0)
}

fn random_bf16(rng: &mut StdRng, n: usize) -> Vec<u16> {
    (0..n).map(|_| half::bf16::from_f32(rng.gen_range(-1.0f32..1.0)).to_bits()).collect()
}

fn spec(tokens: usize, seqs: usize, pages_per_seq: usize, total_pages: usize) -> PagedAttention {
    spec_kv(tokens, seqs, pages_per_seq, total_pages, DType::BF16)
}

fn spec_kv(tokens: usize, seqs: usize, pages_per_seq: usize, total_pages: usize, kv_dtype: DType) -> PagedAttention {
    let attrs = Attributes { sm_scale: (DIM as f32).powf(-0.5), ..Default::default() };
    let geometry = Geometry { heads: HEADS, kv_heads: KV_HEADS, dim: DIM };
    spec_with(geometry, tokens, seqs, pages_per_seq, total_pages, kv_dtype, attrs)
}

/// Query heads, KV heads, head_dim.
#[derive(Clone, Copy)]
struct Geometry {
    heads: usize,
    kv_heads: usize,
    dim: usize,
}

fn spec_with(
    g: Geometry,
    tokens: usize,
    seqs: usize,
    pages_per_seq: usize,
    total_pages: usize,
    kv_dtype: DType,
    attrs: Attributes,
) -> PagedAttention {
    let null = std::ptr::null_mut();
    let q = [tokens as i64, g.heads as i64, g.dim as i64];
    let kv = [total_pages as i64, PAGE as i64, 2 * g.kv_heads as i64, g.dim as i64];
    let (s, table, cu) = ([seqs as i64], [seqs as i64, pages_per_seq as i64], [seqs as i64 + 1]);
    let t = |dtype, dims| TensorRef { data: null, dtype, dims };
    PagedAttention::from_tensors(
        &t(DType::BF16, &q),
        &t(kv_dtype, &kv),
        &t(DType::S32, &s),
        &t(DType::S32, &table),
        &t(DType::S32, &cu),
        &t(DType::S32, &[1]),
        &t(DType::BF16, &q),
        attrs,
    )
    .unwrap()
}

/// A ragged batch: (q_len, kv_len) per sequence, vLLM-style name.
struct Batch {
    name: &'static str,
    seqs: Vec<(usize, usize)>,
}

fn batches() -> Vec<Batch> {
    let decode = |name, b, ctx| Batch { name, seqs: vec![(1, ctx); b] };
    let mut mix = vec![(2048, 2048); 2];
    mix.extend(vec![(1, 1024); 32]);
    vec![
        decode("decode_b1_ctx32k", 1, 32768),
        decode("decode_b16_ctx4k", 16, 4096),
        decode("decode_b32_ctx4k", 32, 4096),
        decode("decode_b64_ctx2k", 64, 2048),
        decode("decode_b64_ctx8k", 64, 8192),
        decode("decode_b128_ctx2k", 128, 2048),
        Batch { name: "mix_2q2k_32q1s1k", seqs: mix },
        Batch { name: "prefill_q2k", seqs: vec![(2048, 2048)] },
    ]
}

fn bench_gpu(c: &mut Criterion, stream: &Arc<CudaStream>) {
    let mut rng = StdRng::seed_from_u64(7);
    // Device-to-device copy: the bandwidth ceiling measured in the same run.
    let bytes = 1usize << 30;
    let src: CudaSlice<u8> = stream.clone_htod(&vec![1u8; bytes]).unwrap();
    let mut dst: CudaSlice<u8> = stream.alloc_zeros(bytes).unwrap();
    let mut g = c.benchmark_group("copy");
    g.throughput(Throughput::Bytes(2 * bytes as u64));
    g.bench_function("dtod_1GiB", |b| {
        b.iter_custom(|iters| time_gpu(stream, iters, || stream.memcpy_dtod(&src, &mut dst).unwrap()))
    });
    g.finish();
    drop((src, dst));

    let mut g = c.benchmark_group("simple_add");
    let n = 1usize << 26;
    for dtype in [DType::F32, DType::BF16] {
        let elem = dtype.size_bytes().unwrap();
        let mut input = || -> CudaSlice<u8> {
            stream.clone_htod(&(0..n * elem).map(|_| rng.gen::<u8>() & 0x3f).collect::<Vec<_>>()).unwrap()
        };
        let (a, b_in) = (input(), input());
        let out: CudaSlice<u8> = stream.alloc_zeros(n * elem).unwrap();
        let op = SimpleAdd { dtype, len: n };
        g.throughput(Throughput::Bytes(3 * (n * elem) as u64));
        g.bench_function(BenchmarkId::new(dtype.name(), n), |b| {
            b.iter_custom(|iters| {
                time_gpu(stream, iters, || {
                    unsafe {
                        op.launch_cuda(
                            &KERNELS,
                            stream.cu_stream(),
                            dptr(&a, stream),
                            dptr(&b_in, stream),
                            dptr(&out, stream),
                        )
                    }
                    .unwrap()
                })
            })
        });
    }
    g.finish();

    // One KV pool for every batch: 2.1 GiB of random bf16, pages handed out in random order.
    let pool_tokens = 64 * 8192 + 4096;
    let total_pages = pool_tokens / PAGE;
    let kv: CudaSlice<u16> = stream.clone_htod(&random_bf16(&mut rng, pool_tokens * 2 * KV_HEADS * DIM)).unwrap();
    let mut g = c.benchmark_group("paged_attention_bf16_32q8kv_d128_p16");
    for batch in batches() {
        let seqs = batch.seqs.len();
        let max_kv = batch.seqs.iter().map(|s| s.1).max().unwrap();
        let pages_per_seq = max_kv.div_ceil(PAGE);
        let mut order: Vec<i32> = (0..total_pages as i32).collect();
        order.shuffle(&mut rng);
        let mut table = vec![0i32; seqs * pages_per_seq];
        let mut next = 0;
        for (i, &(_, kv_len)) in batch.seqs.iter().enumerate() {
            for p in 0..kv_len.div_ceil(PAGE) {
                table[i * pages_per_seq + p] = order[next % total_pages];
                next += 1;
            }
        }
        let mut cu = vec![0i32];
        for &(q, _) in &batch.seqs {
            cu.push(cu.last().unwrap() + q as i32);
        }
        let tokens = *cu.last().unwrap() as usize;
        let kv_lens: Vec<i32> = batch.seqs.iter().map(|s| s.1 as i32).collect();
        let q: CudaSlice<u16> = stream.clone_htod(&random_bf16(&mut rng, tokens * HEADS * DIM)).unwrap();
        let out: CudaSlice<u16> = stream.alloc_zeros(tokens * HEADS * DIM).unwrap();
        let meta = Metadata::upload(stream, &kv_lens, &table, &cu);
        let op = spec(tokens, seqs, pages_per_seq, total_pages);
        let bufs = meta.buffers(stream, &q, &kv, &out);
        let kv_bytes: usize = batch.seqs.iter().map(|s| s.1 * KV_TOKEN_BYTES).sum();
        g.throughput(Throughput::Bytes((kv_bytes + 2 * tokens * HEADS * DIM * 2) as u64));
        for (label, kernel) in [
            ("pipelined", KernelChoice::Pipelined),
            ("tensor_core", KernelChoice::TensorCore),
            ("general", KernelChoice::General),
        ] {
            g.bench_function(BenchmarkId::new(label, batch.name), |b| {
                b.iter_custom(|iters| {
                    time_gpu(stream, iters, || {
                        unsafe { launch_cuda_with(&KERNELS, stream.cu_stream(), &op, bufs, kernel) }.unwrap()
                    })
                })
            });
        }
    }
    g.finish();
    drop(kv);

    // fp8 (e4m3fn) KV: half the bytes of the bf16 cells above, same geometry; finite random bytes.
    let kv8: CudaSlice<u8> = stream
        .clone_htod(&(0..pool_tokens * 2 * KV_HEADS * DIM).map(|_| rng.gen::<u8>() & 0xf7).collect::<Vec<_>>())
        .unwrap();
    let mut g = c.benchmark_group("paged_attention_bf16q_e4m3kv_32q8kv_d128_p16");
    for (name, b, ctx) in [("decode_b32_ctx4k", 32usize, 4096usize), ("decode_b64_ctx8k", 64, 8192)] {
        let pages_per_seq = ctx / PAGE;
        let mut order: Vec<i32> = (0..total_pages as i32).collect();
        order.shuffle(&mut rng);
        let table: Vec<i32> = order[..b * pages_per_seq].to_vec();
        let cu: Vec<i32> = (0..=b as i32).collect();
        let q: CudaSlice<u16> = stream.clone_htod(&random_bf16(&mut rng, b * HEADS * DIM)).unwrap();
        let out: CudaSlice<u16> = stream.alloc_zeros(b * HEADS * DIM).unwrap();
        let meta = Metadata::upload(stream, &vec![ctx as i32; b], &table, &cu);
        let mut op = spec_kv(b, b, pages_per_seq, total_pages, DType::F8E4M3FN);
        op.attrs.k_scale = Some(0.5);
        op.attrs.v_scale = Some(0.25);
        let bufs = meta.buffers(stream, &q, &kv8, &out);
        g.throughput(Throughput::Bytes((b * ctx * KV_TOKEN_BYTES / 2 + 2 * b * HEADS * DIM * 2) as u64));
        for (label, kernel) in [("pipelined", KernelChoice::Pipelined), ("tensor_core", KernelChoice::TensorCore)] {
            g.bench_function(BenchmarkId::new(label, name), |bch| {
                bch.iter_custom(|iters| {
                    time_gpu(stream, iters, || {
                        unsafe { launch_cuda_with(&KERNELS, stream.cu_stream(), &op, bufs, kernel) }.unwrap()
                    })
                })
            });
        }
    }
    g.finish();
    drop(kv8);

    // Gemma-2 geometry (G4): 16 q / 8 KV heads, head_dim 256, soft cap 50, 4096-key window: the
    // pipelined kernel's 32-key tiles; the window bounds the keys a decode row reads.
    let g4 = Geometry { heads: 16, kv_heads: 8, dim: 256 };
    let (b, ctx) = (32usize, 8192usize);
    let tokens = b * ctx + 4096;
    let kv: CudaSlice<u16> = stream.clone_htod(&random_bf16(&mut rng, tokens * 2 * g4.kv_heads * g4.dim)).unwrap();
    let total_pages = tokens / PAGE;
    let pages_per_seq = ctx / PAGE;
    let mut order: Vec<i32> = (0..total_pages as i32).collect();
    order.shuffle(&mut rng);
    let table: Vec<i32> = order[..b * pages_per_seq].to_vec();
    let cu: Vec<i32> = (0..=b as i32).collect();
    let q: CudaSlice<u16> = stream.clone_htod(&random_bf16(&mut rng, b * g4.heads * g4.dim)).unwrap();
    let out: CudaSlice<u16> = stream.alloc_zeros(b * g4.heads * g4.dim).unwrap();
    let meta = Metadata::upload(stream, &vec![ctx as i32; b], &table, &cu);
    let attrs = Attributes {
        sm_scale: (g4.dim as f32).powf(-0.5),
        soft_cap: Some(50.0),
        sliding_window: Some(4096),
        ..Default::default()
    };
    let op = spec_with(g4, b, b, pages_per_seq, total_pages, DType::BF16, attrs);
    let bufs = meta.buffers(stream, &q, &kv, &out);
    let mut g = c.benchmark_group("paged_attention_bf16_16q8kv_d256_p16_cap50_window4k");
    // KV read: the window's 4096 keys of each row.
    g.throughput(Throughput::Bytes((b * 4096 * 2 * g4.kv_heads * g4.dim * 2 + 2 * b * g4.heads * g4.dim * 2) as u64));
    g.bench_function(BenchmarkId::new("pipelined", "decode_b32_ctx8k"), |bch| {
        bch.iter_custom(|iters| {
            time_gpu(stream, iters, || {
                unsafe { launch_cuda_with(&KERNELS, stream.cu_stream(), &op, bufs, KernelChoice::Pipelined) }.unwrap()
            })
        })
    });
    g.finish();
}

fn bench_cpu(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(7);
    let n = 1 << 20;
    let a: Vec<u8> = (0..n * 4).map(|_| rng.gen::<u8>() & 0x3f).collect();
    let mut out = vec![0u8; n * 4];
    let op = SimpleAdd { dtype: DType::F32, len: n };
    let mut g = c.benchmark_group("cpu");
    g.throughput(Throughput::Bytes(3 * 4 * n as u64));
    g.bench_function("simple_add_f32_1M", |b| b.iter(|| op.run_cpu(&a, &a, &mut out).unwrap()));
    let (seqs, ctx) = (4, 512);
    let pages_per_seq = ctx / PAGE;
    let total_pages = seqs * pages_per_seq;
    let kv: Vec<u8> =
        random_bf16(&mut rng, total_pages * PAGE * 2 * KV_HEADS * DIM).iter().flat_map(|x| x.to_le_bytes()).collect();
    let q: Vec<u8> = random_bf16(&mut rng, seqs * HEADS * DIM).iter().flat_map(|x| x.to_le_bytes()).collect();
    let table: Vec<i32> = (0..total_pages as i32).collect();
    let kv_lens = vec![ctx as i32; seqs];
    let cu: Vec<i32> = (0..=seqs as i32).collect();
    let spec = spec(seqs, seqs, pages_per_seq, total_pages);
    let mut out = vec![0u8; q.len()];
    g.throughput(Throughput::Bytes((seqs * ctx * KV_TOKEN_BYTES) as u64));
    g.bench_function("paged_attention_decode_b4_ctx512", |b| {
        b.iter(|| run_cpu(&spec, &q, &kv, &kv_lens, &table, &cu, &[seqs as i32], &mut out).unwrap())
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    match gpu() {
        Some(stream) => bench_gpu(c, &stream),
        None => {
            eprintln!("no CUDA GPU: benchmarking the CPU implementations only");
            bench_cpu(c)
        }
    }
}

criterion_group! {
    name = kernels;
    config = Criterion::default().sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = benches
}
criterion_main!(kernels);
