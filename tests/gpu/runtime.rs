//! The runtime under the ops: the simple add, the kernel images (cubin, Hopper PTX, portable
//! PTX) with and without programmatic launches, and the `wgmma` primitives.

use super::*;

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
