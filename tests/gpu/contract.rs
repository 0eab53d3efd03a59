//! The op's contract whatever kernel serves a call: every feature against the CPU, a 128k-key
//! context, invalid metadata kept in bounds, the workspace's modes, and a failed allocation.

use super::*;

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
