//! The prefill tile kernels: sm_80 tiles, the `wgmma` tiles and the warp-specialized Hopper
//! kernel, their graph replays, and tile plans of many and long sequences.

use super::*;

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
