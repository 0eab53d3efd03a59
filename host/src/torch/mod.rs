//! The torch ops' CPU and CUDA kernels, registered with torch's dispatcher through libtorch's
//! stable C ABI, so a call `torch.ops.xla_gpu.paged_attention(...)` runs no Python between the
//! dispatcher and the launch (the Python front end defines the schemas and the fake kernels; it
//! falls back to Python kernels through ctypes where this registration is unavailable).
//!
//! - [`shim`]: the libtorch entry points (`aoti_torch_*`), resolved at run time;
//! - [`cxx_exception`]: raising `std::invalid_argument` / `std::runtime_error` from a kernel;
//! - [`kernels`]: the boxed kernels (arguments from torch's stack, validation, launch).

mod cxx_exception;
mod kernels;
mod shim;

use std::ffi::CString;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::runtime::KernelModule;
use cxx_exception::CxxRuntime;
use shim::{check, resolve, Dylib, LibraryHandle, Shim};

/// Everything the kernels need, set once by [`register`].
pub(crate) struct TorchRuntime {
    shim: Shim,
    cxx: CxxRuntime,
    kernels: &'static KernelModule,
    /// torch `ScalarType` number → our dtype, for the dtypes the library knows.
    dtypes: Vec<(i32, DType)>,
    /// torch `ScalarType` number → name, for other dtypes (error messages).
    other_dtypes: Vec<(i32, &'static str)>,
    /// The libraries the function pointers point into (kept open).
    _libs: (Dylib, Option<Dylib>),
}

static RUNTIME: OnceLock<TorchRuntime> = OnceLock::new();
/// Serializes [`register`]; holds the dispatch keys registered so far.
static REGISTERED: Mutex<Option<Vec<&'static str>>> = Mutex::new(None);

/// The torch ops implemented here, as `(name in namespace xla_gpu, kernel)`.
const OPS: [(&str, shim::BoxedKernel); 2] =
    [("simple_add", kernels::simple_add), ("paged_attention", kernels::paged_attention)];

/// Registers the CPU kernels of `torch.ops.xla_gpu.{simple_add, paged_attention}` and, when
/// `torch_lib_dir` holds `libtorch_cuda.so`, the CUDA kernels, with the libtorch the process has
/// loaded from `torch_lib_dir` (torch's `lib` folder). The schemas must be defined already
/// (`torch.library.define`). Idempotent: a second call returns the keys of the first. Returns the
/// dispatch keys registered.
pub fn register(kernels: &'static KernelModule, torch_lib_dir: &Path) -> Result<Vec<&'static str>> {
    let mut registered = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(keys) = registered.as_ref() {
        return Ok(keys.clone());
    }
    let path = |name: &str| torch_lib_dir.join(name).to_string_lossy().into_owned();
    let cpu = Dylib::open(&path("libtorch_cpu.so"))?;
    let cuda_path = path("libtorch_cuda.so");
    let cuda = if Path::new(&cuda_path).exists() { Some(Dylib::open(&cuda_path)?) } else { None };
    let shim = Shim::load(&cpu, cuda.as_ref())?;
    let cxx = CxxRuntime::load()?;
    let dtypes = dtype_table(&cpu)?;
    let other_dtypes = other_dtype_names(&cpu);
    let has_cuda = shim.current_cuda_stream.is_some();
    let runtime = RUNTIME.get_or_init(|| TorchRuntime { shim, cxx, kernels, dtypes, other_dtypes, _libs: (cpu, cuda) });

    let mut keys = vec!["CPU"];
    if has_cuda {
        keys.push("CUDA");
    }
    let ns = c"xla_gpu";
    let file = CString::new(file!()).unwrap();
    for key in &keys {
        let key_c = CString::new(*key).unwrap();
        let mut lib: LibraryHandle = std::ptr::null_mut();
        // SAFETY: valid C strings and an out pointer. The library object is never deleted: its
        // registrations live as long as the process.
        check(
            unsafe { (runtime.shim.library_init_impl)(ns.as_ptr(), key_c.as_ptr(), file.as_ptr(), line!(), &mut lib) },
            "aoti_torch_library_init_impl",
        )?;
        for (name, kernel) in OPS {
            let name_c = CString::new(name).unwrap();
            // SAFETY: a live library handle; the kernel follows the boxed calling convention.
            check(unsafe { (runtime.shim.library_impl)(lib, name_c.as_ptr(), kernel) }, "aoti_torch_library_impl")
                .map_err(|e| Error::Torch(format!("registering xla_gpu::{name} for {key}: {e}")))?;
        }
    }
    *registered = Some(keys.clone());
    Ok(keys)
}

/// torch's `ScalarType` numbers of the dtypes the library knows, from libtorch's getters.
fn dtype_table(lib: &Dylib) -> Result<Vec<(i32, DType)>> {
    let mut table = Vec::new();
    for (getter, dtype) in [
        ("aoti_torch_dtype_bool", DType::Pred),
        ("aoti_torch_dtype_int8", DType::S8),
        ("aoti_torch_dtype_int16", DType::S16),
        ("aoti_torch_dtype_int32", DType::S32),
        ("aoti_torch_dtype_int64", DType::S64),
        ("aoti_torch_dtype_uint8", DType::U8),
        ("aoti_torch_dtype_uint16", DType::U16),
        ("aoti_torch_dtype_uint32", DType::U32),
        ("aoti_torch_dtype_uint64", DType::U64),
        ("aoti_torch_dtype_float16", DType::F16),
        ("aoti_torch_dtype_float32", DType::F32),
        ("aoti_torch_dtype_float64", DType::F64),
        ("aoti_torch_dtype_bfloat16", DType::BF16),
        ("aoti_torch_dtype_float8_e5m2", DType::F8E5M2),
        ("aoti_torch_dtype_float8_e4m3fn", DType::F8E4M3FN),
    ] {
        let get: unsafe extern "C" fn() -> i32 = resolve!(lib, getter);
        // SAFETY: an argument-less getter of a constant.
        table.push((unsafe { get() }, dtype));
    }
    Ok(table)
}

/// Names of torch dtypes the library has no use for, by `ScalarType` number (those this torch has).
fn other_dtype_names(lib: &Dylib) -> Vec<(i32, &'static str)> {
    let mut names = Vec::new();
    for name in ["complex32", "complex64", "complex128", "float8_e4m3fnuz", "float8_e5m2fnuz"] {
        let get: Result<unsafe extern "C" fn() -> i32> = (|| Ok(resolve!(lib, &format!("aoti_torch_dtype_{name}"))))();
        if let Ok(get) = get {
            // SAFETY: an argument-less getter of a constant.
            names.push((unsafe { get() }, name));
        }
    }
    names
}

impl TorchRuntime {
    /// The registered runtime. Kernels run only after [`register`] set it.
    fn get() -> &'static TorchRuntime {
        RUNTIME.get().expect("torch kernels called before registration")
    }

    fn dtype(&self, scalar_type: i32) -> Option<DType> {
        self.dtypes.iter().find(|(c, _)| *c == scalar_type).map(|(_, d)| *d)
    }

    /// `torch.<name>` of a dtype the library does not know, for messages.
    fn other_dtype_name(&self, scalar_type: i32) -> String {
        match self.other_dtypes.iter().find(|(c, _)| *c == scalar_type) {
            Some((_, name)) => format!("torch.{name}"),
            None => format!("torch ScalarType {scalar_type}"),
        }
    }

    /// torch's `ScalarType` number of `dtype`.
    fn scalar_type(&self, dtype: DType) -> Option<i32> {
        self.dtypes.iter().find(|(_, d)| *d == dtype).map(|(c, _)| *c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without libtorch (a JAX-only machine, a wrong folder) registration is an error naming the
    /// library, never a crash; the Python front end then keeps its own kernels.
    #[test]
    fn register_without_libtorch_is_an_error_naming_the_library() {
        static KERNELS: KernelModule = KernelModule::new(crate::runtime::KernelImages { ptx: &[], cubins: &[] });
        let err = register(&KERNELS, Path::new("/nonexistent/torch/lib")).unwrap_err();
        assert!(matches!(err, Error::Torch(_)), "{err:?}");
        assert!(err.to_string().contains("libtorch_cpu.so"), "{err}");
    }
}
