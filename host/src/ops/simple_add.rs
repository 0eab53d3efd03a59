//! `simple_add(a, b) = a + b` for f32, f16 and bf16 arrays of any shape.

use std::ffi::c_void;

use kernels_gpu::kernels::simple_add::{vector_width, SIMPLE_ADD_UNROLL};

use super::{aligned, elem, MAX_BUFFER_BYTES};
use crate::dtype::{DType, TensorRef};
use crate::error::Result;
use crate::runtime::{KernelArgs, KernelModule, LaunchConfig, Stream};
use crate::{ensure, invalid};

/// Environment variable choosing simple_add's vectors per thread: `1` (the default: blocks of
/// 128 threads, one 16-byte vector per operand each, as XLA's own elementwise kernels; 30
/// registers, sixteen blocks per multiprocessor) or `4` (blocks of 256 threads, four vectors per
/// operand in flight before the first store; 72 registers, three blocks). One vector per thread
/// was 1.5 % faster at 2^24 f32 on an H200 and equal from 2^26 up (benchmarks/NOTES.md "v12.7").
/// Read once per process.
pub const VECTORS_ENV_VAR: &str = "XGK_SIMPLE_ADD_VECTORS";

/// [`VECTORS_ENV_VAR`], read once (an invalid value is an error at every launch).
fn vectors_setting() -> Result<usize> {
    static VECTORS: std::sync::OnceLock<std::result::Result<usize, String>> = std::sync::OnceLock::new();
    VECTORS
        .get_or_init(|| match std::env::var(VECTORS_ENV_VAR) {
            Err(_) => Ok(1),
            Ok(v) if v.is_empty() => Ok(1),
            Ok(v) if v == "1" => Ok(1),
            Ok(v) if v == SIMPLE_ADD_UNROLL.to_string() => Ok(SIMPLE_ADD_UNROLL),
            Ok(v) => Err(format!("{VECTORS_ENV_VAR}={v:?}: expected 1 or {SIMPLE_ADD_UNROLL}")),
        })
        .clone()
        .map_err(crate::Error::invalid)
}

/// A validated simple_add: element type and count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimpleAdd {
    pub dtype: DType,
    pub len: usize,
}

impl SimpleAdd {
    /// Checks that `a`, `b` and `out` share a supported dtype and one shape.
    pub fn from_tensors(a: &TensorRef, b: &TensorRef, out: &TensorRef) -> Result<Self> {
        let dtype = Self::check_dtype(a.dtype)?;
        ensure!(b.dtype == dtype, "simple_add: dtype mismatch: a is {} but b is {}", a.dtype, b.dtype);
        ensure!(out.dtype == dtype, "simple_add: dtype mismatch: inputs are {} but the output is {}", dtype, out.dtype);
        ensure!(a.dims == b.dims, "simple_add: shape mismatch: a is {} but b is {}", a.describe(), b.describe());
        ensure!(
            a.dims == out.dims,
            "simple_add: shape mismatch: inputs are {} but the output is {}",
            a.describe(),
            out.describe()
        );
        let Some(len) = a.num_elements() else { invalid!("simple_add: invalid shape {}", a.describe()) };
        Self::new(dtype, len).map_err(|_| crate::Error::invalid(format!("simple_add: {} is too large", a.describe())))
    }

    /// The op on `len` elements of `dtype`: a supported dtype, and at most 2^62 bytes per buffer
    /// (so byte counts never overflow and host slices stay within `isize::MAX`).
    pub fn new(dtype: DType, len: usize) -> Result<Self> {
        let dtype = Self::check_dtype(dtype)?;
        let bytes = len.checked_mul(dtype.size_bytes().unwrap());
        ensure!(
            bytes.is_some_and(|b| b < MAX_BUFFER_BYTES),
            "simple_add: {len} elements of {dtype} is too large (at most 2^62 bytes per buffer)"
        );
        Ok(SimpleAdd { dtype, len })
    }

    /// Only float types with a kernel.
    pub fn check_dtype(dtype: DType) -> Result<DType> {
        match dtype {
            DType::F32 | DType::F16 | DType::BF16 => Ok(dtype),
            other => invalid!("simple_add: unsupported dtype {other}; supported: f32, f16, bf16"),
        }
    }

    /// The kernel and its block size for `vectors` 16-byte vectors per thread ([`VECTORS_ENV_VAR`]):
    /// one vector in blocks of 128 threads (`simple_add_<dtype>_x1`), or four in blocks of 256.
    fn kernel(self, vectors: usize) -> (&'static str, u32) {
        let one = vectors == 1;
        let name = match (self.dtype, one) {
            (DType::F32, true) => "simple_add_f32_x1",
            (DType::F16, true) => "simple_add_f16_x1",
            (_, true) => "simple_add_bf16_x1",
            (DType::F32, false) => "simple_add_f32",
            (DType::F16, false) => "simple_add_f16",
            (_, false) => "simple_add_bf16",
        };
        (name, if one { 128 } else { 256 })
    }

    /// Enqueues `out = a + b` on `stream`; on the legacy default stream (NULL), that of the
    /// device holding `out`.
    ///
    /// # Safety
    /// `a`, `b` and `out` must be device pointers valid for `self.len` elements of `self.dtype`
    /// in the context that owns `stream`.
    pub unsafe fn launch_cuda(
        self,
        kernels: &KernelModule,
        stream: Stream,
        a: *const c_void,
        b: *const c_void,
        out: *mut c_void,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.launch_cuda_in(kernels, stream, None, a, b, out) }
    }

    /// [`SimpleAdd::launch_cuda`] where the caller knows the device of the buffers: the legacy
    /// default stream (NULL, torch's default stream of every device) then means that device's
    /// ([`KernelModule::for_launch`]).
    ///
    /// # Safety
    /// As [`SimpleAdd::launch_cuda`], with the buffers on device `device`.
    pub unsafe fn launch_cuda_on_device(
        self,
        kernels: &KernelModule,
        stream: Stream,
        device: i32,
        a: *const c_void,
        b: *const c_void,
        out: *mut c_void,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.launch_cuda_in(kernels, stream, Some(device), a, b, out) }
    }

    /// # Safety
    /// As [`SimpleAdd::launch_cuda`].
    unsafe fn launch_cuda_in(
        self,
        kernels: &KernelModule,
        stream: Stream,
        device: Option<i32>,
        a: *const c_void,
        b: *const c_void,
        out: *mut c_void,
    ) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        let module = kernels.for_launch(stream, device, out as *const c_void)?;
        let elem = self.dtype.size_bytes().unwrap();
        let vector_ok = [a, b, out as *const c_void].iter().all(|&p| aligned(p, 16));
        let per_thread = if vector_ok { vector_width(elem) } else { 1 };
        let unroll = vectors_setting()?;
        let (kernel, threads) = self.kernel(unroll);
        // One pass: a block per span of `unroll` vectors per thread, the hardware streaming
        // blocks through the SMs as XLA's own elementwise kernels do (one wave of resident
        // blocks looping over the array read 2790 GB/s at 64 Mi f32 against XLA's 2975, and a
        // grid capped at 1-4 waves lost 1-9 %: benchmarks/NOTES.md "simple_add", "v12.6"); the
        // kernel's grid-stride loop covers what a grid of at most 2^31 - 1 blocks leaves.
        let per_block = threads as usize * if vector_ok { unroll } else { 1 };
        let blocks = self.len.div_ceil(per_thread).div_ceil(per_block).clamp(1, i32::MAX as usize) as u32;
        let mut args = KernelArgs::new();
        args.push(a).push(b).push(out).push(self.len as u64).push(vector_ok as u32);
        let cfg = LaunchConfig { grid: (blocks, 1, 1), block: (threads, 1, 1), shared_bytes: 0 };
        module.launch(stream, kernel, cfg, &mut args.pointers(), false)
    }

    /// CPU implementation: `out = a + b` over host byte buffers (the Host handler).
    pub fn run_cpu(self, a: &[u8], b: &[u8], out: &mut [u8]) -> Result<()> {
        let bytes = self.len * self.dtype.size_bytes().unwrap();
        ensure!(
            a.len() >= bytes && b.len() >= bytes && out.len() >= bytes,
            "simple_add: buffers smaller than {bytes} bytes"
        );
        for i in 0..self.len {
            let v = elem::load(self.dtype, a, i) + elem::load(self.dtype, b, i);
            elem::store(self.dtype, out, i, v);
        }
        Ok(())
    }
}
