//! Raising a C++ exception from a boxed kernel, the only way a torch kernel reports an error: the
//! dispatcher lets it propagate to Python, where `std::invalid_argument` becomes `ValueError` and
//! `std::runtime_error` becomes `RuntimeError` (pybind11's translation, which torch keeps).
//!
//! No C++ is compiled here: the Itanium C++ ABI that a `throw std::invalid_argument(msg)`
//! compiles to is three calls into libstdc++ (already loaded: libtorch links it), resolved at
//! registration: `__cxa_allocate_exception`, the exception class's constructor from a C string,
//! and `__cxa_throw` with the class's `type_info` and destructor. The unwinder then crosses only
//! the kernel's own `extern "C-unwind"` frame, which holds nothing to drop.

use std::ffi::{c_char, c_void, CString};

use super::shim::{resolve, Dylib};
use crate::error::{Error, Result};

type Ctor = unsafe extern "C-unwind" fn(this: *mut c_void, what: *const c_char);
type Dtor = unsafe extern "C" fn(this: *mut c_void);

/// One exception class: its constructor from `const char*`, destructor and `type_info`.
struct ExceptionClass {
    ctor: Ctor,
    dtor: Dtor,
    type_info: *const c_void,
}

/// The libstdc++ entry points of a throw, plus `operator delete` (the kernels free the heap slots
/// torch allocates with `new` for optional arguments).
pub(crate) struct CxxRuntime {
    allocate_exception: unsafe extern "C" fn(size: usize) -> *mut c_void,
    throw: unsafe extern "C-unwind" fn(object: *mut c_void, type_info: *const c_void, dtor: Dtor) -> !,
    invalid_argument: ExceptionClass,
    runtime_error: ExceptionClass,
    pub operator_delete: unsafe extern "C" fn(*mut c_void),
}

// SAFETY: function pointers and `type_info` addresses of a loaded library: immutable, global.
unsafe impl Send for CxxRuntime {}
unsafe impl Sync for CxxRuntime {}

/// Bytes allocated for an exception object: `std::invalid_argument` and `std::runtime_error` are
/// 16 bytes in libstdc++ (vtable pointer + reference-counted string); room to spare costs nothing.
const EXCEPTION_OBJECT_BYTES: usize = 64;

impl CxxRuntime {
    /// Resolves the entry points from libstdc++ (`libstdc++.so.6`, the one libtorch loaded).
    pub(crate) fn load() -> Result<Self> {
        let lib = Dylib::open("libstdc++.so.6")?;
        Ok(CxxRuntime {
            allocate_exception: resolve!(lib, "__cxa_allocate_exception"),
            throw: resolve!(lib, "__cxa_throw"),
            invalid_argument: ExceptionClass {
                ctor: resolve!(lib, "_ZNSt16invalid_argumentC1EPKc"),
                dtor: resolve!(lib, "_ZNSt16invalid_argumentD1Ev"),
                type_info: lib.symbol("_ZTISt16invalid_argument")?,
            },
            runtime_error: ExceptionClass {
                ctor: resolve!(lib, "_ZNSt13runtime_errorC1EPKc"),
                dtor: resolve!(lib, "_ZNSt13runtime_errorD1Ev"),
                type_info: lib.symbol("_ZTISt13runtime_error")?,
            },
            operator_delete: resolve!(lib, "_ZdlPv"),
        })
    }

    /// Throws `err` as `std::invalid_argument` (an invalid input: Python's `ValueError`) or
    /// `std::runtime_error` (anything else: `RuntimeError`), with the error's message.
    ///
    /// # Safety
    /// Only from a function whose ABI is `extern "C-unwind"`, called by C++ that expects
    /// exceptions (torch's boxed-kernel wrapper), with no Rust value needing a drop between here
    /// and that C++ frame.
    pub(crate) unsafe fn throw(&self, err: Error) -> ! {
        let class = if matches!(err, Error::InvalidArgument(_)) { &self.invalid_argument } else { &self.runtime_error };
        let what = CString::new(err.to_string().replace('\0', " ")).unwrap_or_default();
        drop(err);
        let object = (self.allocate_exception)(EXCEPTION_OBJECT_BYTES); // C++ terminate when out of memory
        (class.ctor)(object, what.as_ptr()); // copies the message
        drop(what); // nothing of ours is left to drop once the throw starts
        (self.throw)(object, class.type_info, class.dtor)
    }
}
