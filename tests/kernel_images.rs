//! The embedded kernel images as the runtime loads them (no GPU needed):
//! - each PTX image's kernel table: the declarations plus one kernel's range form a module of that
//!   kernel alone, every kernel of the image is in the table once, and `ptxas` compiles such
//!   modules on their own (what the driver's JIT does on a device with no cubin);
//! - the cubins: one per default architecture, native code (an ELF image for that architecture)
//!   holding every kernel of the PTX image it was compiled from, by the pinned ptxas.

use std::process::Command;

use xla_gpu_kernels::host::runtime::PtxImage;
use xla_gpu_kernels::{CUBIN_IMAGES, PTX_IMAGES};

#[path = "support/ptxas.rs"]
mod support;
use support::ptxas;

/// The kernels whose `.entry` the whole image declares, in text order.
fn entries(image: &PtxImage) -> Vec<&'static str> {
    image.ptx.split(".entry ").skip(1).map(|e| e.split('(').next().unwrap()).collect()
}

#[test]
fn each_ptx_kernel_is_a_module_of_its_own() {
    for image in PTX_IMAGES {
        let names: Vec<&str> = image.kernel_names().collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted, "{}: the table is sorted by name, each kernel once", image.arch);
        let mut declared = entries(image);
        declared.sort_unstable();
        assert_eq!(names, declared, "{}: the table names every kernel of the image", image.arch);
        assert!(
            !image.ptx[..image.declarations].contains(".entry "),
            "{}: a kernel among the declarations",
            image.arch
        );
        for &(name, start, end) in image.kernels {
            let text = &image.ptx[start..end];
            assert!(
                text.starts_with(&format!(".visible .entry {name}(")),
                "{}: {name}'s range starts elsewhere",
                image.arch
            );
            assert!(text.trim_end().ends_with('}'), "{}: {name}'s range ends inside its body", image.arch);
            assert_eq!(text.matches(".entry ").count(), 1, "{}: {name}'s range holds another kernel", image.arch);
            let module = image.kernel_module(name).unwrap();
            assert_eq!(module.last(), Some(&0));
            assert!(module.starts_with(&image.ptx.as_bytes()[..image.declarations]));
        }
        // The ranges tile the text after the declarations: nothing is lost between kernels.
        let mut ranges: Vec<(usize, usize)> = image.kernels.iter().map(|&(_, s, e)| (s, e)).collect();
        ranges.sort_unstable();
        assert_eq!(ranges.first().map(|r| r.0), Some(image.declarations));
        assert!(ranges.windows(2).all(|w| w[0].1 == w[1].0), "{}: a gap between kernels", image.arch);
        assert_eq!(ranges.last().map(|r| r.1), Some(image.ptx.len() - 1), "{}: text after the last kernel", image.arch);
    }
}

#[test]
fn ptxas_compiles_single_kernel_modules() {
    let dir = std::env::temp_dir().join(format!("xgk-kernel-modules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for image in PTX_IMAGES {
        // One kernel of each family a call needs first: the plan, a decode kernel, the merge, a tile
        // kernel, simple_add (compiling all of them is what ptx.rs does for the whole image).
        let wanted =
            ["simple_add_f32", "rpa_plan", "rpa_pipe_kr_bf16_bf16_d128", "rpa_combine_bf16", "rpa_tile_f16_f16_d64"];
        for name in wanted {
            let module = image.kernel_module(name).unwrap_or_else(|| panic!("{}: no kernel {name}", image.arch));
            let file = dir.join(format!("{}_{name}.ptx", image.arch));
            std::fs::write(&file, &module[..module.len() - 1]).unwrap();
            let arch = if image.arch == "sm_80" { "sm_86" } else { image.arch };
            let out = Command::new(ptxas())
                .arg(format!("-arch={arch}"))
                .arg(&file)
                .args(["-o", "/dev/null"])
                .output()
                .unwrap();
            assert!(out.status.success(), "{} {name}: {}", image.arch, String::from_utf8_lossy(&out.stderr));
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn cubins_hold_every_kernel_for_their_architecture() {
    let archs: Vec<&str> = CUBIN_IMAGES.iter().map(|c| c.arch).collect();
    if option_env!("XGK_CUBIN_ARCHS").is_none() {
        assert_eq!(archs, ["sm_90a", "sm_89", "sm_86", "sm_80"], "the default cubins, most specific first");
    }
    for cubin in CUBIN_IMAGES {
        let bytes = cubin.cubin;
        assert_eq!(&bytes[..4], b"\x7fELF", "{}: not an ELF image", cubin.arch);
        // e_machine (offset 18, little endian) is EM_CUDA (190).
        assert_eq!(u16::from_le_bytes([bytes[18], bytes[19]]), 190, "{}: not CUDA code", cubin.arch);
        let source = PTX_IMAGES
            .iter()
            .find(|i| if cubin.arch.ends_with('a') { i.arch == cubin.arch } else { !i.arch.ends_with('a') })
            .unwrap();
        for name in source.kernel_names() {
            let symbol = format!("{name}\0");
            assert!(
                bytes.windows(symbol.len()).any(|w| w == symbol.as_bytes()),
                "{}: kernel {name} missing from the cubin",
                cubin.arch
            );
        }
    }
    let version = unsafe { std::ffi::CStr::from_ptr(xla_gpu_kernels::xgk_version()) }.to_str().unwrap().to_string();
    if !CUBIN_IMAGES.is_empty() {
        assert!(version.contains("by ptxas V13.0.88"), "{version}");
    }
    assert!(version.starts_with(&format!("xla-gpu-kernels {} (", env!("CARGO_PKG_VERSION"))), "{version}");
}
