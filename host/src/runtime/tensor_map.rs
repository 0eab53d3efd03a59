//! The tensor maps of the sm_90a kernels' bulk tensor copies, encoded by the driver.

use std::ffi::c_void;
use std::sync::OnceLock;

use cudarc::driver::sys;

use super::ensure_driver;
use crate::error::{Error, Result};

/// A 3-D tiled tensor map (`cuTensorMapEncodeTiled`) of 16-bit elements or bytes, for the bulk
/// tensor copies of the sm_90a kernels: `dims` innermost first (elements), `strides` the byte
/// strides of dimensions 1 and 2, `boxes` the box one copy moves, shared memory written as
/// [`MapElement`] says, elements outside the tensor read as zeros.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TiledTensorMap {
    pub address: u64,
    pub dims: [u64; 3],
    pub strides: [u64; 2],
    pub boxes: [u32; 3],
    pub element: MapElement,
}

/// The element type of a [`TiledTensorMap`], and with it the shared-memory layout of its boxes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapElement {
    /// 16-bit floats, boxes in the 128-byte swizzle (the tensor cores' operand layout).
    F16,
    Bf16,
    /// Raw bytes (fp8), boxes unswizzled: row after row.
    Bytes,
}

impl TiledTensorMap {
    /// Encodes the map (host-only work in the driver: no device call, nothing enqueued); an error
    /// where the driver lacks the entry point (before CUDA 12.0) or rejects the layout.
    pub fn encode(&self) -> Result<[u64; 16]> {
        use sys::{CUtensorMapDataType as T, CUtensorMapFloatOOBfill as F, CUtensorMapInterleave as I};
        use sys::{CUtensorMapL2promotion as L, CUtensorMapSwizzle as S};
        ensure_driver()?;
        static PRESENT: OnceLock<bool> = OnceLock::new();
        // SAFETY: the library is loaded (ensure_driver); `get` only looks the symbol up.
        let present =
            *PRESENT.get_or_init(|| unsafe { sys::culib().get::<*const c_void>(b"cuTensorMapEncodeTiled") }.is_ok());
        if !present {
            return Err(Error::Driver("libcuda has no cuTensorMapEncodeTiled (a driver older than CUDA 12.0?)".into()));
        }
        let mut map = sys::CUtensorMap { opaque: [0; 16] };
        let element_strides = [1u32; 3];
        let (dtype, swizzle) = match self.element {
            MapElement::F16 => (T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16, S::CU_TENSOR_MAP_SWIZZLE_128B),
            MapElement::Bf16 => (T::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, S::CU_TENSOR_MAP_SWIZZLE_128B),
            MapElement::Bytes => (T::CU_TENSOR_MAP_DATA_TYPE_UINT8, S::CU_TENSOR_MAP_SWIZZLE_NONE),
        };
        // SAFETY: every pointer is to a local array of the rank's length; the call only writes `map`.
        unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map,
                dtype,
                3,
                self.address as *mut c_void,
                self.dims.as_ptr(),
                self.strides.as_ptr(),
                self.boxes.as_ptr(),
                element_strides.as_ptr(),
                I::CU_TENSOR_MAP_INTERLEAVE_NONE,
                swizzle,
                L::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                F::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        }
        .result()
        .map_err(|e| Error::cuda("cuTensorMapEncodeTiled", e))?;
        Ok(map.opaque)
    }
}
