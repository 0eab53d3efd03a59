//! The kernels' code as the library embeds it, and which of it a device runs.
//!
//! Two kinds of image (built by the root crate's `build.rs`):
//! - [`CubinImage`]: native code (SASS) for one architecture, every kernel in one module. Loading
//!   it takes milliseconds. A cubin for `sm_XY` runs on devices of the same major version and
//!   minor `Y` or above (`sm_80` on an A100, RTX 30xx, L4's `sm_89`...); one for `sm_XYa` on XY
//!   only.
//! - [`PtxImage`]: PTX for an architecture and (portable PTX) every newer one, through the
//!   driver's JIT compiler. The whole Hopper image takes the JIT ~45 s, so each kernel is a module
//!   of its own, compiled the first time a call launches it (the driver caches the result on disk
//!   for later processes).
//!
//! A device takes the most specific cubin that runs on it, else the most specific PTX image that
//! the driver compiles ([`ImageTarget`] orders them).

/// The architecture an image was built for (`sm_80`, `sm_90a`, ...) and what follows from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageTarget {
    /// `sm_XY` or `sm_XYa`.
    pub arch: &'static str,
    /// Native code (a cubin) rather than PTX.
    pub native: bool,
}

/// `cubin sm_90a`, `ptx sm_80`: the kind of code and its architecture.
impl std::fmt::Display for ImageTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", if self.native { "cubin" } else { "ptx" }, self.arch)
    }
}

impl ImageTarget {
    /// The compute capability (`major * 10 + minor`) the image targets, and whether it uses
    /// architecture-specific (`a`) features.
    fn target(&self) -> Option<(u32, bool)> {
        let digits = self.arch.strip_prefix("sm_")?;
        let specific = digits.ends_with('a');
        Some((digits.trim_end_matches('a').parse().ok()?, specific))
    }

    /// Whether the image runs on a device of compute capability `cc`: `sm_XYa` code on XY only;
    /// portable PTX on XY and every newer device (JIT); a portable cubin on devices of the same
    /// major version with a minor version of Y or more (CUDA's binary compatibility).
    pub fn runs_on(&self, cc: u32) -> bool {
        match self.target() {
            Some((target, true)) => cc == target,
            Some((target, false)) if self.native => cc / 10 == target / 10 && cc >= target,
            Some((target, false)) => cc >= target,
            None => false,
        }
    }

    /// The order in which images are tried: architecture-specific first, then newer before older.
    pub(crate) fn preference(&self) -> (bool, u32) {
        let (cc, specific) = self.target().unwrap_or((0, false));
        (!specific, u32::MAX - cc)
    }

    /// Whether the image was built with the Hopper instructions (`griddepcontrol` for
    /// programmatic dependent launch): sm_90 and newer.
    pub fn has_grid_dependency_control(&self) -> bool {
        self.target().is_some_and(|(target, _)| target >= 90)
    }

    /// Whether the image has the thread-block cluster instructions (distributed shared memory,
    /// cluster barriers): sm_90 and newer, as [`Self::has_grid_dependency_control`].
    pub fn has_clusters(&self) -> bool {
        self.has_grid_dependency_control()
    }

    /// Whether the image has the warpgroup-MMA kernels (`wgmma`, an sm_90a-only instruction).
    pub fn has_wgmma(&self) -> bool {
        self.target() == Some((90, true))
    }
}

/// One embedded PTX image, laid out for loading one kernel at a time: the module-level
/// declarations (version, target, prototypes, shared and global variables) in the first
/// `declarations` bytes of `ptx`, then each kernel in the byte range `kernels` gives for it.
#[derive(Clone, Copy, Debug)]
pub struct PtxImage {
    /// `sm_XY` or `sm_XYa`.
    pub arch: &'static str,
    /// The whole image, NUL-terminated (itself a valid module of every kernel).
    pub ptx: &'static str,
    /// Length of the declarations at the start of `ptx`.
    pub declarations: usize,
    /// (kernel name, start, end) of each kernel's text in `ptx`, sorted by name.
    pub kernels: &'static [(&'static str, usize, usize)],
}

impl PtxImage {
    /// This image's target (PTX).
    pub fn target(&self) -> ImageTarget {
        ImageTarget { arch: self.arch, native: false }
    }

    /// Whether the driver can compile the image for a device of compute capability `cc`.
    pub fn runs_on(&self, cc: u32) -> bool {
        self.target().runs_on(cc)
    }

    /// See [`ImageTarget::has_grid_dependency_control`].
    pub fn has_grid_dependency_control(&self) -> bool {
        self.target().has_grid_dependency_control()
    }

    /// The kernel names of the image, sorted.
    pub fn kernel_names(&self) -> impl Iterator<Item = &'static str> {
        self.kernels.iter().map(|&(name, _, _)| name)
    }

    /// A complete module holding only `kernel`: the declarations and that kernel's text,
    /// NUL-terminated (what `cuModuleLoadData` reads). `None` if the image has no such kernel or
    /// its table is out of the text's bounds.
    pub fn kernel_module(&self, kernel: &str) -> Option<Vec<u8>> {
        let i = self.kernels.binary_search_by(|&(name, _, _)| name.cmp(kernel)).ok()?;
        let (_, start, end) = self.kernels[i];
        let text = self.ptx.as_bytes();
        let (declarations, body) = (text.get(..self.declarations)?, text.get(start..end)?);
        let mut module = Vec::with_capacity(declarations.len() + body.len() + 1);
        module.extend_from_slice(declarations);
        module.extend_from_slice(body);
        module.push(0);
        Some(module)
    }
}

/// Native code of every kernel for one architecture (a cubin ELF image from `ptxas`).
#[derive(Clone, Copy, Debug)]
pub struct CubinImage {
    /// `sm_XY` or `sm_XYa`.
    pub arch: &'static str,
    pub cubin: &'static [u8],
}

impl CubinImage {
    /// This image's target (native).
    pub fn target(&self) -> ImageTarget {
        ImageTarget { arch: self.arch, native: true }
    }

    /// The cubin in 8-byte-aligned memory (`include_bytes!` data has no alignment; the driver
    /// reads the ELF headers in place).
    pub(crate) fn aligned(&self) -> Vec<u64> {
        let mut words = vec![0u64; self.cubin.len().div_ceil(8)];
        // SAFETY: `words` holds at least `cubin.len()` bytes; u64 has no invalid bit patterns.
        unsafe { std::ptr::copy_nonoverlapping(self.cubin.as_ptr(), words.as_mut_ptr() as *mut u8, self.cubin.len()) };
        words
    }
}

/// Everything the library embeds: PTX images and cubins, each list in any order.
#[derive(Clone, Copy, Debug)]
pub struct KernelImages {
    pub ptx: &'static [PtxImage],
    pub cubins: &'static [CubinImage],
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ptx(arch: &'static str) -> ImageTarget {
        ImageTarget { arch, native: false }
    }

    const fn cubin(arch: &'static str) -> ImageTarget {
        ImageTarget { arch, native: true }
    }

    #[test]
    fn images_run_where_the_driver_can_load_them() {
        // Portable PTX: its architecture and every newer one (JIT).
        assert!(!ptx("sm_80").runs_on(75));
        assert!([80, 86, 89, 90, 100, 120].iter().all(|&cc| ptx("sm_80").runs_on(cc)));
        // Architecture-specific code: that architecture only.
        assert!(ptx("sm_90a").runs_on(90) && cubin("sm_90a").runs_on(90));
        assert!(![89, 100, 120].iter().any(|&cc| ptx("sm_90a").runs_on(cc) || cubin("sm_90a").runs_on(cc)));
        // Portable cubins: the same major version, this minor version or a later one.
        assert!(cubin("sm_80").runs_on(80) && cubin("sm_80").runs_on(86) && cubin("sm_80").runs_on(89));
        assert!(!cubin("sm_80").runs_on(90) && !cubin("sm_80").runs_on(75));
        assert!(cubin("sm_86").runs_on(87) && !cubin("sm_86").runs_on(80) && !cubin("sm_89").runs_on(86));
        assert!(ptx("sm_90a").has_grid_dependency_control() && !ptx("sm_80").has_grid_dependency_control());
        assert!(ptx("sm_90a").has_wgmma() && !ptx("sm_80").has_wgmma());
        assert!(!ptx("sm_100a").has_wgmma());
        assert!(!ptx("compute_90").runs_on(90));
        assert_eq!(
            (cubin("sm_90a").to_string(), ptx("sm_80").to_string()),
            ("cubin sm_90a".into(), "ptx sm_80".into())
        );
    }

    #[test]
    fn the_most_specific_image_comes_first() {
        let mut targets = [cubin("sm_80"), cubin("sm_89"), cubin("sm_90a"), cubin("sm_86")];
        targets.sort_by_key(ImageTarget::preference);
        assert_eq!(targets.map(|t| t.arch), ["sm_90a", "sm_89", "sm_86", "sm_80"]);
        // An RTX 3090 Ti (8.6) takes sm_86; an L4 (8.9) sm_89; an A100 sm_80; an H100 sm_90a.
        for (cc, arch) in [(86, "sm_86"), (87, "sm_86"), (89, "sm_89"), (80, "sm_80"), (90, "sm_90a")] {
            assert_eq!(targets.iter().find(|t| t.runs_on(cc)).map(|t| t.arch), Some(arch), "cc {cc}");
        }
    }

    #[test]
    fn a_kernel_module_is_the_declarations_and_that_kernel() {
        let text = ".version 8.3\n.target sm_80\n.entry a(){}\n.entry b(){}\n\0";
        let declarations = ".version 8.3\n.target sm_80\n".len();
        let a = (declarations, declarations + ".entry a(){}\n".len());
        let image = PtxImage { arch: "sm_80", ptx: text, declarations, kernels: &[] };
        let kernels: &'static [(&'static str, usize, usize)] =
            Box::leak(vec![("a", a.0, a.1), ("b", a.1, a.1 + ".entry b(){}\n".len())].into_boxed_slice());
        let image = PtxImage { kernels, ..image };
        assert_eq!(image.kernel_module("b").unwrap(), b".version 8.3\n.target sm_80\n.entry b(){}\n\0");
        assert_eq!(image.kernel_module("a").unwrap(), b".version 8.3\n.target sm_80\n.entry a(){}\n\0");
        assert!(image.kernel_module("c").is_none());
        assert_eq!(image.kernel_names().collect::<Vec<_>>(), ["a", "b"]);
    }
}
