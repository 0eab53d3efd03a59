//! The ops: validation of what XLA (or torch) hands us, the CUDA launch, the CPU implementation.

pub mod paged_attention;
pub mod simple_add;

use crate::dtype::DType;

/// Float element types with a CPU implementation, widened to / narrowed from f32 over raw bytes.
pub(crate) mod elem {
    use super::DType;
    use half::{bf16, f16};
    use kernels_gpu::num::{F8E4M3, F8E5M2};

    /// Reads element `i` of a `dtype` buffer as f32.
    #[inline]
    pub fn load(dtype: DType, bytes: &[u8], i: usize) -> f32 {
        match dtype {
            DType::F32 => f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()),
            DType::F16 => f16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32(),
            DType::BF16 => bf16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32(),
            DType::F8E4M3FN => F8E4M3(bytes[i]).to_f32(),
            DType::F8E5M2 => F8E5M2(bytes[i]).to_f32(),
            other => unreachable!("validated earlier: {other}"),
        }
    }

    /// Writes `v` rounded to nearest even into element `i` of a `dtype` buffer (f32/f16/bf16).
    #[inline]
    pub fn store(dtype: DType, bytes: &mut [u8], i: usize, v: f32) {
        match dtype {
            DType::F32 => bytes[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes()),
            DType::F16 => bytes[2 * i..2 * i + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes()),
            DType::BF16 => bytes[2 * i..2 * i + 2].copy_from_slice(&bf16::from_f32(v).to_le_bytes()),
            other => unreachable!("validated earlier: {other}"),
        }
    }

    /// `v` rounded to `dtype` and widened back (what a cast to q's dtype does).
    #[inline]
    pub fn round(dtype: DType, v: f32) -> f32 {
        match dtype {
            DType::F16 => f16::from_f32(v).to_f32(),
            DType::BF16 => bf16::from_f32(v).to_f32(),
            _ => v,
        }
    }
}

/// Bytes any one buffer of an op may declare (exclusive): 2^62, so that byte counts are exact in
/// `usize` and host slices stay below `isize::MAX`, whatever the dims say.
pub const MAX_BUFFER_BYTES: usize = 1 << 62;

/// Whether `ptr` is aligned to `align` bytes.
pub(crate) fn aligned(ptr: *const std::ffi::c_void, align: usize) -> bool {
    (ptr as usize).is_multiple_of(align)
}
