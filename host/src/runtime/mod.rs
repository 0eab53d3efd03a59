//! CUDA runtime for custom calls: driver loading, the kernels' code loaded once per CUDA context
//! (a cubin, or PTX one kernel at a time: [`images`]), launches on a stream we do not own.
//!
//! - The driver ([`driver`]) is reached through `cudarc`'s dynamically loaded bindings, so
//!   building or loading the shared library needs nothing CUDA. cudarc panics when libcuda is
//!   absent, so every entry first goes through [`ensure_driver`], which turns that into
//!   [`Error::NoDriver`].
//! - XLA hands us a `CUstream`; the module must be loaded in *that stream's* context
//!   (`cuStreamGetCtx`), which need not be the thread's current one. Modules are cached per
//!   `CUcontext` behind a mutex (candle keeps one module store per device the same way).
//! - Kernels are enqueued on the given stream only; nothing here synchronizes the device.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::result as cu;
use cudarc::driver::sys::{self, CUcontext, CUdevice_attribute, CUmodule, CUstream};

use crate::error::{Error, Result};

// The driver's entry points the library needs are listed and checked in `driver.rs`.
mod driver;
mod images;
mod kernel_args;
mod tensor_map;
use driver::{device_holding, stream_context, ContextGuard};
pub use driver::{ensure_driver, stream_is_capturing};
pub use images::{CubinImage, ImageTarget, KernelImages, PtxImage};
pub use kernel_args::{ArgPointers, KernelArgs};
pub use tensor_map::{MapElement, TiledTensorMap};

pub use cudarc::driver::sys::CUfunction;
pub use cudarc::driver::sys::CUstream as Stream;

/// Environment variable naming the PTX image to load (an `arch` of the embedded PTX images, such
/// as `sm_80` or `sm_90a`) instead of the most specific code that runs on the device, native code
/// included: for comparing the images, for running the portable one on a device that has a
/// specific one, and for timing the JIT path. Read when a context first loads the kernels.
pub const PTX_ARCH_ENV_VAR: &str = "XGK_PTX_ARCH";

/// Whether a `cuModuleLoadData` error means the driver could not compile or use this image (so
/// the next image may load), as opposed to a failure of the context or the device.
fn image_not_compiled(code: sys::CUresult) -> bool {
    use sys::CUresult::*;
    matches!(
        code,
        CUDA_ERROR_INVALID_PTX
            | CUDA_ERROR_UNSUPPORTED_PTX_VERSION
            | CUDA_ERROR_NO_BINARY_FOR_GPU
            | CUDA_ERROR_INVALID_IMAGE
            | CUDA_ERROR_INVALID_SOURCE
            | CUDA_ERROR_JIT_COMPILER_NOT_FOUND
            | CUDA_ERROR_JIT_COMPILATION_DISABLED
    )
}

/// The kernels of the embedded images, loaded lazily into each CUDA context that asks for them:
/// the most specific cubin that runs on the context's device, else the most specific PTX image
/// that the driver compiles ([`images`]).
pub struct KernelModule {
    images: KernelImages,
    /// (context id, module): a process sees a handful of contexts, so a list suffices. Keyed by
    /// `cuCtxGetId`, not the handle: a destroyed context's handle can be reused by a new one.
    contexts: Mutex<Vec<(u64, Arc<ContextModule>)>>,
    /// (device ordinal, module of its primary context), for [`KernelModule::for_device`]: the
    /// primary context is retained once and stays alive for the process, so its module is looked
    /// up once (the torch kernel asks for every call's workspace size).
    devices: Mutex<Vec<(i32, Arc<ContextModule>)>>,
}

/// A cluster shape of a kernel's blocks: (kernel, threads, dynamic shared bytes, blocks).
type ClusterKey = (&'static str, u32, u32, u32);

/// A kernel's handle (as an address) and the dynamic shared memory it has been allowed.
type CachedFunction = (usize, u32);

/// What [`KernelModule::load_image`] loaded: the image, its code, and a kernel already looked up
/// (the PTX image's probe) for the function cache.
type LoadedImage = (ImageTarget, LoadedCode, Option<(&'static str, CachedFunction)>);

/// One embedded image, of either kind.
#[derive(Clone, Copy)]
enum Embedded {
    Cubin(CubinImage),
    Ptx(PtxImage),
}

impl Embedded {
    fn target(&self) -> ImageTarget {
        match self {
            Embedded::Cubin(c) => c.target(),
            Embedded::Ptx(p) => p.target(),
        }
    }
}

/// The kernels' code as loaded into one context: every kernel at once from a cubin, or each
/// kernel's own PTX module when it is first asked for (JIT-compiled by the driver then).
enum LoadedCode {
    Cubin(CUmodule),
    Ptx(PtxImage),
}

/// The kernels' code loaded into one context, with the per-device facts launches need.
pub struct ContextModule {
    context: CUcontext,
    code: LoadedCode,
    /// Kernel handle and the dynamic shared memory it has been allowed, by name.
    functions: Mutex<HashMap<&'static str, CachedFunction>>,
    /// Resident blocks per multiprocessor, by (kernel, threads, dynamic shared bytes).
    occupancy: Mutex<HashMap<(&'static str, u32, u32), u32>>,
    /// [`ContextModule::active_clusters`] by (kernel, threads, shared bytes, cluster size).
    cluster_occupancy: Mutex<HashMap<ClusterKey, u32>>,
    /// Streaming multiprocessors of the context's device (sizes split-KV grids).
    pub multiprocessors: u32,
    /// Compute capability as `major * 10 + minor`.
    pub compute_capability: u32,
    /// Most dynamic shared memory a block may opt in to (bytes).
    pub max_shared_bytes_per_block: u32,
    /// Peak DRAM bandwidth per multiprocessor in GB/s (twice the memory clock times the bus
    /// width, over the multiprocessors; 0 where the driver does not say): some plan rules were
    /// measured to pay on one side of it only (an H100 SXM has 25.4 GB/s per SM, an H200 36.5).
    pub dram_gbs_per_multiprocessor: f64,
    /// The image loaded here (cubin or PTX, and its architecture).
    pub image: ImageTarget,
    /// Whether launches may use programmatic dependent launch: the image has the grid-dependency
    /// instructions and the driver records programmatic edges under stream capture (CUDA 12.3+).
    pub programmatic_launch: bool,
}

// SAFETY: CUcontext/CUmodule are opaque driver handles, valid on any thread; the driver API is
// thread-safe, and the function cache is behind a mutex.
unsafe impl Send for ContextModule {}
// SAFETY: see above.
unsafe impl Sync for ContextModule {}

/// Peak DRAM bandwidth per multiprocessor in GB/s from the driver's memory clock (kHz), bus width
/// (bits) and multiprocessor count: two transfers per clock, as NVIDIA quotes HBM bandwidth (an
/// H100 SXM: 2 619 MHz x 5 120 bits = 3.35 TB/s, 25.4 GB/s for each of 132 SMs). 0 where any input
/// is missing.
pub fn dram_gbs_per_multiprocessor(memory_khz: i32, bus_bits: i32, multiprocessors: u32) -> f64 {
    if memory_khz <= 0 || bus_bits <= 0 || multiprocessors == 0 {
        return 0.0;
    }
    2.0 * memory_khz as f64 * 1e3 * (bus_bits as f64 / 8.0) / 1e9 / multiprocessors as f64
}

/// Oldest driver (`cuDriverGetVersion`) whose stream capture records programmatic dependent
/// launches as graph edges (CUDA 12.3); older drivers launch without the attribute.
const PROGRAMMATIC_CAPTURE_DRIVER: i32 = 12030;

impl KernelModule {
    /// `images` in any order; each `ptx` must end with a NUL byte (`cuModuleLoadData` reads a C
    /// string).
    pub const fn new(images: KernelImages) -> Self {
        KernelModule { images, contexts: Mutex::new(Vec::new()), devices: Mutex::new(Vec::new()) }
    }

    /// How many CUDA contexts have this module loaded (a leak check: it grows only with new
    /// contexts, never per call).
    pub fn loaded_contexts(&self) -> usize {
        self.contexts.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The embedded images, most specific first: the cubins, then the PTX images.
    fn by_preference(&self) -> Vec<Embedded> {
        let mut cubins: Vec<Embedded> = self.images.cubins.iter().map(|&c| Embedded::Cubin(c)).collect();
        let mut ptx: Vec<Embedded> = self.images.ptx.iter().map(|&p| Embedded::Ptx(p)).collect();
        cubins.sort_by_key(|i| i.target().preference());
        ptx.sort_by_key(|i| i.target().preference());
        cubins.extend(ptx);
        cubins
    }

    /// The embedded images as `cubin sm_90a, ..., ptx sm_80` (for error messages and the version).
    pub fn describe(&self) -> String {
        let described: Vec<String> = self.by_preference().iter().map(|i| i.target().to_string()).collect();
        described.join(", ")
    }

    /// The module loaded in the context that owns `stream`, loading it on first use.
    ///
    /// # Safety
    /// `stream` must be a live CUDA stream (or null, the legacy default stream of the current
    /// context): the driver dereferences it.
    pub unsafe fn for_stream(&self, stream: CUstream) -> Result<Arc<ContextModule>> {
        ensure_driver()?;
        let context = stream_context(stream)?;
        // SAFETY: the context owns a live stream, so it is live.
        unsafe { self.for_context(context) }
    }

    /// The module for a launch on `stream` whose buffers include `data`. A stream names its
    /// context, except CUDA's legacy default stream (NULL), which means the legacy stream of
    /// whatever context is current when the work is enqueued; but torch's default stream of
    /// *every* device is NULL, and its current device need not be the tensors' (`cuda:1` tensors
    /// while `cuda:0` is current). So for NULL the context is the primary context of `device`
    /// where the caller knows it, else of the device holding `data`; launches then push that
    /// context, so NULL names its legacy stream. Launching in the current context instead ran the
    /// kernel on the wrong GPU (an illegal address on `cuda:1` tensors, found on two H100s).
    ///
    /// # Safety
    /// As [`KernelModule::for_stream`]; `data` is a device pointer (read only by the driver's
    /// pointer query, for a NULL stream without `device`).
    pub unsafe fn for_launch(
        &self,
        stream: CUstream,
        device: Option<i32>,
        data: *const c_void,
    ) -> Result<Arc<ContextModule>> {
        if !stream.is_null() {
            // SAFETY: the caller's contract.
            return unsafe { self.for_stream(stream) };
        }
        let ordinal = match device {
            Some(ordinal) => ordinal,
            None => {
                ensure_driver()?;
                // SAFETY: the driver only looks the address up.
                unsafe { device_holding(data) }?
            }
        };
        self.for_device(ordinal)
    }

    /// The module loaded in the primary context of CUDA device `ordinal` (the context XLA and
    /// torch run their streams in), retaining that context and loading the module on first use
    /// (once per ordinal: before, every call retained the context again, a driver call and a
    /// reference count that grew per call). For host-side queries made before any launch
    /// (workspace sizes), so the launches that follow, possibly under stream capture, find the
    /// module loaded.
    pub fn for_device(&self, ordinal: i32) -> Result<Arc<ContextModule>> {
        // Held through the first use too, so that two threads never both retain the context.
        let mut devices = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, m)) = devices.iter().find(|(o, _)| *o == ordinal) {
            return Ok(m.clone());
        }
        ensure_driver()?;
        let device = cu::device::get(ordinal).map_err(|e| Error::cuda("cuDeviceGet", e))?;
        let mut context: CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; `device` came from the driver. The retain is never
        // released: the primary context then lives as long as the process, like XLA's and
        // torch's own retains, and the cached module stays valid.
        unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, device) }
            .result()
            .map_err(|e| Error::cuda("cuDevicePrimaryCtxRetain", e))?;
        // SAFETY: retained above.
        let module = unsafe { self.for_context(context) }?;
        devices.push((ordinal, module.clone()));
        Ok(module)
    }

    /// # Safety
    /// `context` must be a live context.
    unsafe fn for_context(&self, context: CUcontext) -> Result<Arc<ContextModule>> {
        let mut id = 0u64;
        // SAFETY: out-pointer to a local; `context` is live (it owns the stream).
        unsafe { sys::cuCtxGetId(context, &mut id) }.result().map_err(|e| Error::cuda("cuCtxGetId", e))?;
        let mut contexts = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, m)) = contexts.iter().find(|(c, _)| *c == id) {
            return Ok(m.clone());
        }
        // Entries of destroyed contexts stay behind, unmatched (ids are never reused); their
        // modules were freed with the context.
        let _guard = ContextGuard::push(context)?;
        let mut device = 0;
        // SAFETY: out-pointer to a local; context is current.
        unsafe { sys::cuCtxGetDevice(&mut device) }.result().map_err(|e| Error::cuda("cuCtxGetDevice", e))?;
        // SAFETY: `device` came from the driver.
        let attr =
            |a| unsafe { cu::device::get_attribute(device, a) }.map_err(|e| Error::cuda("cuDeviceGetAttribute", e));
        let multiprocessors = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let major = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as u32;
        let minor = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as u32;
        let cc = major * 10 + minor;
        let max_shared_bytes_per_block =
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32;
        // A tuning input only: a driver that does not report it leaves it 0 (unknown).
        let memory_khz = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE).unwrap_or(0);
        let bus_bits = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH).unwrap_or(0);
        let dram_gbs_per_multiprocessor = dram_gbs_per_multiprocessor(memory_khz, bus_bits, multiprocessors);
        let mut driver = 0;
        // SAFETY: out-pointer to a local.
        unsafe { sys::cuDriverGetVersion(&mut driver) }.result().map_err(|e| Error::cuda("cuDriverGetVersion", e))?;
        let (image, code, probe) = self.load_image(cc)?;
        let loaded = Arc::new(ContextModule {
            context,
            code,
            functions: Mutex::new(probe.into_iter().collect()),
            occupancy: Mutex::new(HashMap::new()),
            cluster_occupancy: Mutex::new(HashMap::new()),
            multiprocessors,
            compute_capability: cc,
            max_shared_bytes_per_block,
            dram_gbs_per_multiprocessor,
            image,
            programmatic_launch: image.has_grid_dependency_control() && driver >= PROGRAMMATIC_CAPTURE_DRIVER,
        });
        contexts.push((id, loaded.clone()));
        Ok(loaded)
    }

    /// Loads, into the current context, the most specific cubin that runs on compute capability
    /// `cc`, else the most specific PTX image the driver compiles (or the PTX image
    /// [`PTX_ARCH_ENV_VAR`] names), falling back to the next when the driver refuses one (a
    /// driver older than the cubins' toolkit, an older driver's PTX JIT). A PTX image is checked
    /// by compiling its smallest kernel, returned as the third value (its name and function) for
    /// the function cache; its other kernels are compiled when first asked for. Any other load
    /// error (out of memory, a sticky error from an earlier fault) is returned as it is: falling
    /// back then would cache a lesser image for the context for good.
    fn load_image(&self, cc: u32) -> Result<LoadedImage> {
        let forced = std::env::var(PTX_ARCH_ENV_VAR).ok().filter(|v| !v.is_empty());
        if let Some(arch) = &forced {
            if !self.images.ptx.iter().any(|i| i.arch == arch) {
                return Err(Error::invalid(format!(
                    "{PTX_ARCH_ENV_VAR}={arch:?} names no embedded PTX image; the library has {}",
                    self.describe()
                )));
            }
        }
        let mut refused = Vec::new();
        for embedded in self.by_preference() {
            let target = embedded.target();
            let chosen = match &forced {
                Some(arch) => !target.native && target.arch == arch,
                None => true,
            };
            if !chosen || !target.runs_on(cc) {
                continue;
            }
            let loaded = match embedded {
                Embedded::Cubin(cubin) => {
                    let words = cubin.aligned();
                    // SAFETY: an ELF image from ptxas, 8-byte aligned; the caller made the context
                    // current. The driver copies what it needs.
                    unsafe { cu::module::load_data(words.as_ptr() as *const c_void) }
                        .map(|module| (target, LoadedCode::Cubin(module), None))
                }
                Embedded::Ptx(image) => {
                    let probe = image
                        .kernels
                        .iter()
                        .min_by_key(|&&(_, start, end)| end - start)
                        .map(|&(name, _, _)| name)
                        .ok_or_else(|| Error::invalid("internal: a PTX image without kernels"))?;
                    // SAFETY: the caller made the context current.
                    unsafe { load_ptx_kernel(&image, probe) }
                        .map(|f| (target, LoadedCode::Ptx(image), Some((probe, (f as usize, 48 * 1024)))))
                }
            };
            match loaded {
                Ok(loaded) => return Ok(loaded),
                Err(e) if image_not_compiled(e.0) => {
                    refused.push(format!("{target}: {}", Error::cuda("cuModuleLoadData", e)))
                }
                Err(e) => return Err(Error::cuda("cuModuleLoadData", e)),
            }
        }
        let cc_text = format!("{}.{}", cc / 10, cc % 10);
        Err(if refused.is_empty() {
            let chosen = match &forced {
                Some(arch) => format!("the PTX image {PTX_ARCH_ENV_VAR}={arch:?} names does not run"),
                None => "no embedded image runs".to_string(),
            };
            Error::invalid(format!(
                "{chosen} on this GPU (compute capability {cc_text}); the library has {} \
                 (the kernels need compute capability 8.0 or newer; an `a` image runs on its own \
                 architecture only)",
                self.describe()
            ))
        } else {
            Error::Driver(format!(
                "the driver loaded no kernel image on compute capability {cc_text}: {}",
                refused.join("; ")
            ))
        })
    }
}

/// Loads the module of `image` that holds only `kernel` (the driver JIT-compiles it) and returns
/// the kernel. The module stays loaded for the context's life.
///
/// # Safety
/// A context must be current; `kernel` must be a kernel of `image` (else an error).
unsafe fn load_ptx_kernel(
    image: &PtxImage,
    kernel: &'static str,
) -> std::result::Result<CUfunction, cudarc::driver::DriverError> {
    let Some(module_text) = image.kernel_module(kernel) else {
        return Err(cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_NOT_FOUND));
    };
    // SAFETY: NUL-terminated PTX; the context is current (caller's contract).
    let module = unsafe { cu::module::load_data(module_text.as_ptr() as *const c_void) }?;
    let name =
        CString::new(kernel).map_err(|_| cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE))?;
    // SAFETY: the module was just loaded in the current context.
    unsafe { cu::module::get_function(module, name) }
}

impl ContextModule {
    /// The kernel called `name` (looked up once, then cached), allowed `shared_bytes` of dynamic
    /// shared memory (above 48 KiB a kernel must opt in with
    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`; done once per kernel and size, not per
    /// launch).
    pub fn function_with_shared(&self, name: &'static str, shared_bytes: u32) -> Result<CUfunction> {
        let mut functions = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        let entry = match functions.get(name) {
            Some(&(f, allowed)) if shared_bytes <= allowed => return Ok(f as CUfunction),
            Some(&entry) => entry,
            None => {
                let _guard = ContextGuard::push(self.context)?;
                let f = match &self.code {
                    LoadedCode::Cubin(module) => {
                        let cname = CString::new(name).map_err(|_| Error::invalid("kernel name contains NUL"))?;
                        // SAFETY: the module is loaded and never unloaded.
                        unsafe { cu::module::get_function(*module, cname) }
                            .map_err(|e| Error::cuda("cuModuleGetFunction", e))?
                    }
                    // The first call of this kernel in this context: the driver compiles its
                    // PTX now (seconds; cached on disk by the driver for later processes).
                    // SAFETY: the context is current (guard above).
                    LoadedCode::Ptx(image) => unsafe { load_ptx_kernel(image, name) }
                        .map_err(|e| Error::cuda("cuModuleLoadData (one kernel's PTX)", e))?,
                };
                (f as usize, 48 * 1024)
            }
        };
        let (f, mut allowed) = entry;
        if shared_bytes > allowed {
            let _guard = ContextGuard::push(self.context)?;
            // SAFETY: `f` is a live function of this context's module.
            unsafe {
                sys::cuFuncSetAttribute(
                    f as CUfunction,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared_bytes as i32,
                )
            }
            .result()
            .map_err(|e| Error::cuda("cuFuncSetAttribute", e))?;
            allowed = shared_bytes;
        }
        functions.insert(name, (f, allowed));
        Ok(f as CUfunction)
    }

    /// How many blocks of `kernel` (with `threads` threads and `shared_bytes` of dynamic shared
    /// memory) one multiprocessor holds at once, as the driver computes it from the kernel's
    /// registers and shared memory. Cached per (kernel, threads, shared bytes).
    pub fn resident_blocks(&self, kernel: &'static str, threads: u32, shared_bytes: u32) -> Result<u32> {
        let key = (kernel, threads, shared_bytes);
        if let Some(&n) = self.occupancy.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(n);
        }
        let f = self.function_with_shared(kernel, shared_bytes)?;
        let _guard = ContextGuard::push(self.context)?;
        let mut blocks = 0i32;
        // SAFETY: out-pointer to a local; `f` is a live function of this context.
        unsafe {
            sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut blocks, f, threads as i32, shared_bytes as usize)
        }
        .result()
        .map_err(|e| Error::cuda("cuOccupancyMaxActiveBlocksPerMultiprocessor", e))?;
        let n = blocks.max(1) as u32;
        self.occupancy.lock().unwrap_or_else(|e| e.into_inner()).insert(key, n);
        Ok(n)
    }

    /// Enqueues `kernel` on `stream`. With `programmatic` (and [`Self::programmatic_launch`]),
    /// the launch carries the programmatic-stream-serialization attribute: the kernel may start
    /// before the preceding kernel on the stream has finished, and must call
    /// `griddepcontrol.wait` (`kernels_gpu::grid_dependency`) before touching memory that kernel
    /// uses.
    ///
    /// # Safety
    /// `args` must match the kernel's parameter list in number, order and type (each entry points
    /// at a value of the parameter's type), and every device pointer among them must be valid for
    /// the accesses the kernel makes with the given grid. With `programmatic`, the kernel must
    /// wait as above.
    pub unsafe fn launch(
        &self,
        stream: CUstream,
        kernel: &'static str,
        cfg: LaunchConfig,
        args: &mut [*mut c_void],
        programmatic: bool,
    ) -> Result<()> {
        // SAFETY: as the caller promised; no cluster.
        unsafe { self.launch_in_clusters(stream, kernel, cfg, 1, args, programmatic) }
    }

    /// [`Self::launch`] with the grid's blocks in clusters of `cluster_z` consecutive z indices
    /// (1: no clusters). A kernel launched with clusters needs no fallback: a launch the driver
    /// refuses is an error.
    ///
    /// # Safety
    /// As [`Self::launch`]; with `cluster_z > 1`, the image must have clusters
    /// ([`PtxImage::has_clusters`]), the grid's z a multiple of `cluster_z`, and a cluster of that
    /// size must fit the device ([`Self::active_clusters`] above 0 for this kernel and block).
    pub unsafe fn launch_in_clusters(
        &self,
        stream: CUstream,
        kernel: &'static str,
        cfg: LaunchConfig,
        cluster_z: u32,
        args: &mut [*mut c_void],
        programmatic: bool,
    ) -> Result<()> {
        let f = self.function_with_shared(kernel, cfg.shared_bytes)?;
        // SAFETY: `f` is this module's `kernel`, allowed `cfg.shared_bytes`; the rest as the
        // caller promised.
        unsafe { self.launch_function(stream, f, cfg, cluster_z, args, programmatic) }
    }

    /// [`Self::launch_in_clusters`] of a kernel looked up before ([`Self::function_with_shared`]):
    /// callers that launch the same kernels call after call keep the handles (the attention
    /// op's cached plans) and skip the lookup.
    ///
    /// # Safety
    /// As [`Self::launch_in_clusters`]; `f` must come from this module's
    /// [`Self::function_with_shared`] with at least `cfg.shared_bytes`.
    pub unsafe fn launch_function(
        &self,
        stream: CUstream,
        f: CUfunction,
        cfg: LaunchConfig,
        cluster_z: u32,
        args: &mut [*mut c_void],
        programmatic: bool,
    ) -> Result<()> {
        let _guard = ContextGuard::push(self.context)?;
        let programmatic = programmatic && self.programmatic_launch;
        if programmatic || cluster_z > 1 {
            let mut attributes = LaunchAttributes::new(programmatic, cluster_z);
            let config = attributes.config(&cfg, stream);
            // SAFETY: `config` and `attributes` outlive the call; the arguments as the caller promised.
            match unsafe { sys::cuLaunchKernelEx(&config, f, args.as_mut_ptr(), std::ptr::null_mut()) }.result() {
                Ok(()) => {}
                // A driver or capture mode that refuses programmatic launch: the launch without
                // it is still correct (the kernel's wait returns at once).
                Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_SUPPORTED && cluster_z <= 1 => {
                    cu::launch_kernel(f, cfg.grid, cfg.block, cfg.shared_bytes, stream, args)
                        .map_err(|e| Error::cuda("cuLaunchKernel", e))?
                }
                Err(e) => return Err(Error::cuda("cuLaunchKernelEx", e)),
            }
        } else {
            cu::launch_kernel(f, cfg.grid, cfg.block, cfg.shared_bytes, stream, args)
                .map_err(|e| Error::cuda("cuLaunchKernel", e))?;
        }
        LAUNCHES.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// How many clusters of `size` blocks of `kernel` (with `threads` threads and `shared_bytes`
    /// of dynamic shared memory each) the device runs at once (`cuOccupancyMaxActiveClusters`);
    /// 0 when such a cluster cannot be scheduled at all. Sizes above 8 (Hopper's non-portable
    /// ones) are allowed for the kernel first. Cached per (kernel, block, size).
    pub fn active_clusters(&self, kernel: &'static str, threads: u32, shared_bytes: u32, size: u32) -> Result<u32> {
        let key = (kernel, threads, shared_bytes, size);
        if let Some(&n) = self.cluster_occupancy.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(n);
        }
        let f = self.function_with_shared(kernel, shared_bytes)?;
        let _guard = ContextGuard::push(self.context)?;
        if size > 8 {
            // SAFETY: `f` is a live function of this context.
            unsafe {
                cu::function::set_function_attribute(
                    f,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                    1,
                )
            }
            .map_err(|e| Error::cuda("cuFuncSetAttribute", e))?;
        }
        let mut attributes = LaunchAttributes::new(false, size);
        let cfg = LaunchConfig { grid: (1, 1, size), block: (threads, 1, 1), shared_bytes };
        let config = attributes.config(&cfg, std::ptr::null_mut());
        let mut clusters = 0i32;
        // SAFETY: out-pointer to a local; `config` and its attributes outlive the call.
        let n = match unsafe { sys::cuOccupancyMaxActiveClusters(&mut clusters, f, &config) }.result() {
            Ok(()) => clusters.max(0) as u32,
            // A cluster shape the device cannot take (too large, too much shared memory).
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_INVALID_CLUSTER_SIZE => 0,
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_INVALID_VALUE => 0,
            Err(e) => return Err(Error::cuda("cuOccupancyMaxActiveClusters", e)),
        };
        self.cluster_occupancy.lock().unwrap_or_else(|e| e.into_inner()).insert(key, n);
        Ok(n)
    }

    /// Stream-ordered scratch memory (`cuMemAllocAsync`), freed by [`Scratch::free`] on the same
    /// stream after the kernels that use it.
    ///
    /// # Safety
    /// `stream` must be a live stream of this module's context, and stay alive until the
    /// [`Scratch`] is freed.
    pub unsafe fn alloc_scratch(&self, stream: CUstream, bytes: usize) -> Result<Scratch> {
        let _guard = ContextGuard::push(self.context)?;
        // SAFETY: the memory is only used by kernels enqueued on `stream` before `free`.
        let ptr = unsafe { cu::malloc_async(stream, bytes.max(1)) }.map_err(|e| Error::cuda("cuMemAllocAsync", e))?;
        Ok(Scratch { ptr, stream, context: self.context })
    }
}

/// Kernels this process has enqueued through the library (every context, every stream).
static LAUNCHES: AtomicU64 = AtomicU64::new(0);

/// How many kernels the library has enqueued so far in this process. A diagnostic: a call
/// replayed from a CUDA graph (an XLA command buffer, a `torch.cuda.CUDAGraph`) launches nothing
/// through the library, so the count shows whether calls run eagerly or from a graph.
pub fn launch_count() -> u64 {
    LAUNCHES.load(Ordering::Relaxed)
}

/// Device memory from [`ContextModule::alloc_scratch`].
pub struct Scratch {
    ptr: sys::CUdeviceptr,
    stream: CUstream,
    context: CUcontext,
}

impl Scratch {
    /// Device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Frees the memory once the stream reaches this point.
    pub fn free(self) -> Result<()> {
        let _guard = ContextGuard::push(self.context)?;
        // SAFETY: allocated on this stream; later work on the stream no longer uses it.
        unsafe { cu::free_async(self.ptr, self.stream) }.map_err(|e| Error::cuda("cuMemFreeAsync", e))
    }
}

/// Grid, block and dynamic shared memory of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared_bytes: u32,
}

/// The launch attributes of a launch: programmatic stream serialization and a cluster shape of
/// `(1, 1, cluster_z)` blocks, each where asked for; the first `n` of the array are in use (an
/// array: no allocation per launch).
struct LaunchAttributes {
    array: [sys::CUlaunchAttribute; 2],
    n: usize,
}

impl LaunchAttributes {
    fn new(programmatic: bool, cluster_z: u32) -> Self {
        // SAFETY: plain C structs (an id and a union of integers) for which zero is valid.
        let mut this = LaunchAttributes { array: unsafe { std::mem::zeroed() }, n: 0 };
        if programmatic {
            let a = &mut this.array[this.n];
            a.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            a.value.programmaticStreamSerializationAllowed = 1;
            this.n += 1;
        }
        if cluster_z > 1 {
            let a = &mut this.array[this.n];
            a.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            a.value.clusterDim.x = 1;
            a.value.clusterDim.y = 1;
            a.value.clusterDim.z = cluster_z;
            this.n += 1;
        }
        this
    }

    /// `cuLaunchKernelEx`'s configuration of `cfg` on `stream` with these attributes (borrowed:
    /// the configuration must not outlive them).
    fn config(&mut self, cfg: &LaunchConfig, stream: CUstream) -> sys::CUlaunchConfig {
        sys::CUlaunchConfig {
            gridDimX: cfg.grid.0,
            gridDimY: cfg.grid.1,
            gridDimZ: cfg.grid.2,
            blockDimX: cfg.block.0,
            blockDimY: cfg.block.1,
            blockDimZ: cfg.block.2,
            sharedMemBytes: cfg.shared_bytes,
            hStream: stream,
            attrs: self.array.as_mut_ptr(),
            numAttrs: self.n as u32,
        }
    }
}
