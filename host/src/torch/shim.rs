//! The part of libtorch's stable C ABI (`torch/csrc/inductor/aoti_torch/c/shim.h`, the "AOTI
//! shim") that the torch kernels use, resolved at run time from the libtorch the Python process
//! has already loaded: the library links against nothing of torch, so JAX-only users never need
//! it.
//!
//! Every shim function returns `AOTITorchError` (0 = success) and catches its own C++ exceptions;
//! handles are `at::Tensor*` behind an opaque pointer.

use std::ffi::{c_char, c_void, CStr, CString};

use crate::error::{Error, Result};

/// `AtenTensorHandle`.
pub type TensorHandle = *mut c_void;
/// `TorchLibraryHandle` (a heap `torch::Library`).
pub type LibraryHandle = *mut c_void;
/// `StableIValue`: a 64-bit slot of the boxed-kernel stack (a handle, an `int64_t`, the bits of a
/// `double`, or, for `T?`, NULL or a heap `StableIValue*` that the kernel frees).
pub type StableIValue = u64;
/// A boxed kernel: the stack holds `num_args` arguments in, `num_outputs` results out.
pub type BoxedKernel = unsafe extern "C-unwind" fn(stack: *mut StableIValue, num_args: u64, num_outputs: u64);

type Status = i32;

/// A shared library already loaded into the process, opened by path (`dlopen` bumps its
/// reference count; it is never closed: the registered kernels point into it).
pub(crate) struct Dylib(*mut c_void);

// SAFETY: a dlopen handle is a process-wide token, usable from any thread.
unsafe impl Send for Dylib {}
unsafe impl Sync for Dylib {}

impl Dylib {
    /// Opens `path` (`RTLD_NOW | RTLD_LOCAL`; an already-loaded library is returned as is).
    pub(crate) fn open(path: &str) -> Result<Self> {
        let c = CString::new(path).map_err(|_| Error::invalid("library path contains a NUL byte"))?;
        // SAFETY: a valid C string; dlopen has no other preconditions.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(Error::Torch(format!("dlopen({path}) failed: {}", dlerror())));
        }
        Ok(Dylib(handle))
    }

    /// The address of the symbol `name`.
    pub(crate) fn symbol(&self, name: &str) -> Result<*mut c_void> {
        let c = CString::new(name).map_err(|_| Error::invalid("symbol name contains a NUL byte"))?;
        // SAFETY: a live handle and a valid C string.
        let p = unsafe { libc::dlsym(self.0, c.as_ptr()) };
        if p.is_null() {
            return Err(Error::Torch(format!("symbol {name} not found: {}", dlerror())));
        }
        Ok(p)
    }
}

impl Dylib {
    /// The symbol `name` as a function pointer of type `F`.
    ///
    /// # Safety
    /// `F` is an `extern` function pointer type matching the symbol's C signature.
    pub(crate) unsafe fn function<F: Copy>(&self, name: &str) -> Result<F> {
        const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
        let p = self.symbol(name)?;
        Ok(std::mem::transmute_copy::<*mut c_void, F>(&p))
    }
}

fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a C string valid until the next dl* call on this thread.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown error".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

/// Resolves `$name` from `$lib` as the function pointer type of the place it initializes.
macro_rules! resolve {
    ($lib:expr, $name:expr) => {
        // SAFETY: the symbol is the C function of that name; the place's type transcribes its
        // C signature (from shim.h, or the Itanium C++ ABI).
        unsafe { $lib.function($name)? }
    };
}
pub(crate) use resolve;

/// The shim functions the kernels call (signatures as in shim.h of torch 2.8+).
pub(crate) struct Shim {
    pub library_init_impl: unsafe extern "C" fn(
        ns: *const c_char,
        key: *const c_char,
        file: *const c_char,
        line: u32,
        ret: *mut LibraryHandle,
    ) -> Status,
    pub library_impl: unsafe extern "C" fn(lib: LibraryHandle, name: *const c_char, kernel: BoxedKernel) -> Status,
    pub delete_tensor_object: unsafe extern "C" fn(TensorHandle) -> Status,
    pub get_data_ptr: unsafe extern "C" fn(TensorHandle, *mut *mut c_void) -> Status,
    pub get_dtype: unsafe extern "C" fn(TensorHandle, *mut i32) -> Status,
    pub get_dim: unsafe extern "C" fn(TensorHandle, *mut i64) -> Status,
    pub get_sizes: unsafe extern "C" fn(TensorHandle, *mut *const i64) -> Status,
    pub get_device_type: unsafe extern "C" fn(TensorHandle, *mut i32) -> Status,
    pub get_device_index: unsafe extern "C" fn(TensorHandle, *mut i32) -> Status,
    pub is_contiguous: unsafe extern "C" fn(TensorHandle, *mut bool) -> Status,
    pub is_defined: unsafe extern "C" fn(TensorHandle, *mut bool) -> Status,
    #[allow(clippy::type_complexity)]
    pub empty_strided: unsafe extern "C" fn(
        ndim: i64,
        sizes: *const i64,
        strides: *const i64,
        dtype: i32,
        device_type: i32,
        device_index: i32,
        ret: *mut TensorHandle,
    ) -> Status,
    pub copy_: unsafe extern "C" fn(dst: TensorHandle, src: TensorHandle, non_blocking: i32) -> Status,
    /// `aoti_torch_get_current_cuda_stream` (libtorch_cuda): torch's current stream of a device,
    /// the capture stream under `torch.cuda.graph`. None in a CPU-only torch.
    pub current_cuda_stream: Option<unsafe extern "C" fn(device_index: i32, ret: *mut *mut c_void) -> Status>,
    /// c10 device type numbers.
    pub device_cpu: i32,
    pub device_cuda: i32,
}

impl Shim {
    /// Resolves the shim from `libtorch_cpu` and, when given, `libtorch_cuda`.
    pub(crate) fn load(cpu: &Dylib, cuda: Option<&Dylib>) -> Result<Self> {
        let device_cpu: unsafe extern "C" fn() -> i32 = resolve!(cpu, "aoti_torch_device_type_cpu");
        let device_cuda: unsafe extern "C" fn() -> i32 = resolve!(cpu, "aoti_torch_device_type_cuda");
        let current_cuda_stream = match cuda {
            Some(lib) => Some(resolve!(lib, "aoti_torch_get_current_cuda_stream")),
            None => None,
        };
        Ok(Shim {
            library_init_impl: resolve!(cpu, "aoti_torch_library_init_impl"),
            library_impl: resolve!(cpu, "aoti_torch_library_impl"),
            delete_tensor_object: resolve!(cpu, "aoti_torch_delete_tensor_object"),
            get_data_ptr: resolve!(cpu, "aoti_torch_get_data_ptr"),
            get_dtype: resolve!(cpu, "aoti_torch_get_dtype"),
            get_dim: resolve!(cpu, "aoti_torch_get_dim"),
            get_sizes: resolve!(cpu, "aoti_torch_get_sizes"),
            get_device_type: resolve!(cpu, "aoti_torch_get_device_type"),
            get_device_index: resolve!(cpu, "aoti_torch_get_device_index"),
            is_contiguous: resolve!(cpu, "aoti_torch_is_contiguous"),
            is_defined: resolve!(cpu, "aoti_torch_is_defined"),
            empty_strided: resolve!(cpu, "aoti_torch_empty_strided"),
            copy_: resolve!(cpu, "aoti_torch_copy_"),
            current_cuda_stream,
            // SAFETY: argument-less getters of constants.
            device_cpu: unsafe { device_cpu() },
            device_cuda: unsafe { device_cuda() },
        })
    }
}

/// Turns a shim status into a Result naming the call.
pub(crate) fn check(status: Status, call: &str) -> Result<()> {
    if status == 0 {
        Ok(())
    } else {
        Err(Error::Torch(format!("shim call {call} failed (status {status}; torch logged the reason)")))
    }
}
