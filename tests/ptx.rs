//! The embedded PTX images: every image exports every kernel the host launches, and `ptxas` (from
//! the `nvidia-cuda-nvcc` wheel; path in `XGK_PTXAS` or on PATH) accepts each for the devices it
//! runs on (sm_80 and sm_90 for the portable image, sm_90a for the Hopper one) with no
//! local-memory stack frame and no spills, except the head_dim-256 warp-specialized tile kernels
//! on sm_90a (32 bytes of stack in their producer warp; see below). Fails (not skips) when ptxas
//! is missing.

use std::process::Command;

#[path = "support/ptxas.rs"]
mod support;
use support::ptxas;

#[test]
fn ptx_exports_every_kernel() {
    let archs: Vec<&str> = xla_gpu_kernels::PTX_IMAGES.iter().map(|i| i.arch).collect();
    if option_env!("XGK_CUDA_ARCHS").is_none() {
        assert_eq!(archs, ["sm_90a", "sm_80"], "the default images, most specific first");
    }
    for image in xla_gpu_kernels::PTX_IMAGES {
        assert!(image.ptx.ends_with('\0'));
        check_exports(image.ptx, image.arch);
        check_grid_dependency(image);
        // The warpgroup MMA self-test (tests/gpu/runtime.rs) and the queue probe exist in the
        // Hopper image only.
        let hopper = image.has_grid_dependency_control();
        assert_eq!(image.ptx.contains(".entry wgmma_selftest_bf16("), hopper, "{}", image.arch);
        assert_eq!(image.ptx.contains(".entry hgmma_queue_probe("), hopper, "{}", image.arch);
        assert_eq!(image.ptx.contains("wgmma.mma_async.sync.aligned"), hopper, "{}", image.arch);
        // The warp-specialized kernels' plan too.
        assert_eq!(image.ptx.contains(".entry rpa_plan_ws("), hopper, "{}", image.arch);
        for q in ["f16", "bf16"] {
            for d in [64, 128] {
                for family in ["tile_wg", "tile_ws", "mix"] {
                    // `rpa_mix_*`: a mixed batch in one launch (`kernels::mix`).
                    let entry = format!(".entry rpa_{family}_{q}_{q}_d{d}(");
                    assert_eq!(image.ptx.contains(&entry), hopper, "{}: {entry}", image.arch);
                }
            }
        }
    }
}

/// The warp-specialized and mix kernels read their tensor maps where they lie, in the parameter
/// space (`kernels_gpu::tma::param_address!`): each entry takes the address of its K/V map's parameter
/// (and no other), each so named is a 128-byte parameter declared `.align 64` (build.rs), and no
/// kernel writes or fences a tensor map in global memory. The `mov.u64 ..., <entry>_param_<n>`
/// operands are parsed here on their own, not through build.rs's `align_param_maps`, which made
/// the declarations checked: a shared parser would pass its own mistakes.
#[test]
fn tensor_maps_are_read_in_the_parameter_space() {
    let image = xla_gpu_kernels::PTX_IMAGES.iter().find(|i| i.arch == "sm_90a").expect("the Hopper image");
    let ptx = image.ptx.trim_end_matches('\0');
    assert!(!ptx.contains("fence.proxy.tensormap"), "a tensor map written to global memory");
    let mut entries = 0;
    for entry in ptx.split(".entry ").skip(1) {
        let name = entry.split('(').next().unwrap_or_default();
        if !(name.starts_with("rpa_tile_ws_") || name.starts_with("rpa_mix_")) {
            continue;
        }
        entries += 1;
        let named: Vec<&str> = entry
            .lines()
            .filter_map(|l| l.trim().strip_prefix("mov.u64"))
            .filter_map(|r| r.split_once(',').map(|(_, o)| o.trim().trim_end_matches(';').trim()))
            .filter(|o| o.contains("_param_"))
            .collect();
        // The K/V map: parameter 9 of a tile kernel, 11 of a mix (after its decode parameters).
        let kv = if name.starts_with("rpa_mix_") { 11 } else { 9 };
        assert!(named.contains(&format!("{name}_param_{kv}").as_str()), "{name}: its K/V map's address {named:?}");
        for symbol in named {
            assert!(symbol.starts_with(&format!("{name}_param_")), "{name} names {symbol}");
            let declaration = format!(".param .align 64 .b8 {symbol}[128]");
            assert!(entry.contains(&declaration), "{name}: {declaration}");
        }
    }
    assert_eq!(entries, 14 + 4, "the warp-specialized and the mix kernels");
}

/// Images with grid-dependency control wait, in every attention kernel (each is launched
/// programmatically), before it touches memory: the wait precedes the first global load, store
/// and `cp.async` of the entry's body. Other images have no `griddepcontrol` at all.
fn check_grid_dependency(image: &xla_gpu_kernels::host::runtime::PtxImage) {
    let ptx = image.ptx.trim_end_matches('\0');
    if !image.has_grid_dependency_control() {
        assert!(!ptx.contains("griddepcontrol"), "{}: griddepcontrol in a portable image", image.arch);
        return;
    }
    let mut checked = 0;
    for entry in ptx.split(".entry ").skip(1) {
        let name = entry.split('(').next().unwrap_or_default();
        if !name.starts_with("rpa_") {
            continue;
        }
        let wait = entry.find("griddepcontrol.wait;");
        let wait = wait.unwrap_or_else(|| panic!("{}: {name} never waits for the grid it depends on", image.arch));
        for access in ["ld.global", "st.global", "cp.async", "atom.global", "red.global"] {
            if let Some(at) = entry.find(access) {
                assert!(wait < at, "{}: {name} has {access} before griddepcontrol.wait", image.arch);
            }
        }
        assert!(entry.contains("griddepcontrol.launch_dependents;"), "{}: {name} never releases", image.arch);
        checked += 1;
    }
    assert!(checked >= 40, "{}: only {checked} attention kernels found", image.arch);
}

fn check_exports(ptx: &str, arch: &str) {
    let mut names = vec!["simple_add_f32".to_string(), "simple_add_f16".into(), "simple_add_bf16".into()];
    names.extend(["simple_add_f32_x1".to_string(), "simple_add_f16_x1".into(), "simple_add_bf16_x1".into()]);
    for q in ["f32", "f16", "bf16"] {
        names.push(format!("rpa_combine_{q}"));
        names.push(format!("rpa_combine_groups_{q}"));
        for kv in [q, "e4m3", "e5m2"] {
            for dpl in [2, 4, 8] {
                names.push(format!("rpa_{q}_{kv}_dpl{dpl}"));
            }
        }
    }
    for q in ["f16", "bf16"] {
        for kv in [q, "e4m3", "e5m2"] {
            for d in [64, 80, 96, 112, 128] {
                names.push(format!("rpa_mma_{q}_{kv}_d{d}"));
            }
        }
    }
    for q in ["f16", "bf16"] {
        for kv in [q, "e4m3", "e5m2"] {
            for d in [64, 128] {
                names.push(format!("rpa_pipe_{q}_{kv}_d{d}"));
            }
        }
        names.push(format!("rpa_pipe_{q}_{q}_d256"));
        // A mixed batch's decode sequences (`RpaParams::decode_apart`).
        for d in [64, 128, 256] {
            names.push(format!("rpa_pipe_seq_{q}_{q}_d{d}"));
        }
        for d in [64, 128] {
            // Key rows: every KV dtype (fp8 takes them by default on an H100 at head_dim 128).
            for kv in [q, "e4m3", "e5m2"] {
                names.push(format!("rpa_pipe_kr_{q}_{kv}_d{d}"));
            }
            names.push(format!("rpa_pipe_kr_seq_{q}_{q}_d{d}"));
        }
        for d in [64, 128] {
            names.push(format!("rpa_tile_{q}_{q}_d{d}"));
        }
    }
    names.push("rpa_plan".into());
    for name in names {
        assert!(ptx.contains(&format!(".entry {name}(")), "kernel {name} missing from the PTX");
    }
    assert!(ptx.contains(&format!(".target {arch}")), "{arch}: wrong .target");
}

#[test]
fn ptxas_accepts_the_ptx_without_spills() {
    let dir = std::env::temp_dir().join(format!("xgk-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (image, arch) in xla_gpu_kernels::PTX_IMAGES.iter().flat_map(|i| {
        if i.arch == "sm_80" {
            vec![(i, "sm_80"), (i, "sm_90")]
        } else {
            vec![(i, i.arch)]
        }
    }) {
        let file = dir.join(format!("kernels_{}.ptx", image.arch));
        std::fs::write(&file, image.ptx.trim_end_matches('\0')).unwrap();
        let out = Command::new(ptxas())
            .args(["-v", &format!("-arch={arch}")])
            .arg(&file)
            .args(["-o", "/dev/null"])
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "ptxas {arch} failed:\n{log}");
        let entries = log.matches("Compiling entry function").count();
        assert!(entries >= 82, "{arch}: only {entries} entries compiled");
        // The production wgmma kernels keep their asynchronous pipeline (the self-test kernel may
        // be serialized: it checks layouts, not speed).
        for line in log.lines().filter(|l| l.contains("wgmma.mma_async instructions are serialized")) {
            assert!(!line.contains("rpa_"), "{arch}: {line}");
        }
        // Warpgroup register budgets take effect (ptxas ignores `setmaxnreg` where the register
        // count at entry is not fixed: `#[kernel(max_threads = N)]` fixes it).
        assert!(!log.contains("'setmaxnreg' ignored"), "{arch}: {log}");
        // No local memory in any kernel except the fp8 warp-specialized twins (below) and the
        // head_dim-256 warp-specialized tile kernels on
        // sm_90a (`rpa_tile_ws_f16_f16_d256`, `rpa_tile_ws_bf16_bf16_d256`): at most 32 bytes stack
        // frame, 48 bytes spill stores, 56 bytes spill loads with ptxas 13.0 (issue 50; 24 / 20 / 20
        // since the tensor maps became kernel parameters, 2026-11-29). Their consumers
        // need 240 registers (O alone is 128), which leaves the producer warp 24, where ptxas keeps
        // a few loop invariants of the item walk on the stack (reloaded once per item or tile; the
        // producer is not the bottleneck). Every other kernel, on every arch: 0 bytes stack frame,
        // 0 bytes spill stores, 0 bytes spill loads (the 16-bit head_dim-128 pipelined kernels once
        // kept 8 bytes, benchmarks/NOTES.md "v9"; no longer). docs/architecture.md states the
        // measured figures of every kernel with local memory (the head_dim-256 and head_dim-64
        // 16-bit warp-specialized kernels; the fp8 twins keep none since 2026-11-29, once 4 bytes
        // of their consumers' item walk, still allowed).
        // The kernels with local memory are printed for each arch.
        let mut function = "";
        let mut nonzero = vec![];
        for line in log.lines() {
            if let Some(name) = line.split("Function properties for ").nth(1) {
                function = name.trim();
            } else if line.contains("stack frame") {
                let bytes: Vec<u32> =
                    line.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
                if bytes.iter().any(|&b| b > 0) {
                    nonzero.push(format!("{function}: {}", line.trim()));
                }
                if function.starts_with("rpa_tile_ws_") && function.ends_with("_d256") {
                    // Stack frame, spill stores, spill loads: no more than measured.
                    assert!(
                        bytes.len() == 3 && bytes[0] <= 32 && bytes[1] <= 48 && bytes[2] <= 56,
                        "{arch} {function}: {line}"
                    );
                    continue;
                }
                if matches!(function, "rpa_tile_ws_f16_f16_d64" | "rpa_tile_ws_bf16_bf16_d64") {
                    // Three consumer warpgroups (512 threads): FA3's 32 / 160 registers. With
                    // ptxas 13.0 the consumers reload a few loop invariants (6 local loads a tile,
                    // L1 hits), the producer and the prologue some of theirs; their `wgmma`s stay
                    // pipelined (at 48 / 152 ptxas serialized them instead). No more than
                    // measured.
                    assert!(
                        bytes.len() == 3 && bytes[0] <= 64 && bytes[1] <= 144 && bytes[2] <= 188,
                        "{arch} {function}: {line}"
                    );
                    continue;
                }
                if function.starts_with("rpa_tile_ws_") && (function.contains("_e4m3_") || function.contains("_e5m2_"))
                {
                    // The fp8 twins. Head_dim 64: at most two 4-byte values of the item walk
                    // (stored once, loaded once per item; two Q slots). Head_dim 128, whose converters
                    // keep four loads in flight on 80 registers (the consumers on 208,
                    // benchmarks/NOTES.md "v42.6"): 16-byte frame, 12 / 56 bytes of spill stores /
                    // loads with ptxas 13.0, a reload a tile in the converters and the consumers,
                    // outside the products and the softmax. No more than measured.
                    let (frame, stores, loads) = if function.ends_with("_d128") { (16, 12, 56) } else { (8, 8, 8) };
                    assert!(
                        bytes.len() == 3 && bytes[0] <= frame && bytes[1] <= stores && bytes[2] <= loads,
                        "{arch} {function}: {line}"
                    );
                    continue;
                }
                assert!(
                    line.contains("0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"),
                    "{arch} {function}: {line}"
                );
            }
        }
        println!("{arch}: {} kernels with local memory:", nonzero.len());
        for line in &nonzero {
            println!("  {line}");
        }
    }
}
