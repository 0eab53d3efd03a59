//! The boxed kernels of `torch.ops.xla_gpu.*`, one per op, registered for CPU and CUDA.
//!
//! torch's wrapper (`StableIValueBoxedKernel`) hands each kernel the op's arguments as a stack
//! of [`StableIValue`]s it owns: a new tensor handle per tensor, the bits of a `double`, an
//! `int64_t`, and for `T?` NULL or a heap slot allocated with C++ `new`. The kernel takes all of
//! them over first (so nothing leaks on an error), then validates, allocates its output (and the
//! split-KV workspace) through torch's allocator, launches on torch's current stream of the
//! tensors' device, and leaves the output handle in slot 0. Errors are thrown as C++ exceptions.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::shim::{check, StableIValue, TensorHandle};
use super::TorchRuntime;
use crate::dtype::{DType, TensorRef};
use crate::error::{Error, Result};
use crate::ops::paged_attention::{self, Attributes, DeviceBuffers, PagedAttention, Workspace};
use crate::ops::simple_add::SimpleAdd;
use crate::xla::handlers::{run_paged_attention_cpu, run_simple_add_cpu};

/// `xla_gpu::simple_add(Tensor a, Tensor b) -> Tensor`.
///
/// # Safety
/// Called by torch's boxed-kernel wrapper with the op's schema.
pub(super) unsafe extern "C-unwind" fn simple_add(stack: *mut StableIValue, num_args: u64, num_outputs: u64) {
    run_boxed(|rt| rt.simple_add(stack, num_args, num_outputs))
}

/// `xla_gpu::paged_attention(Tensor q, Tensor kv_pages, Tensor kv_lens, Tensor page_indices,
/// Tensor cu_q_lens, Tensor num_seqs, float sm_scale, int? sliding_window, float? soft_cap,
/// float? mask_value, float? k_scale, float? v_scale) -> Tensor`.
///
/// # Safety
/// Called by torch's boxed-kernel wrapper with the op's schema.
pub(super) unsafe extern "C-unwind" fn paged_attention(stack: *mut StableIValue, num_args: u64, num_outputs: u64) {
    run_boxed(|rt| rt.paged_attention(stack, num_args, num_outputs))
}

/// Runs a kernel body, turning its error or panic into a C++ exception.
fn run_boxed(body: impl FnOnce(&'static TorchRuntime) -> Result<()>) {
    let rt = TorchRuntime::get();
    let err = match catch_unwind(AssertUnwindSafe(|| body(rt))) {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(panic) => Error::Panic(crate::xla::ffi::panic_message(&*panic)),
    };
    // SAFETY: called from the `extern "C-unwind"` kernels above, by torch's C++ wrapper; no
    // value in this frame needs a drop.
    unsafe { rt.cxx.throw(err) }
}

/// A tensor handle this kernel owns (deleted on drop).
struct OwnedTensor<'r> {
    handle: TensorHandle,
    rt: &'r TorchRuntime,
}

impl Drop for OwnedTensor<'_> {
    fn drop(&mut self) {
        // SAFETY: an owned, live handle. A failure cannot be reported from a drop (torch logs it).
        unsafe { (self.rt.shim.delete_tensor_object)(self.handle) };
    }
}

/// Where a call runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Device {
    Cpu,
    Cuda(i32),
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl<'r> OwnedTensor<'r> {
    fn get<T: Default>(&self, f: unsafe extern "C" fn(TensorHandle, *mut T) -> i32, call: &str) -> Result<T> {
        let mut v = T::default();
        // SAFETY: a live handle and an out pointer of the getter's type.
        check(unsafe { f(self.handle, &mut v) }, call)?;
        Ok(v)
    }

    fn device(&self, op: &str, name: &str) -> Result<Device> {
        let kind = self.get(self.rt.shim.get_device_type, "aoti_torch_get_device_type")?;
        let index = self.get(self.rt.shim.get_device_index, "aoti_torch_get_device_index")?;
        if kind == self.rt.shim.device_cpu {
            Ok(Device::Cpu)
        } else if kind == self.rt.shim.device_cuda {
            Ok(Device::Cuda(index))
        } else {
            Err(Error::invalid(format!("{op}: {name} is on an unsupported device (torch device type {kind})")))
        }
    }

    fn sizes(&self) -> Result<&[i64]> {
        let dim = self.get(self.rt.shim.get_dim, "aoti_torch_get_dim")?;
        if dim == 0 {
            return Ok(&[]);
        }
        let mut sizes: *const i64 = std::ptr::null();
        // SAFETY: a live handle; the sizes array lives as long as the tensor (borrowed from self).
        check(unsafe { (self.rt.shim.get_sizes)(self.handle, &mut sizes) }, "aoti_torch_get_sizes")?;
        // SAFETY: `dim` sizes at `sizes`, owned by the tensor this borrow keeps alive.
        Ok(unsafe { std::slice::from_raw_parts(sizes, dim as usize) })
    }

    fn scalar_type(&self) -> Result<i32> {
        self.get(self.rt.shim.get_dtype, "aoti_torch_get_dtype")
    }

    /// The tensor as the ops' validation sees it (data pointer, dtype, dims).
    fn view(&self, op: &str, name: &str) -> Result<TensorRef<'_>> {
        let scalar_type = self.scalar_type()?;
        let dtype = self.rt.dtype(scalar_type).ok_or_else(|| {
            Error::invalid(format!("{op}: unsupported dtype {} ({name})", self.rt.other_dtype_name(scalar_type)))
        })?;
        let mut data: *mut c_void = std::ptr::null_mut();
        // SAFETY: a live handle and an out pointer.
        check(unsafe { (self.rt.shim.get_data_ptr)(self.handle, &mut data) }, "aoti_torch_get_data_ptr")?;
        Ok(TensorRef { data, dtype, dims: self.sizes()? })
    }

    /// This tensor if contiguous, else a contiguous copy (as `Tensor.contiguous()`).
    fn contiguous(self) -> Result<Self> {
        if self.get(self.rt.shim.is_contiguous, "aoti_torch_is_contiguous")? {
            return Ok(self);
        }
        let device = self.device("contiguous", "tensor")?;
        let copy = self.rt.empty(self.sizes()?, self.scalar_type()?, device)?;
        // SAFETY: two live handles of equal shape and dtype.
        check(unsafe { (self.rt.shim.copy_)(copy.handle, self.handle, 0) }, "aoti_torch_copy_")?;
        Ok(copy)
    }

    /// Gives the handle to torch (the boxed wrapper takes ownership of outputs).
    fn into_raw(self) -> TensorHandle {
        let handle = self.handle;
        std::mem::forget(self);
        handle
    }
}

impl TorchRuntime {
    /// A new contiguous tensor from torch's allocator (the caching allocator on CUDA, the
    /// CUDA graph's pool under capture).
    fn empty(&self, sizes: &[i64], scalar_type: i32, device: Device) -> Result<OwnedTensor<'_>> {
        let mut strides = vec![1i64; sizes.len()];
        for i in (0..sizes.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * sizes[i + 1].max(1);
        }
        let (device_type, index) = match device {
            Device::Cpu => (self.shim.device_cpu, 0),
            Device::Cuda(i) => (self.shim.device_cuda, i),
        };
        let mut handle: TensorHandle = std::ptr::null_mut();
        // SAFETY: `sizes.len()` sizes and strides; an out pointer.
        check(
            unsafe {
                (self.shim.empty_strided)(
                    sizes.len() as i64,
                    sizes.as_ptr(),
                    strides.as_ptr(),
                    scalar_type,
                    device_type,
                    index,
                    &mut handle,
                )
            },
            "aoti_torch_empty_strided",
        )?;
        Ok(OwnedTensor { handle, rt: self })
    }

    /// torch's current stream of CUDA device `index` (the capture stream under graph capture).
    fn current_stream(&self, index: i32) -> Result<*mut c_void> {
        let get = self.shim.current_cuda_stream.ok_or_else(|| Error::Torch("this torch has no CUDA".into()))?;
        let mut stream = std::ptr::null_mut();
        // SAFETY: an out pointer.
        check(unsafe { get(index, &mut stream) }, "aoti_torch_get_current_cuda_stream")?;
        Ok(stream)
    }

    /// Takes over the first `N` slots of the stack as tensors.
    ///
    /// # Safety
    /// The slots hold owned tensor handles, not taken before.
    unsafe fn take_tensors<const N: usize>(&self, stack: *mut StableIValue) -> [OwnedTensor<'_>; N] {
        std::array::from_fn(|i| OwnedTensor { handle: *stack.add(i) as TensorHandle, rt: self })
    }

    /// Takes over a `T?` slot: NULL or a heap `StableIValue` (freed here) holding the value bits.
    ///
    /// # Safety
    /// The slot holds an optional's encoding, not taken before.
    unsafe fn take_optional(&self, slot: StableIValue) -> Option<u64> {
        let p = slot as *mut StableIValue;
        if p.is_null() {
            return None;
        }
        let bits = *p;
        (self.cxx.operator_delete)(p as *mut c_void);
        Some(bits)
    }

    /// The one device of all `tensors` (named), or a ValueError naming each tensor's device. A
    /// `None` passed for a tensor reaches a kernel as an undefined tensor: a ValueError too.
    fn common_device(&self, op: &str, tensors: &[(&str, &OwnedTensor)]) -> Result<Device> {
        for (name, t) in tensors {
            if !t.get(self.shim.is_defined, "aoti_torch_is_defined")? {
                return Err(Error::invalid(format!("{op}: {name} must be a tensor, got None")));
            }
        }
        let devices = tensors.iter().map(|(name, t)| t.device(op, name)).collect::<Result<Vec<_>>>()?;
        if devices.iter().any(|d| *d != devices[0]) {
            let listed: Vec<String> =
                tensors.iter().zip(&devices).map(|((name, _), d)| format!("{name} on {d}")).collect();
            return Err(Error::invalid(format!("{op}: all tensors must be on one device, got {}", listed.join(", "))));
        }
        Ok(devices[0])
    }

    fn expect_arity(op: &str, num_args: u64, num_outputs: u64, args: u64) -> Result<()> {
        if num_args != args || num_outputs != 1 {
            return Err(Error::Torch(format!(
                "xla_gpu::{op} called with {num_args} arguments and {num_outputs} outputs; its schema has {args} and 1"
            )));
        }
        Ok(())
    }

    /// # Safety
    /// `stack` as torch passes it for `xla_gpu::simple_add`.
    unsafe fn simple_add(&self, stack: *mut StableIValue, num_args: u64, num_outputs: u64) -> Result<()> {
        Self::expect_arity("simple_add", num_args, num_outputs, 2)?;
        let [a, b] = self.take_tensors::<2>(stack);
        let device = self.common_device("simple_add", &[("a", &a), ("b", &b)])?;
        let (a, b) = (a.contiguous()?, b.contiguous()?);
        let out = self.empty(a.sizes()?, a.scalar_type()?, device)?;
        let op = "simple_add";
        let (va, vb, vout) = (a.view(op, "a")?, b.view(op, "b")?, out.view(op, "out")?);
        let spec = SimpleAdd::from_tensors(&va, &vb, &vout)?;
        match device {
            Device::Cuda(index) => spec.launch_cuda_on_device(
                self.kernels,
                self.current_stream(index)? as _,
                index,
                va.data,
                vb.data,
                vout.data,
            )?,
            Device::Cpu => run_simple_add_cpu(spec, va.data, vb.data, vout.data)?,
        }
        *stack = out.into_raw() as StableIValue;
        Ok(())
    }

    /// # Safety
    /// `stack` as torch passes it for `xla_gpu::paged_attention`.
    unsafe fn paged_attention(&self, stack: *mut StableIValue, num_args: u64, num_outputs: u64) -> Result<()> {
        Self::expect_arity("paged_attention", num_args, num_outputs, 12)?;
        let op = "paged_attention";
        let inputs = self.take_tensors::<6>(stack);
        let slot = |i: usize| *stack.add(i);
        let sm_scale = f64::from_bits(slot(6));
        let sliding_window = self.take_optional(slot(7)).map(|bits| bits as i64);
        let [soft_cap, mask_value, k_scale, v_scale] =
            [8, 9, 10, 11].map(|i| self.take_optional(slot(i)).map(|bits| f64::from_bits(bits) as f32));

        const NAMES: [&str; 6] = ["q", "kv_pages", "kv_lens", "page_indices", "cu_q_lens", "num_seqs"];
        let named: Vec<(&str, &OwnedTensor)> = NAMES.iter().copied().zip(inputs.iter()).collect();
        let device = self.common_device(op, &named)?;
        drop(named);
        let [q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs] = inputs;
        let inputs = [
            q.contiguous()?,
            kv_pages.contiguous()?,
            kv_lens.contiguous()?,
            page_indices.contiguous()?,
            cu_q_lens.contiguous()?,
            num_seqs.contiguous()?,
        ];
        let out = self.empty(inputs[0].sizes()?, inputs[0].scalar_type()?, device)?;
        let views = [
            inputs[0].view(op, NAMES[0])?,
            inputs[1].view(op, NAMES[1])?,
            inputs[2].view(op, NAMES[2])?,
            inputs[3].view(op, NAMES[3])?,
            inputs[4].view(op, NAMES[4])?,
            inputs[5].view(op, NAMES[5])?,
            out.view(op, "out")?,
        ];
        let attrs = Attributes {
            sm_scale: sm_scale as f32,
            sliding_window: sliding_window.map(Attributes::sliding_window_from_i64).transpose()?,
            soft_cap,
            mask_value,
            k_scale,
            v_scale,
        };
        let [vq, vkv, vlens, vpages, vcu, vnum, vout] = &views;
        let spec = PagedAttention::from_tensors(vq, vkv, vlens, vpages, vcu, vnum, vout, attrs)?;
        let ptrs = views.each_ref().map(|v| v.data);
        match device {
            Device::Cuda(index) => {
                let bytes = paged_attention::workspace_bytes(self.kernels, index, &spec)?;
                // Split-KV partials from torch's allocator, released (stream-ordered) after the launch.
                let workspace = if bytes > 0 {
                    Some(self.empty(
                        &[bytes as i64],
                        self.scalar_type(DType::U8).expect("u8 is in the dtype table"),
                        device,
                    )?)
                } else {
                    None
                };
                let workspace_ptr = match &workspace {
                    Some(w) => w.view(op, "workspace")?.data as u64,
                    None => 0,
                };
                let bufs = DeviceBuffers::from_ordered(ptrs, Workspace::Given { ptr: workspace_ptr, bytes });
                // torch's default stream is NULL on every device: name the device for it.
                paged_attention::launch_cuda_on_device(
                    self.kernels,
                    self.current_stream(index)? as _,
                    index,
                    &spec,
                    bufs,
                )?;
            }
            Device::Cpu => run_paged_attention_cpu(&spec, ptrs)?,
        }
        *stack = out.into_raw() as StableIValue;
        Ok(())
    }
}
