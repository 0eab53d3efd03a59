//! Builders of synthetic call frames, for tests of the decoding without XLA. The `raw_*` builders
//! set every field a runtime could (any type and dtype codes, ranks, NULL dims, attribute kinds
//! and name bytes) for the `ffi_call_frame` fuzz target (`fuzz/`).

use super::*;

fn empty_args() -> Args {
    Args {
        struct_size: 40,
        extension_start: std::ptr::null_mut(),
        size: 0,
        types: std::ptr::null(),
        args: std::ptr::null(),
    }
}

/// An `XLA_FFI_Attrs` with no attributes.
fn empty_attrs() -> Attrs {
    Attrs {
        struct_size: 48,
        extension_start: std::ptr::null_mut(),
        size: 0,
        types: std::ptr::null(),
        names: std::ptr::null(),
        attrs: std::ptr::null(),
    }
}

/// A call frame for the execute stage with no arguments, results or attributes.
fn empty_frame(extension_start: *mut ExtensionBase, api: *const Api) -> CallFrame {
    CallFrame {
        struct_size: CALL_FRAME_STRUCT_SIZE,
        extension_start,
        api,
        ctx: std::ptr::null_mut(),
        stage: STAGE_EXECUTE,
        args: empty_args(),
        rets: empty_args(),
        attrs: empty_attrs(),
    }
}

/// Owns everything a synthetic call frame points to. Boxed elements: the frame holds pointers
/// to them, which must not move when the vectors grow.
#[allow(clippy::vec_box)]
pub struct FrameBuilder {
    buffers: Vec<Box<Buffer>>,
    dims: Vec<Box<[i64]>>,
    arg_ptrs: Vec<*mut c_void>,
    ret_ptrs: Vec<*mut c_void>,
    arg_types: Vec<i32>,
    ret_types: Vec<i32>,
    names: Vec<Box<ByteSpan>>,
    name_bytes: Vec<Box<[u8]>>,
    name_ptrs: Vec<*const ByteSpan>,
    attr_types: Vec<i32>,
    attr_ptrs: Vec<*mut c_void>,
    scalars: Vec<Box<Scalar>>,
    values: Vec<Box<[u8; 8]>>,
    /// Storage of the raw buffers and attributes of the `raw_*` builders.
    keep: Vec<Box<dyn std::any::Any>>,
    pub api: Box<Api>,
    pub frame: Box<CallFrame>,
    pub stage: i32,
}

/// A fake `Error_Create`: the error is a boxed (code, message) pair, read back by [`take_error`].
///
/// # Safety
/// `args` points at XLA's `ErrorCreateArgs`, whose `message` is a NUL-terminated string.
unsafe extern "C" fn fake_error_create(args: *mut ErrorCreateArgs) -> *mut FfiError {
    let msg = std::ffi::CStr::from_ptr((*args).message).to_string_lossy().into_owned();
    Box::into_raw(Box::new((((*args).errc), msg))) as *mut FfiError
}

/// A fake `Stream_Get`: the stream is whatever the frame's `ctx` holds (see
/// [`FrameBuilder::stream`]).
///
/// # Safety
/// `args` points at a writable `StreamGetArgs`.
unsafe extern "C" fn fake_stream_get(args: *mut StreamGetArgs) -> *mut FfiError {
    (*args).stream = (*args).ctx;
    std::ptr::null_mut()
}

/// Reads back an error made by the fake `Error_Create` (code, message).
///
/// # Safety
/// `err` must come from a handler called on a [`FrameBuilder`] frame.
pub unsafe fn take_error(err: *mut FfiError) -> Option<(i32, String)> {
    if err.is_null() {
        None
    } else {
        Some(*Box::from_raw(err as *mut (i32, String)))
    }
}

impl Default for FrameBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameBuilder {
    pub fn new() -> Self {
        let api = Box::new(Api {
            struct_size: 192,
            extension_start: std::ptr::null_mut(),
            api_version: ApiVersion {
                struct_size: 24,
                extension_start: std::ptr::null_mut(),
                major_version: 0,
                minor_version: 3,
            },
            internal_api: std::ptr::null(),
            error_create: Some(fake_error_create),
            error_get_message: std::ptr::null(),
            error_destroy: std::ptr::null(),
            handler_register: std::ptr::null(),
            stream_get: None,
        });
        let frame = Box::new(empty_frame(std::ptr::null_mut(), std::ptr::null()));
        FrameBuilder {
            buffers: vec![],
            dims: vec![],
            arg_ptrs: vec![],
            ret_ptrs: vec![],
            arg_types: vec![],
            ret_types: vec![],
            names: vec![],
            name_bytes: vec![],
            name_ptrs: vec![],
            attr_types: vec![],
            attr_ptrs: vec![],
            scalars: vec![],
            values: vec![],
            keep: vec![],
            api,
            frame,
            stage: STAGE_EXECUTE,
        }
    }

    fn buffer(&mut self, dtype: DType, dims: &[i64], data: *mut c_void) -> *mut c_void {
        let d: Box<[i64]> = dims.into();
        let mut b = Box::new(Buffer {
            struct_size: 48,
            extension_start: std::ptr::null_mut(),
            dtype: dtype.to_xla(),
            data,
            rank: dims.len() as i64,
            dims: d.as_ptr(),
        });
        let p = &mut *b as *mut Buffer as *mut c_void;
        self.dims.push(d);
        self.buffers.push(b);
        p
    }

    /// Hands handlers `stream` through `XLA_FFI_Stream_Get`, as XLA hands them its stream.
    pub fn stream(mut self, stream: *mut c_void) -> Self {
        self.api.stream_get = Some(fake_stream_get);
        self.frame.ctx = stream;
        self
    }

    pub fn arg(mut self, dtype: DType, dims: &[i64], data: *mut c_void) -> Self {
        let p = self.buffer(dtype, dims, data);
        self.arg_ptrs.push(p);
        self.arg_types.push(ARG_BUFFER);
        self
    }

    pub fn ret(mut self, dtype: DType, dims: &[i64], data: *mut c_void) -> Self {
        let p = self.buffer(dtype, dims, data);
        self.ret_ptrs.push(p);
        self.ret_types.push(ARG_BUFFER);
        self
    }

    /// An argument entry with every field chosen by the caller (fuzzing): its `XLA_FFI_ArgType`
    /// code, the `XLA_FFI_Buffer`'s `struct_size`, dtype code and `rank`, and `dims` (`None`:
    /// a NULL dims pointer; else the array the pointer points at, whatever `rank` says).
    pub fn raw_arg(mut self, kind: i32, buffer: RawBuffer<'_>) -> Self {
        let p = self.raw_buffer(buffer);
        self.arg_ptrs.push(p);
        self.arg_types.push(kind);
        self
    }

    /// A result entry, as [`FrameBuilder::raw_arg`].
    pub fn raw_ret(mut self, kind: i32, buffer: RawBuffer<'_>) -> Self {
        let p = self.raw_buffer(buffer);
        self.ret_ptrs.push(p);
        self.ret_types.push(kind);
        self
    }

    fn raw_buffer(&mut self, r: RawBuffer<'_>) -> *mut c_void {
        let d: Option<Box<[i64]>> = r.dims.map(Into::into);
        let mut b = Box::new(Buffer {
            struct_size: r.struct_size,
            extension_start: std::ptr::null_mut(),
            dtype: r.dtype_code,
            data: r.data,
            rank: r.rank,
            dims: d.as_ref().map_or(std::ptr::null(), |d| d.as_ptr()),
        });
        let p = &mut *b as *mut Buffer as *mut c_void;
        if let Some(d) = d {
            self.dims.push(d);
        }
        self.buffers.push(b);
        p
    }

    /// A scalar attribute of `dtype` holding the little-endian bytes of `value`.
    pub fn scalar(self, name: &str, dtype: DType, value: [u8; 8]) -> Self {
        self.raw_scalar(name.as_bytes(), dtype.to_xla(), value)
    }

    /// Appends an attribute entry: `name` (any bytes, UTF-8 or not), `kind` and value pointer.
    fn push_attr(&mut self, name: &[u8], kind: i32, ptr: *mut c_void) {
        let name: Box<[u8]> = name.into();
        let span = Box::new(ByteSpan { ptr: name.as_ptr(), len: name.len() });
        self.name_ptrs.push(&*span as *const ByteSpan);
        self.names.push(span);
        self.name_bytes.push(name);
        self.attr_types.push(kind);
        self.attr_ptrs.push(ptr);
    }

    /// A SCALAR attribute with any name bytes and any `XLA_FFI_DataType` code (fuzzing).
    pub fn raw_scalar(mut self, name: &[u8], dtype_code: i32, value: [u8; 8]) -> Self {
        let mut v = Box::new(value);
        let mut s = Box::new(Scalar { dtype: dtype_code, value: v.as_mut_ptr() as *mut c_void });
        self.push_attr(name, ATTR_SCALAR, &mut *s as *mut Scalar as *mut c_void);
        self.scalars.push(s);
        self.values.push(v);
        self
    }

    /// An ARRAY attribute (`XLA_FFI_Array`) of `data.len() / elem_bytes` elements.
    pub fn raw_array(mut self, name: &[u8], dtype_code: i32, elem_bytes: usize, data: &[u8]) -> Self {
        let mut bytes: Box<[u8]> = data.into();
        let size = data.len() / elem_bytes.max(1);
        let mut a = Box::new(Array { dtype: dtype_code, size, data: bytes.as_mut_ptr() as *mut c_void });
        self.push_attr(name, ATTR_ARRAY, &mut *a as *mut Array as *mut c_void);
        self.keep.push(Box::new(bytes));
        self.keep.push(a);
        self
    }

    /// A STRING attribute (an `XLA_FFI_ByteSpan` over `value`).
    pub fn raw_string(mut self, name: &[u8], value: &[u8]) -> Self {
        let bytes: Box<[u8]> = value.into();
        let mut span = Box::new(ByteSpan { ptr: bytes.as_ptr(), len: bytes.len() });
        self.push_attr(name, ATTR_STRING, &mut *span as *mut ByteSpan as *mut c_void);
        self.keep.push(Box::new(bytes));
        self.keep.push(span);
        self
    }

    /// An empty DICTIONARY attribute (a nested `XLA_FFI_Attrs` of size 0).
    pub fn raw_dictionary(mut self, name: &[u8]) -> Self {
        let mut d = Box::new(empty_attrs());
        self.push_attr(name, ATTR_DICTIONARY, &mut *d as *mut Attrs as *mut c_void);
        self.keep.push(d);
        self
    }

    /// An attribute of an arbitrary (unknown) kind code, pointing at 32 zero bytes.
    pub fn raw_kind(mut self, name: &[u8], kind: i32) -> Self {
        let mut z = Box::new([0u64; 4]);
        self.push_attr(name, kind, z.as_mut_ptr() as *mut c_void);
        self.keep.push(z);
        self
    }

    pub fn f64_attr(self, name: &str, v: f64) -> Self {
        self.scalar(name, DType::F64, v.to_le_bytes())
    }

    pub fn f32_attr(self, name: &str, v: f32) -> Self {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&v.to_le_bytes());
        self.scalar(name, DType::F32, b)
    }

    pub fn i64_attr(self, name: &str, v: i64) -> Self {
        self.scalar(name, DType::S64, v.to_le_bytes())
    }

    /// Finishes the frame; the pointer stays valid while `self` lives.
    pub fn frame(&mut self) -> *mut CallFrame {
        let f = &mut *self.frame;
        f.api = &*self.api;
        f.stage = self.stage;
        f.args.size = self.arg_ptrs.len() as i64;
        f.args.types = self.arg_types.as_ptr();
        f.args.args = self.arg_ptrs.as_ptr();
        f.rets.size = self.ret_ptrs.len() as i64;
        f.rets.types = self.ret_types.as_ptr();
        f.rets.args = self.ret_ptrs.as_ptr();
        f.attrs.size = self.attr_ptrs.len() as i64;
        f.attrs.types = self.attr_types.as_ptr();
        f.attrs.names = self.name_ptrs.as_ptr();
        f.attrs.attrs = self.attr_ptrs.as_ptr();
        f
    }
}

/// The fields of an `XLA_FFI_Buffer` for [`FrameBuilder::raw_arg`] / [`FrameBuilder::raw_ret`].
#[derive(Clone, Copy, Debug)]
pub struct RawBuffer<'d> {
    pub struct_size: usize,
    pub dtype_code: i32,
    pub data: *mut c_void,
    pub rank: i64,
    pub dims: Option<&'d [i64]>,
}

/// A metadata probe frame as XLA builds it at registration, and its metadata.
pub fn probe_frame(api: *const Api) -> (Box<CallFrame>, Box<MetadataExtension>, Box<Metadata>) {
    let mut md = Box::new(Metadata {
        struct_size: 36,
        api_version: ApiVersion {
            struct_size: 24,
            extension_start: std::ptr::null_mut(),
            major_version: 0,
            minor_version: 0,
        },
        traits: 0,
    });
    let mut ext = Box::new(MetadataExtension {
        extension_base: ExtensionBase {
            struct_size: 32,
            extension_type: EXTENSION_METADATA,
            next: std::ptr::null_mut(),
        },
        metadata: &mut *md,
    });
    let frame = Box::new(empty_frame(&mut ext.extension_base, api));
    (frame, ext, md)
}
