//! The XLA FFI C ABI (typed custom calls, HLO `api_version` 4), written by hand from
//! `xla/ffi/api/c_api.h`: no crate provides the handler side, and no XLA symbol is needed at link
//! time (everything goes through `call_frame->api`). Layouts are x86-64 and stable from jax 0.5 to
//! 0.11.2; see `shared/reference/xla-ffi-abi.md` §2.
//!
//! Compatibility rules followed here: report API version 0.1 in the metadata probe (accepted by
//! every runtime since jax 0.5 and torch_xla 2.8), accept `struct_size >=` the 0.1 sizes, fill
//! argument structs with 0.1 STRUCT_SIZE values, use only `Error_Create` and `Stream_Get`.

use std::ffi::{c_char, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::dtype::{DType, TensorRef};
use crate::error::{Error, Result};

pub mod testing;

/// `XLA_FFI_Api_Version`.
#[repr(C)]
pub struct ApiVersion {
    pub struct_size: usize,
    pub extension_start: *mut c_void,
    pub major_version: i32,
    pub minor_version: i32,
}

/// `XLA_FFI_Extension_Base` / `XLA_FFI_InternalExtension`.
#[repr(C)]
pub struct ExtensionBase {
    pub struct_size: usize,
    pub extension_type: i32,
    pub next: *mut ExtensionBase,
}

/// `XLA_FFI_Extension_Metadata`.
pub const EXTENSION_METADATA: i32 = 1;

/// `XLA_FFI_Metadata` up to `traits` (never write `state_type_id`: older runtimes lack it).
#[repr(C)]
pub struct Metadata {
    pub struct_size: usize,
    pub api_version: ApiVersion,
    pub traits: u32,
}

/// `XLA_FFI_Metadata_Extension`.
#[repr(C)]
pub struct MetadataExtension {
    pub extension_base: ExtensionBase,
    pub metadata: *mut Metadata,
}

/// `XLA_FFI_Buffer`.
#[repr(C)]
pub struct Buffer {
    pub struct_size: usize,
    pub extension_start: *mut c_void,
    pub dtype: i32,
    pub data: *mut c_void,
    pub rank: i64,
    pub dims: *const i64,
}

/// `XLA_FFI_Args` and `XLA_FFI_Rets` (same layout).
#[repr(C)]
pub struct Args {
    pub struct_size: usize,
    pub extension_start: *mut c_void,
    pub size: i64,
    pub types: *const i32,
    pub args: *const *mut c_void,
}

/// `XLA_FFI_Attrs` (sorted by name).
#[repr(C)]
pub struct Attrs {
    pub struct_size: usize,
    pub extension_start: *mut c_void,
    pub size: i64,
    pub types: *const i32,
    pub names: *const *const ByteSpan,
    pub attrs: *const *mut c_void,
}

/// `XLA_FFI_ByteSpan` (not NUL-terminated).
#[repr(C)]
pub struct ByteSpan {
    pub ptr: *const u8,
    pub len: usize,
}

/// `XLA_FFI_Scalar`.
#[repr(C)]
pub struct Scalar {
    pub dtype: i32,
    pub value: *mut c_void,
}

/// `XLA_FFI_Array` (dense, flattened; `size` elements of `dtype`).
#[repr(C)]
pub struct Array {
    pub dtype: i32,
    pub size: usize,
    pub data: *mut c_void,
}

/// `XLA_FFI_CallFrame` (STRUCT_SIZE 168: `future` lies beyond it).
#[repr(C)]
pub struct CallFrame {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub api: *const Api,
    pub ctx: *mut c_void,
    pub stage: i32,
    pub args: Args,
    pub rets: Args,
    pub attrs: Attrs,
}

/// `XLA_FFI_CallFrame_STRUCT_SIZE`.
pub const CALL_FRAME_STRUCT_SIZE: usize = 168;
/// `XLA_FFI_ExecutionStage_EXECUTE` (since 2024-07).
pub const STAGE_EXECUTE: i32 = 3;
/// `XLA_FFI_ArgType_BUFFER` / `XLA_FFI_RetType_BUFFER`.
pub const ARG_BUFFER: i32 = 1;
/// `XLA_FFI_AttrType_*`.
pub const ATTR_ARRAY: i32 = 1;
pub const ATTR_DICTIONARY: i32 = 2;
pub const ATTR_SCALAR: i32 = 3;
pub const ATTR_STRING: i32 = 4;

/// Opaque `XLA_FFI_Error`.
#[repr(C)]
pub struct FfiError {
    _private: [u8; 0],
}

/// `XLA_FFI_Error_Create_Args` (STRUCT_SIZE 28).
#[repr(C)]
pub struct ErrorCreateArgs {
    pub struct_size: usize,
    pub extension_start: *mut c_void,
    pub message: *const c_char,
    pub errc: i32,
}

/// `XLA_FFI_Stream_Get_Args` (STRUCT_SIZE 32).
#[repr(C)]
pub struct StreamGetArgs {
    pub struct_size: usize,
    pub extension_start: *mut c_void,
    pub ctx: *mut c_void,
    pub stream: *mut c_void,
}

type ErrorCreateFn = unsafe extern "C" fn(*mut ErrorCreateArgs) -> *mut FfiError;
type StreamGetFn = unsafe extern "C" fn(*mut StreamGetArgs) -> *mut FfiError;

/// The head of `XLA_FFI_Api`, up to `XLA_FFI_Stream_Get` (offset 80): all this crate calls.
#[repr(C)]
pub struct Api {
    pub struct_size: usize,
    pub extension_start: *mut c_void,
    pub api_version: ApiVersion,
    pub internal_api: *const c_void,
    pub error_create: Option<ErrorCreateFn>,
    pub error_get_message: *const c_void,
    pub error_destroy: *const c_void,
    pub handler_register: *const c_void,
    pub stream_get: Option<StreamGetFn>,
}

/// `XLA_FFI_Error_Code` values used here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum ErrorCode {
    InvalidArgument = 3,
    FailedPrecondition = 9,
    Unimplemented = 12,
    Internal = 13,
}

impl From<&Error> for ErrorCode {
    fn from(e: &Error) -> Self {
        match e {
            Error::InvalidArgument(_) => ErrorCode::InvalidArgument,
            Error::NoDriver | Error::Driver(_) | Error::Torch(_) => ErrorCode::FailedPrecondition,
            Error::Cuda { .. } | Error::Panic(_) => ErrorCode::Internal,
        }
    }
}

/// Smallest `XLA_FFI_Api.struct_size` that holds `Error_Create` and `Stream_Get` (jax 0.5 reports 88).
const API_MIN_SIZE: usize = 88;

/// A decoded call frame for the execute stage.
pub struct Call<'a> {
    frame: &'a CallFrame,
}

impl<'a> Call<'a> {
    /// Number of buffer arguments.
    pub fn num_args(&self) -> usize {
        self.frame.args.size.max(0) as usize
    }

    /// Number of buffer results.
    pub fn num_rets(&self) -> usize {
        self.frame.rets.size.max(0) as usize
    }

    /// Argument `i` as a tensor.
    pub fn arg(&self, i: usize) -> Result<TensorRef<'a>> {
        // SAFETY: XLA guarantees `args` holds `size` valid entries for the call's duration.
        unsafe { buffer_at(&self.frame.args, i, "argument") }
    }

    /// Result `i` as a tensor.
    pub fn ret(&self, i: usize) -> Result<TensorRef<'a>> {
        // SAFETY: as for `arg`.
        unsafe { buffer_at(&self.frame.rets, i, "result") }
    }

    /// Checks the number of arguments and results.
    pub fn expect_arity(&self, op: &str, args: usize, rets: usize) -> Result<()> {
        if self.num_args() != args || self.num_rets() != rets {
            return Err(Error::invalid(format!(
                "{op}: expected {args} operands and {rets} result(s), got {} and {}",
                self.num_args(),
                self.num_rets()
            )));
        }
        Ok(())
    }

    /// Names of all attributes as XLA passes them (bytes, no copies): the per-call lookups
    /// compare bytes, with no allocation or UTF-8 check.
    fn attribute_name_bytes(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let attrs: &'a Attrs = &self.frame.attrs;
        // SAFETY: XLA provides `size` name spans, valid for the call's duration.
        (0..attrs.size.max(0) as usize).map(move |i| unsafe { span_bytes(&**attrs.names.add(i)) })
    }

    fn find_attr(&self, name: &str) -> Option<(i32, *mut c_void)> {
        let attrs = &self.frame.attrs;
        let i = self.attribute_name_bytes().position(|n| n == name.as_bytes())?;
        // SAFETY: XLA provides `size` types and values; `i` is below it.
        unsafe { Some((*attrs.types.add(i), *attrs.attrs.add(i))) }
    }

    fn scalar(&self, name: &str) -> Result<Option<(DType, *mut c_void)>> {
        match self.find_attr(name) {
            None => Ok(None),
            Some((ATTR_SCALAR, ptr)) => {
                // SAFETY: a SCALAR attribute points at an XLA_FFI_Scalar.
                let s = unsafe { &*(ptr as *const Scalar) };
                Ok(Some((DType::from_xla(s.dtype), s.value)))
            }
            Some((kind, _)) => Err(Error::invalid(format!(
                "attribute '{name}' must be a scalar, got attribute kind {}",
                match kind {
                    ATTR_ARRAY => "array",
                    ATTR_DICTIONARY => "dictionary",
                    ATTR_STRING => "string",
                    _ => "unknown",
                }
            ))),
        }
    }

    /// A float attribute: F32 or F64 (JAX sends Python floats as F64), or any integer.
    pub fn attr_f32(&self, name: &str) -> Result<Option<f32>> {
        let Some((dtype, v)) = self.scalar(name)? else { return Ok(None) };
        // SAFETY: `v` points at a value of `dtype`.
        let value = unsafe {
            match dtype {
                DType::F32 => (v as *const f32).read_unaligned(),
                DType::F64 => (v as *const f64).read_unaligned() as f32,
                _ => read_int(dtype, v).map(|i| i as f32).ok_or_else(|| {
                    Error::invalid(format!("attribute '{name}' must be a float (f32 or f64), got {dtype}"))
                })?,
            }
        };
        Ok(Some(value))
    }

    /// An integer attribute of any width or signedness (JAX sends Python ints as S64).
    pub fn attr_i64(&self, name: &str) -> Result<Option<i64>> {
        let Some((dtype, v)) = self.scalar(name)? else { return Ok(None) };
        // SAFETY: `v` points at a value of `dtype`.
        let value = unsafe { read_int(dtype, v) }
            .ok_or_else(|| Error::invalid(format!("attribute '{name}' must be an integer, got {dtype}")))?;
        Ok(Some(value))
    }

    /// Rejects attributes outside `known` (catches typos such as `sm_scal`).
    pub fn only_attributes(&self, op: &str, known: &[&str]) -> Result<()> {
        for name in self.attribute_name_bytes() {
            if !known.iter().any(|k| k.as_bytes() == name) {
                let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
                let name = String::from_utf8_lossy(name);
                return Err(Error::invalid(format!("{op}: unknown attribute '{name}'; known: {known}")));
            }
        }
        Ok(())
    }

    /// The CUDA stream XLA runs this call on.
    pub fn stream(&self) -> Result<*mut c_void> {
        let api = self.api()?;
        let get = api.stream_get.ok_or_else(|| Error::invalid("XLA_FFI_Stream_Get is missing"))?;
        let mut args = StreamGetArgs {
            struct_size: 32,
            extension_start: std::ptr::null_mut(),
            ctx: self.frame.ctx,
            stream: std::ptr::null_mut(),
        };
        // SAFETY: valid args struct for the runtime's Stream_Get.
        let err = unsafe { get(&mut args) };
        if !err.is_null() {
            return Err(Error::invalid("XLA_FFI_Stream_Get failed: no GPU stream for this call"));
        }
        Ok(args.stream)
    }

    fn api(&self) -> Result<&Api> {
        if self.frame.api.is_null() {
            return Err(Error::invalid("XLA FFI call frame has no API table"));
        }
        // SAFETY: non-null API table provided by XLA for the call's duration.
        Ok(unsafe { &*self.frame.api })
    }
}

/// An integer attribute's value as i64 (None for a non-integer dtype or a u64 past i64's range).
///
/// # Safety
/// `v` must point at one readable value of `dtype` (any alignment).
unsafe fn read_int(dtype: DType, v: *mut c_void) -> Option<i64> {
    Some(match dtype {
        DType::Pred => *(v as *const u8) as i64,
        DType::S8 => *(v as *const i8) as i64,
        DType::S16 => (v as *const i16).read_unaligned() as i64,
        DType::S32 => (v as *const i32).read_unaligned() as i64,
        DType::S64 => (v as *const i64).read_unaligned(),
        DType::U8 => *(v as *const u8) as i64,
        DType::U16 => (v as *const u16).read_unaligned() as i64,
        DType::U32 => (v as *const u32).read_unaligned() as i64,
        DType::U64 => i64::try_from((v as *const u64).read_unaligned()).ok()?,
        _ => return None,
    })
}

/// The bytes of an XLA byte span (empty for a NULL one).
///
/// # Safety
/// A non-null `span.ptr` must point at `span.len` bytes that stay valid for `'a`.
unsafe fn span_bytes<'a>(span: &ByteSpan) -> &'a [u8] {
    if span.ptr.is_null() {
        return &[];
    }
    std::slice::from_raw_parts(span.ptr, span.len)
}

/// Argument or result `i` of `list` as a buffer (`what` names the list in errors): an error when
/// it is missing, not a buffer, or its struct or rank is malformed.
///
/// # Safety
/// `list` must be XLA's list for the call: `types` and `args` with `size` entries each, every
/// buffer entry an `XLA_FFI_Buffer` whose `dims` (rank > 0) stay valid for `'a`.
unsafe fn buffer_at<'a>(list: &Args, i: usize, what: &str) -> Result<TensorRef<'a>> {
    if i >= list.size.max(0) as usize {
        return Err(Error::invalid(format!("missing {what} {i}")));
    }
    if *list.types.add(i) != ARG_BUFFER {
        return Err(Error::invalid(format!("{what} {i} is not a buffer")));
    }
    let b = &*(*list.args.add(i) as *const Buffer);
    if b.struct_size < 48 {
        return Err(Error::invalid(format!("{what} {i}: unexpected XLA_FFI_Buffer size {}", b.struct_size)));
    }
    let dims = if b.rank == 0 {
        &[][..]
    } else if b.rank < 0 {
        return Err(Error::invalid(format!("{what} {i}: negative rank {}", b.rank)));
    } else if b.dims.is_null() {
        return Err(Error::invalid(format!("{what} {i}: rank {} with NULL dims", b.rank)));
    } else {
        std::slice::from_raw_parts(b.dims, b.rank as usize)
    };
    Ok(TensorRef { data: b.data, dtype: DType::from_xla(b.dtype), dims })
}

/// Creates an `XLA_FFI_Error` (NULL when the runtime gives us no way to).
///
/// # Safety
/// `api` must be null or XLA's API table.
pub unsafe fn create_error(api: *const Api, code: ErrorCode, message: &str) -> *mut FfiError {
    if api.is_null() || (*api).struct_size < API_MIN_SIZE {
        eprintln!("xla-gpu-kernels: {message}");
        return std::ptr::null_mut();
    }
    let Some(create) = (*api).error_create else { return std::ptr::null_mut() };
    let msg = CString::new(message.replace('\0', " ")).unwrap();
    let mut args = ErrorCreateArgs {
        struct_size: 28,
        extension_start: std::ptr::null_mut(),
        message: msg.as_ptr(),
        errc: code as i32,
    };
    create(&mut args)
}

/// `XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE`: XLA may record the call into a command
/// buffer (a CUDA graph), running it by stream capture once and replaying the recorded launches.
pub const TRAIT_COMMAND_BUFFER_COMPATIBLE: u32 = 1;

/// [`handle_with_traits`] with no traits.
///
/// # Safety
/// As [`handle_with_traits`].
pub unsafe fn handle(frame: *mut CallFrame, body: impl FnOnce(&Call) -> Result<()>) -> *mut FfiError {
    handle_with_traits(frame, 0, body)
}

/// The body of every exported FFI handler: answers the metadata probe with `traits`, ignores
/// stages other than execute, runs `body` with panics caught, and turns errors into
/// `XLA_FFI_Error`s. Declare [`TRAIT_COMMAND_BUFFER_COMPATIBLE`] only for a body that is safe to
/// capture: it enqueues the same work for the same static shapes, never syncs or reads device data
/// on the host, and allocates nothing.
///
/// # Safety
/// `frame` must be null or a call frame from XLA, valid for the duration of the call.
pub unsafe fn handle_with_traits(
    frame: *mut CallFrame,
    traits: u32,
    body: impl FnOnce(&Call) -> Result<()>,
) -> *mut FfiError {
    if frame.is_null() {
        return std::ptr::null_mut();
    }
    // The probe comes first, before anything else is read: `api` may be NULL and `ctx` is NULL.
    let ext = (*frame).extension_start;
    if !ext.is_null() && (*ext).extension_type == EXTENSION_METADATA {
        let md = (*(ext as *mut MetadataExtension)).metadata;
        if !md.is_null() {
            (*md).api_version.struct_size = std::mem::size_of::<ApiVersion>();
            (*md).api_version.extension_start = std::ptr::null_mut();
            (*md).api_version.major_version = 0;
            (*md).api_version.minor_version = 1;
            (*md).traits = traits;
        }
        return std::ptr::null_mut();
    }
    let f = &*frame;
    if f.struct_size < CALL_FRAME_STRUCT_SIZE {
        return create_error(
            f.api,
            ErrorCode::Internal,
            &format!("unsupported XLA_FFI_CallFrame size {}", f.struct_size),
        );
    }
    if f.stage != STAGE_EXECUTE {
        return std::ptr::null_mut();
    }
    let call = Call { frame: f };
    let outcome = catch_unwind(AssertUnwindSafe(|| body(&call)))
        .unwrap_or_else(|panic| Err(Error::Panic(panic_message(&*panic))));
    match outcome {
        Ok(()) => std::ptr::null_mut(),
        Err(e) => create_error(f.api, ErrorCode::from(&e), &e.to_string()),
    }
}

/// Text of a caught panic payload.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_c_api_h() {
        assert_eq!(size_of::<ApiVersion>(), 24);
        assert_eq!(offset_of!(Metadata, traits), 32);
        assert_eq!(offset_of!(MetadataExtension, metadata), 24);
        assert_eq!(size_of::<Buffer>(), 48);
        assert_eq!(size_of::<Array>(), 24);
        assert_eq!(offset_of!(Array, data), 16);
        assert_eq!(size_of::<Args>(), 40);
        assert_eq!(size_of::<Attrs>(), 48);
        assert_eq!(offset_of!(CallFrame, args), 40);
        assert_eq!(offset_of!(CallFrame, rets), 80);
        assert_eq!(offset_of!(CallFrame, attrs), 120);
        assert_eq!(size_of::<CallFrame>(), CALL_FRAME_STRUCT_SIZE);
        assert_eq!(offset_of!(Api, error_create), 48);
        assert_eq!(offset_of!(Api, stream_get), 80);
        assert_eq!(offset_of!(ErrorCreateArgs, errc), 24);
        assert_eq!(offset_of!(StreamGetArgs, stream), 24);
    }
}
