//! Compiles `kernels-gpu` to PTX and embeds it (`$OUT_DIR/kernels.ptx`, read by `src/ptx.rs`).
//!
//! Rust-CUDA's `cuda_builder` needs LLVM 7, which cannot be had here, so the kernels go through
//! rustc's own NVPTX backend: a nested `cargo rustc --target nvptx64-nvidia-cuda -Zbuild-std=core
//! --crate-type cdylib` (its own `--target-dir`, or it would deadlock on our build lock).
//!
//! The NVPTX target "links" by handing LLVM bitcode to `llvm-bitcode-linker`, a component that
//! cannot be downloaded here. This same build-script executable stands in for it: the nested
//! build passes `-C linker=<this executable>` and sets `XGK_PTX_LINKER`, and in that mode
//! [`link_ptx`] runs `llvm-link` → `opt` (internalize + O3) → `llc` from the `llvm-tools`
//! component, exactly the three steps the real tool performs.
//!
//! One PTX image per architecture, all embedded; the runtime loads the first that runs on the
//! device (`host::runtime::KernelModule`):
//! - `sm_90a` (PTX ISA 8.3: the tensor-map proxy fences of `kernels-gpu::tma`): Hopper only (compute capability 9.0 exactly: `a` features do not
//!   carry forward). Built with `--cfg xgk_sm90`, which turns on the Hopper-only instructions in
//!   `kernels-gpu` (programmatic dependent launch: `griddepcontrol`).
//! - `sm_80` (PTX ISA 7.8): the portable image, for A100, H100/H200 (when the sm_90a one cannot
//!   load) and newer GPUs through the driver's JIT.
//!
//! Each PTX image is also laid out for loading one kernel at a time: the module-level
//! declarations first, then the kernels, and a table of each kernel's byte range
//! ([`split_kernels`]). Where the driver must JIT-compile PTX, the runtime then compiles only the
//! kernels a call launches (seconds, not the whole image's ~45 s).
//!
//! Native code: every PTX image is also compiled by `ptxas` to a cubin for each architecture of
//! `XGK_CUBIN_ARCHS` that it runs on (sm_90a from the sm_90a image, sm_80/86/89 from the portable
//! one), all embedded; the runtime loads a cubin where one matches the device, which takes
//! milliseconds instead of the driver's JIT. The `ptxas` is the pinned one of the
//! `nvidia-cuda-nvcc` wheel, 13.0.88: the compiler of the R580 driver's JIT, so the cubins are the
//! code the JIT makes of the same PTX (measured: the same speed, benchmarks/NOTES.md "v33"), and
//! every R580 or newer driver loads them (CUDA 13.x); an older driver refuses them and the
//! runtime JIT-compiles the PTX instead. Found as `XGK_BUILD_PTXAS`, else in the project's
//! `.venv` (`scripts/setup.sh`), else on PATH.
//!
//! Settings (environment variables, each rebuilds when changed):
//! - `XGK_CUDA_ARCHS`: the images, comma separated, most specific first; default `sm_90a,sm_80`.
//!   Each entry is `sm_XX[a]`, optionally `=+ptxNN` for the LLVM PTX features (the PTX ISA
//!   version); defaults: `+ptx83` for sm_90 and newer, `+ptx78` below (the L2 hints on
//!   `cp.async` need 7.4; every driver with `cuCtxGetId`, which the runtime needs anyway,
//!   JIT-compiles 7.8).
//! - `XGK_CUBIN_ARCHS`: the cubins, comma separated; default `sm_90a,sm_89,sm_86,sm_80`; empty
//!   builds none (PTX only: faster kernel builds while developing, a JIT on first use).
//! - `XGK_BUILD_PTXAS`: the `ptxas` that compiles them (see above).
//! - `XGK_TRACE=1`: the images record the warp-specialized prefill kernel's start
//!   (`kernels-gpu::kernels::prefill::hopper::trace`, `--cfg xgk_trace`), for
//!   `benchmarks/start_trace.py`; never in a release.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const LINKER_MODE_VAR: &str = "XGK_PTX_LINKER";
const LLVM_BIN_VAR: &str = "XGK_LLVM_BIN";
/// The images built when `XGK_CUDA_ARCHS` is unset, most specific first.
const DEFAULT_ARCHS: &str = "sm_90a,sm_80";
/// The link step's `--target-cpu` when rustc passes none.
const DEFAULT_ARCH: &str = "sm_80";
/// The cubins built when `XGK_CUBIN_ARCHS` is unset: the data-centre and workstation GPUs of
/// compute capability 8.x and Hopper. Others (Blackwell, ...) JIT-compile the portable PTX.
const DEFAULT_CUBIN_ARCHS: &str = "sm_90a,sm_89,sm_86,sm_80";
/// The `ptxas` release the cubins are pinned to (`nvidia-cuda-nvcc`, python/requirements-ci.txt
/// and pyproject.toml): another one is an error, since the minimum driver and the code follow
/// from it.
const PINNED_PTXAS: &str = "V13.0.88";

fn main() {
    if env::var_os(LINKER_MODE_VAR).is_some() {
        let args: Vec<String> = env::args().skip(1).collect();
        if let Err(msg) = link_ptx(&args) {
            eprintln!("xla-gpu-kernels PTX link step failed: {msg}");
            std::process::exit(1);
        }
        return;
    }
    if let Err(msg) = build_ptx() {
        panic!("\n\nxla-gpu-kernels: building the GPU kernels failed:\n{msg}\n");
    }
}

/// One image to build: the architecture, its LLVM features, and whether the Hopper-only code is
/// compiled in.
struct Image {
    arch: String,
    features: String,
    hopper: bool,
}

/// Parses `XGK_CUDA_ARCHS` (see the module docs) into images ordered most specific first: the
/// runtime loads the first that runs on the device, so an `a` image (its architecture only) comes
/// before portable ones, and newer portable ones before older.
fn images(spec: &str) -> Result<Vec<Image>, String> {
    let mut images: Vec<(u32, bool, Image)> = Vec::new();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (arch, features) = entry.split_once('=').unwrap_or((entry, ""));
        let (cc, specific) =
            parse_arch(arch).map_err(|e| format!("XGK_CUDA_ARCHS entry {entry:?}: {e} (sm_XX[a][=+ptxNN])"))?;
        if images.iter().any(|(_, _, i)| i.arch == arch) {
            return Err(format!("XGK_CUDA_ARCHS names {arch} twice"));
        }
        let features = if features.is_empty() {
            if cc >= 90 {
                "+ptx83"
            } else {
                "+ptx78"
            }
        } else {
            features
        };
        images.push((cc, specific, Image { arch: arch.to_string(), features: features.to_string(), hopper: cc >= 90 }));
    }
    if images.is_empty() {
        return Err("XGK_CUDA_ARCHS names no architecture".into());
    }
    images.sort_by_key(|(cc, specific, _)| (std::cmp::Reverse(*specific), std::cmp::Reverse(*cc)));
    Ok(images.into_iter().map(|(_, _, image)| image).collect())
}

/// `sm_XY` or `sm_XYa` as (compute capability `XY`, architecture-specific); the kernels need 8.0.
fn parse_arch(arch: &str) -> Result<(u32, bool), String> {
    let digits = arch.strip_prefix("sm_").unwrap_or("");
    let (number, specific) = match digits.strip_suffix('a') {
        Some(n) => (n, true),
        None => (digits, false),
    };
    match number.parse::<u32>() {
        Ok(cc) if !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) => {
            if cc < 80 {
                Err(format!("{arch}: the kernels need sm_80 or newer"))
            } else {
                Ok((cc, specific))
            }
        }
        _ => Err(format!("{arch:?} is not an architecture sm_XX[a]")),
    }
}

/// Whether PTX built for `image_arch` compiles for compute capability `cc` (the runtime's
/// `PtxImage::runs_on`): `sm_XYa` PTX for XY only (and only for the `a` target), portable PTX for
/// XY and newer.
fn image_runs_on(image_arch: &str, cc: u32, specific: bool) -> bool {
    match parse_arch(image_arch) {
        Ok((target, true)) => cc == target && specific,
        Ok((target, false)) => cc >= target,
        Err(_) => false,
    }
}

/// Parses `XGK_CUBIN_ARCHS` (comma separated `sm_XX[a]`; empty: none).
fn cubin_archs(spec: &str) -> Result<Vec<String>, String> {
    let mut archs: Vec<String> = Vec::new();
    for arch in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        parse_arch(arch).map_err(|e| format!("XGK_CUBIN_ARCHS: {e}"))?;
        if archs.iter().any(|a| a == arch) {
            return Err(format!("XGK_CUBIN_ARCHS names {arch} twice"));
        }
        archs.push(arch.to_string());
    }
    Ok(archs)
}

/// The `ptxas` that compiles the cubins: `XGK_BUILD_PTXAS`, else the pinned wheel's in the
/// project's `.venv`, else the one on PATH. Its release must be [`PINNED_PTXAS`].
fn find_ptxas(manifest_dir: &Path) -> Result<PathBuf, String> {
    let ptxas = if let Some(path) = env::var_os("XGK_BUILD_PTXAS") {
        PathBuf::from(path)
    } else {
        let venv = manifest_dir.join(".venv/lib");
        let in_venv = fs::read_dir(&venv).ok().and_then(|dirs| {
            dirs.filter_map(|d| d.ok())
                .map(|d| d.path().join("site-packages/nvidia/cu13/bin/ptxas"))
                .find(|p| p.exists())
        });
        match in_venv {
            Some(p) => p,
            None => PathBuf::from("ptxas"),
        }
    };
    let release = ptxas_release(&ptxas).map_err(|e| {
        format!(
            "{e}\nThe cubins need ptxas {PINNED_PTXAS}: `pip install nvidia-cuda-nvcc==13.0.88` and set \
             XGK_BUILD_PTXAS=<site-packages>/nvidia/cu13/bin/ptxas (scripts/setup.sh puts it in .venv, \
             where the build finds it), or build without native code: XGK_CUBIN_ARCHS= (empty)."
        )
    })?;
    if release != PINNED_PTXAS {
        return Err(format!(
            "{} is ptxas {release}; the cubins are pinned to {PINNED_PTXAS} (the minimum driver follows from it): \
             `pip install nvidia-cuda-nvcc==13.0.88` and point XGK_BUILD_PTXAS at its nvidia/cu13/bin/ptxas",
            ptxas.display()
        ));
    }
    Ok(ptxas)
}

/// The release of `ptxas` (`V13.0.88`), from `ptxas --version`.
fn ptxas_release(ptxas: &Path) -> Result<String, String> {
    let text = command_output(Command::new(ptxas).arg("--version"))
        .map_err(|e| format!("ptxas {} cannot run: {e}", ptxas.display()))?;
    text.split_whitespace()
        .rev()
        .find(|w| w.starts_with('V') && w[1..].starts_with(|c: char| c.is_ascii_digit()))
        .map(str::to_string)
        .ok_or_else(|| format!("{}: no release in `--version`: {text}", ptxas.display()))
}

/// Compiles each (arch, PTX file, cubin file) with `ptxas` (release `release`), several at once
/// (each ptxas is single threaded; the whole Hopper image takes about a minute). A cubin made by
/// the same release from the same PTX is kept: `<cubin>.source` holds the release and the PTX it
/// came from.
fn compile_cubins(ptxas: &Path, release: &str, jobs: &[(String, PathBuf, PathBuf)]) -> Result<(), String> {
    let source_of = |ptx: &Path| fs::read(ptx).ok().map(|text| [format!("{release}\n").into_bytes(), text].concat());
    let pending: Vec<&(String, PathBuf, PathBuf)> = jobs
        .iter()
        .filter(|(_, ptx, cubin)| {
            let made_from = fs::read(cubin.with_extension("cubin.source")).ok();
            !(cubin.exists() && made_from.is_some() && made_from == source_of(ptx))
        })
        .collect();
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get()).min(pending.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let errors = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((arch, ptx, cubin)) = pending.get(i) else { break };
                let result =
                    run(Command::new(ptxas).arg(format!("-arch={arch}")).arg("-O3").arg(ptx).arg("-o").arg(cubin))
                        .and_then(|()| {
                            let source = source_of(ptx).ok_or_else(|| format!("{} unreadable", ptx.display()))?;
                            fs::write(cubin.with_extension("cubin.source"), source).map_err(|e| e.to_string())
                        });
                if let Err(e) = result {
                    errors.lock().unwrap().push(format!("cubin {arch}: {e}"));
                }
            });
        }
    });
    let errors = errors.into_inner().unwrap();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}

/// A PTX image laid out for loading one kernel at a time: `text` holds the module-level
/// declarations (version, target, function prototypes, shared and global variables, the panic
/// functions) in its first `declarations` bytes, then every kernel; `kernels` names each
/// kernel's byte range, sorted by name. The declarations plus one kernel's range are a complete
/// module.
struct KernelLayout {
    text: String,
    declarations: usize,
    kernels: Vec<(String, std::ops::Range<usize>)>,
}

/// Lays `ptx` (llc's output) out as [`KernelLayout`]. A kernel runs from its `.visible .entry
/// <name>(` line to the closing brace after llc's `// -- End function` comment (inline assembly
/// puts other braces at the start of lines); every other line is a declaration.
fn split_kernels(ptx: &str) -> Result<KernelLayout, String> {
    let mut declarations = String::new();
    let mut kernels: Vec<(String, String)> = Vec::new();
    // The kernel being read, and whether its `// -- End function` was seen (llc writes it just
    // before the body's closing brace).
    let mut current: Option<(String, String, bool)> = None;
    for line in ptx.split_inclusive('\n') {
        if let Some((name, body, ending)) = current.as_mut() {
            body.push_str(line);
            if line.trim() == "// -- End function" {
                *ending = true;
            } else if *ending && line.trim_end() == "}" {
                kernels.push((std::mem::take(name), std::mem::take(body)));
                current = None;
            }
            continue;
        }
        let header = line.strip_prefix(".visible .entry ").or_else(|| line.strip_prefix(".entry "));
        match header {
            Some(rest) => {
                let name = rest.split('(').next().unwrap_or_default().trim();
                if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    return Err(format!("unexpected kernel header {line:?}"));
                }
                current = Some((name.to_string(), line.to_string(), false));
            }
            None => declarations.push_str(line),
        }
    }
    if let Some((name, _, _)) = current {
        return Err(format!("kernel {name} has no `// -- End function` and closing brace"));
    }
    if kernels.is_empty() {
        return Err("no kernel entry points".into());
    }
    kernels.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(w) = kernels.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(format!("kernel {} defined twice", w[0].0));
    }
    let mut text = declarations;
    let declarations = text.len();
    let mut ranges = Vec::new();
    for (name, body) in kernels {
        let start = text.len();
        text.push_str(&body);
        ranges.push((name, start..text.len()));
    }
    Ok(KernelLayout { text, declarations, kernels: ranges })
}

fn build_ptx() -> Result<(), String> {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let kernels_dir = manifest_dir.join("kernels-gpu");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=kernels-gpu");
    println!("cargo:rerun-if-changed=rust-toolchain.toml");
    println!("cargo:rerun-if-env-changed=XGK_CUDA_ARCHS");
    println!("cargo:rerun-if-env-changed=XGK_CUBIN_ARCHS");
    println!("cargo:rerun-if-env-changed=XGK_BUILD_PTXAS");
    println!("cargo:rerun-if-env-changed=XGK_TRACE");
    let images = images(&env::var("XGK_CUDA_ARCHS").unwrap_or_else(|_| DEFAULT_ARCHS.to_string()))?;
    let cubin_archs = cubin_archs(&env::var("XGK_CUBIN_ARCHS").unwrap_or_else(|_| DEFAULT_CUBIN_ARCHS.to_string()))?;
    let ptxas = if cubin_archs.is_empty() { None } else { Some(find_ptxas(&manifest_dir)?) };

    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = command_output(Command::new(&rustc).args(["--print", "sysroot"]))?;
    let sysroot = PathBuf::from(sysroot.trim());
    let host = env::var("HOST").unwrap();
    let llvm_bin = sysroot.join("lib/rustlib").join(&host).join("bin");
    for tool in ["llvm-link", "opt", "llc"] {
        if !llvm_bin.join(tool).exists() {
            return Err(format!(
                "`{tool}` not found in {}: the `llvm-tools` component is missing.\n\
                 Install the pinned toolchain with its components: `rustup toolchain install` \
                 (reads rust-toolchain.toml) or `rustup component add llvm-tools`.",
                llvm_bin.display()
            ));
        }
    }
    if !sysroot.join("lib/rustlib/src/rust/library/core").exists() {
        return Err("the `rust-src` component is missing (needed by -Zbuild-std=core): \
                    `rustup component add rust-src`"
            .into());
    }

    // `PTX_IMAGES` and `CUBIN_IMAGES`, included by src/lib.rs: each PTX image (kernels laid out
    // one after another behind the module-level declarations, with their byte ranges) in the
    // order given, then the cubins, most specific first.
    let mut ptx_table = String::from("&[\n");
    let mut ptx_files = Vec::new();
    for image in &images {
        let text = build_image(image, &kernels_dir, &out_dir, &llvm_bin)?;
        let layout = split_kernels(&text).map_err(|e| format!("{} PTX: {e}", image.arch))?;
        let file_name = format!("kernels_{}.ptx", image.arch);
        fs::write(out_dir.join(&file_name), &layout.text).map_err(|e| e.to_string())?;
        let kernels: Vec<String> = layout
            .kernels
            .iter()
            .map(|(name, range)| format!("(\"{name}\", {}, {})", range.start, range.end))
            .collect();
        // `arch` is `sm_` + digits (+ `a`), checked by `images`, and kernel names are PTX
        // identifiers: safe inside the string literals.
        ptx_table.push_str(&format!(
            "    host::runtime::PtxImage {{ arch: \"{}\", ptx: concat!(include_str!(concat!(env!(\"OUT_DIR\"), \"/{}\")), \"\\0\"), declarations: {}, kernels: &[{}] }},\n",
            image.arch,
            file_name,
            layout.declarations,
            kernels.join(", ")
        ));
        ptx_files.push((image, out_dir.join(file_name)));
    }
    ptx_table.push(']');
    fs::write(out_dir.join("ptx_images.rs"), ptx_table).map_err(|e| e.to_string())?;

    let mut cubin_table = String::from("&[\n");
    let mut ptxas_version = String::new();
    if let Some(ptxas) = &ptxas {
        // `find_ptxas` checked that this is the pinned release.
        ptxas_version = PINNED_PTXAS.to_string();
        let jobs: Vec<(String, PathBuf, PathBuf)> = cubin_archs
            .iter()
            .map(|arch| {
                let (cc, specific) = parse_arch(arch)?;
                let (_, source) =
                    ptx_files.iter().find(|(image, _)| image_runs_on(&image.arch, cc, specific)).ok_or_else(|| {
                        format!("XGK_CUBIN_ARCHS names {arch}, which no PTX image of XGK_CUDA_ARCHS runs on")
                    })?;
                Ok((arch.clone(), source.clone(), out_dir.join(format!("kernels_{arch}.cubin"))))
            })
            .collect::<Result<_, String>>()?;
        compile_cubins(ptxas, &ptxas_version, &jobs)?;
        for (arch, _, cubin) in &jobs {
            cubin_table.push_str(&format!(
                "    host::runtime::CubinImage {{ arch: \"{arch}\", cubin: include_bytes!(concat!(env!(\"OUT_DIR\"), \"/{}\")) }},\n",
                cubin.file_name().unwrap().to_string_lossy()
            ));
        }
    }
    cubin_table.push(']');
    fs::write(out_dir.join("cubin_images.rs"), cubin_table).map_err(|e| e.to_string())?;
    println!("cargo:rustc-env=XGK_CUBIN_ARCH_LIST={}", cubin_archs.join(", "));
    println!("cargo:rustc-env=XGK_CUBIN_PTXAS={ptxas_version}");
    let archs: Vec<&str> = images.iter().map(|i| i.arch.as_str()).collect();
    println!("cargo:rustc-env=XGK_PTX_ARCHS={}", archs.join(", "));
    Ok(())
}

/// Builds one image with a nested `cargo rustc` (its own target directory per architecture, so
/// each stays cached) and returns the PTX text.
fn build_image(image: &Image, kernels_dir: &Path, out_dir: &Path, llvm_bin: &Path) -> Result<String, String> {
    let mut rustflags = vec![
        format!("-Ctarget-cpu={}", image.arch),
        format!("-Ctarget-feature={}", image.features),
        format!("-Clinker={}", env::current_exe().unwrap().display()),
        "-Cdebuginfo=0".to_string(),
        // Kernels index per-lane register arrays inside closures (`unroll`); every one of them must
        // be inlined, or the array is passed by pointer and lands in local memory.
        "-Cllvm-args=-inline-threshold=2000".to_string(),
    ];
    if image.hopper {
        rustflags.push("--cfg=xgk_sm90".to_string());
    }
    if env::var_os("XGK_TRACE").is_some_and(|v| v == "1") {
        rustflags.push("--cfg=xgk_trace".to_string());
    }

    let target_dir = out_dir.join(format!("ptx-target-{}", image.arch));
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(kernels_dir)
        .args(["rustc", "--lib", "--crate-type", "cdylib", "--release", "--target", "nvptx64-nvidia-cuda"])
        .args(["-Zbuild-std=core", "--target-dir"])
        .arg(&target_dir)
        .arg("--manifest-path")
        .arg(kernels_dir.join("Cargo.toml"));
    // The outer build's settings must not leak into the nested one.
    for var in [
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_MAKEFLAGS",
        "MAKEFLAGS",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("CARGO_ENCODED_RUSTFLAGS", rustflags.join("\x1f"))
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "3")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort")
        .env("CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS", "false")
        .env("CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS", "false")
        .env(LINKER_MODE_VAR, "1")
        .env(LLVM_BIN_VAR, llvm_bin);
    let status = cmd.status().map_err(|e| format!("could not run cargo for the kernels: {e}"))?;
    if !status.success() {
        return Err(format!("the nested kernel build for {} failed ({status}); see the errors above", image.arch));
    }

    let ptx = target_dir.join("nvptx64-nvidia-cuda/release/kernels_gpu.ptx");
    let text = fs::read_to_string(&ptx).map_err(|e| format!("reading {}: {e}", ptx.display()))?;
    apply_launch_bounds(&text).and_then(|t| align_param_maps(&t)).map_err(|e| format!("{}: {e}", ptx.display()))
}

/// Declares `.align 64` each kernel parameter whose address the kernels take in inline PTX
/// (`kernels_gpu::tma::param_address!`: `mov.u64 %rd, <entry>_param_<n>;`, where LLVM's own code
/// reads parameters with `ld.param`): the tensor maps, which the tensor memory accelerator reads in
/// the parameter space, 64-byte aligned as CUDA's `CUtensorMap` (rustc declares no parameter
/// aligned past 16). Fails where the named parameter is not a 128-byte one (a tensor map): a
/// wrong index in the kernels' source stops the build.
fn align_param_maps(ptx: &str) -> Result<String, String> {
    let mut symbols: Vec<&str> = ptx
        .lines()
        .filter_map(|line| line.trim().strip_prefix("mov.u64"))
        .filter_map(|rest| rest.split_once(',').map(|(_, operand)| operand.trim().trim_end_matches(';').trim()))
        .filter(|operand| operand.contains("_param_") && !operand.starts_with('%'))
        .collect();
    symbols.sort_unstable();
    symbols.dedup();
    let mut text = ptx.to_string();
    for symbol in symbols {
        let declaration = format!(".b8 {symbol}[128]");
        let at = text
            .find(&declaration)
            .ok_or_else(|| format!("{symbol}: its address is taken, but it is no 128-byte parameter (a tensor map)"))?;
        let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        let line = &text[line_start..at];
        let align = line.find(".param .align ").ok_or_else(|| format!("{symbol}: unexpected declaration {line:?}"))?;
        text.replace_range(line_start + align..at, ".param .align 64 ");
    }
    Ok(text)
}

/// Turns each `__xgk_maxntid_<name> = N | M << 16` marker global (from `#[kernel(max_threads = N,
/// min_blocks = M)]`; M = 0 means 1) into `.maxntid N, 1, 1` and `.minnctapersm M` directives on
/// the entry `<name>`, between its parameter list and its body.
fn apply_launch_bounds(ptx: &str) -> Result<String, String> {
    const MARKER: &str = "__xgk_maxntid_";
    let mut text = ptx.to_string();
    let markers: Vec<(String, u32)> = ptx
        .lines()
        .filter(|line| line.contains(".global") && line.contains(MARKER))
        .map(|line| {
            let rest = &line[line.find(MARKER).unwrap() + MARKER.len()..];
            let (name, value) = rest.split_once('=').ok_or_else(|| format!("unexpected marker line {line:?}"))?;
            // llc writes the u32 as `.u32 name = N` or as bytes, `.b8 name[4] = {lo, ..}` (little
            // endian, trailing zero bytes left out).
            let name = name.trim().trim_end_matches("[4]").trim();
            let value = value.trim().trim_end_matches(';').trim();
            let bad = || format!("marker {line:?}: {value:?} is not a thread count");
            let n = match value.strip_prefix('{').and_then(|v| v.strip_suffix('}')) {
                Some(bytes) => bytes.split(',').enumerate().try_fold(0u32, |n, (i, b)| {
                    let b = b.trim().parse::<u8>().map_err(|_| bad())?;
                    if i >= 4 {
                        return Err(bad());
                    }
                    Ok(n | (b as u32) << (8 * i))
                })?,
                None => value.parse::<u32>().map_err(|_| bad())?,
            };
            Ok((name.to_string(), n))
        })
        .collect::<Result<_, String>>()?;
    for (name, n) in markers {
        let header = format!(".entry {name}(");
        let start = text.find(&header).ok_or_else(|| format!("launch bound for {name}, which is no entry"))?;
        let body = start + text[start..].find("\n{").ok_or_else(|| format!("entry {name} has no body"))?;
        // `.minnctapersm` with it, as CUDA's `__launch_bounds__(threads, blocks)`: ptxas then
        // fixes the registers per thread at what `blocks` blocks of `threads` can hold, which
        // `setmaxnreg` needs ("unable to determine register count at entry" otherwise, and the
        // budgets are ignored).
        let (threads, blocks) = (n & 0xffff, (n >> 16).max(1));
        text.insert_str(body, &format!("\n.maxntid {threads}, 1, 1\n.minnctapersm {blocks}"));
    }
    Ok(text)
}

/// The link step of `llvm-bitcode-linker`, driven by the arguments rustc passes to a `llbc`
/// linker: `--export-symbol <name>`..., inputs (bitcode objects and rlibs), `-L <dir>`,
/// `--target <triple>`, `--target-cpu <sm_XX>`, `--target-feature <+f,...>`, `-o <out.ptx>`, `-O<n>`.
fn link_ptx(args: &[String]) -> Result<(), String> {
    let llvm_bin = PathBuf::from(env::var_os(LLVM_BIN_VAR).ok_or("XGK_LLVM_BIN is not set")?);
    let mut exports = Vec::new();
    let mut inputs = Vec::new();
    let mut output = None;
    let mut cpu = DEFAULT_ARCH.to_string();
    let mut features = String::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--export-symbol" => exports.push(value(arg)?),
            "-o" => output = Some(PathBuf::from(value(arg)?)),
            "--target-cpu" => cpu = value(arg)?,
            "--target-feature" => features = value(arg)?,
            "-L" | "--target" | "--linker-plugin-lto" => {
                value(arg)?;
            }
            a if a.starts_with("--target-cpu=") => cpu = a["--target-cpu=".len()..].to_string(),
            a if a.starts_with("--target-feature=") => features = a["--target-feature=".len()..].to_string(),
            a if a.starts_with('-') => {} // -O<n>, --debug, ...: optimization is fixed at O3 below
            a => inputs.push(PathBuf::from(a)),
        }
    }
    let output = output.ok_or("no -o output given")?;
    let work = output.with_extension("link");
    fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let linked = work.join("linked.bc");
    let optimized = work.join("optimized.bc");
    let export_list = work.join("exports.txt");
    fs::write(&export_list, exports.join("\n")).map_err(|e| e.to_string())?;

    run(Command::new(llvm_bin.join("llvm-link")).arg("--ignore-non-bitcode").args(&inputs).arg("-o").arg(&linked))?;
    run(Command::new(llvm_bin.join("opt"))
        .arg(&linked)
        .arg(format!("--internalize-public-api-file={}", export_list.display()))
        .arg("--passes=internalize,default<O3>,globaldce")
        .arg("-inline-threshold=2000")
        .arg("--strip-debug")
        .arg("-o")
        .arg(&optimized))?;
    let mut llc = Command::new(llvm_bin.join("llc"));
    llc.arg(format!("--mcpu={cpu}")).arg("-O3");
    if !features.is_empty() {
        llc.arg(format!("--mattr={features}"));
    }
    run(llc.arg(&optimized).arg("-o").arg(&output))
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("running {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed:\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

fn command_output(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("running {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
