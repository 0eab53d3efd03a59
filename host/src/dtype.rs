//! Element types, numbered like `xla::PrimitiveType` / `XLA_FFI_DataType`.

use std::fmt;

/// An XLA element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    Pred,
    S8,
    S16,
    S32,
    S64,
    U8,
    U16,
    U32,
    U64,
    F16,
    F32,
    F64,
    BF16,
    F8E5M2,
    F8E4M3FN,
    /// Any other `XLA_FFI_DataType` value (complex, token, 4-bit, other fp8 flavours...).
    Other(i32),
}

impl DType {
    /// From an `XLA_FFI_DataType` / `xla::PrimitiveType` value.
    pub fn from_xla(code: i32) -> Self {
        match code {
            1 => DType::Pred,
            2 => DType::S8,
            3 => DType::S16,
            4 => DType::S32,
            5 => DType::S64,
            6 => DType::U8,
            7 => DType::U16,
            8 => DType::U32,
            9 => DType::U64,
            10 => DType::F16,
            11 => DType::F32,
            12 => DType::F64,
            16 => DType::BF16,
            19 => DType::F8E5M2,
            20 => DType::F8E4M3FN,
            other => DType::Other(other),
        }
    }

    /// The `XLA_FFI_DataType` value.
    pub fn to_xla(self) -> i32 {
        match self {
            DType::Pred => 1,
            DType::S8 => 2,
            DType::S16 => 3,
            DType::S32 => 4,
            DType::S64 => 5,
            DType::U8 => 6,
            DType::U16 => 7,
            DType::U32 => 8,
            DType::U64 => 9,
            DType::F16 => 10,
            DType::F32 => 11,
            DType::F64 => 12,
            DType::BF16 => 16,
            DType::F8E5M2 => 19,
            DType::F8E4M3FN => 20,
            DType::Other(c) => c,
        }
    }

    /// Parses the names used by numpy / JAX / our opaque strings (`f32`, `float32`, `bf16`...).
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "pred" | "bool" => DType::Pred,
            "s8" | "int8" => DType::S8,
            "s16" | "int16" => DType::S16,
            "s32" | "int32" => DType::S32,
            "s64" | "int64" => DType::S64,
            "u8" | "uint8" => DType::U8,
            "u16" | "uint16" => DType::U16,
            "u32" | "uint32" => DType::U32,
            "u64" | "uint64" => DType::U64,
            "f16" | "float16" => DType::F16,
            "f32" | "float32" => DType::F32,
            "f64" | "float64" => DType::F64,
            "bf16" | "bfloat16" => DType::BF16,
            "f8e5m2" | "float8_e5m2" => DType::F8E5M2,
            "f8e4m3fn" | "float8_e4m3fn" => DType::F8E4M3FN,
            _ => return None,
        })
    }

    /// Bytes per element (None for types this crate does not size).
    pub fn size_bytes(self) -> Option<usize> {
        Some(match self {
            DType::Pred | DType::S8 | DType::U8 | DType::F8E5M2 | DType::F8E4M3FN => 1,
            DType::S16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::S32 | DType::U32 | DType::F32 => 4,
            DType::S64 | DType::U64 | DType::F64 => 8,
            DType::Other(_) => return None,
        })
    }

    /// Short name (`f32`, `bf16`, `f8e4m3fn`...), as in XLA's HLO text.
    pub fn name(self) -> String {
        match self {
            DType::Pred => "pred".into(),
            DType::S8 => "s8".into(),
            DType::S16 => "s16".into(),
            DType::S32 => "s32".into(),
            DType::S64 => "s64".into(),
            DType::U8 => "u8".into(),
            DType::U16 => "u16".into(),
            DType::U32 => "u32".into(),
            DType::U64 => "u64".into(),
            DType::F16 => "f16".into(),
            DType::F32 => "f32".into(),
            DType::F64 => "f64".into(),
            DType::BF16 => "bf16".into(),
            DType::F8E5M2 => "f8e5m2".into(),
            DType::F8E4M3FN => "f8e4m3fn".into(),
            DType::Other(c) => format!("xla_type_{c}"),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// A buffer as an op sees it: where it is, its element type and its logical dims (row-major).
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    pub data: *mut std::ffi::c_void,
    pub dtype: DType,
    pub dims: &'a [i64],
}

impl TensorRef<'_> {
    /// Number of elements (None on a negative dim or overflow).
    pub fn num_elements(&self) -> Option<usize> {
        self.dims.iter().try_fold(1usize, |acc, &d| usize::try_from(d).ok().and_then(|d| acc.checked_mul(d)))
    }

    /// `dtype[d0,d1,...]`, as XLA prints shapes.
    pub fn describe(&self) -> String {
        let dims: Vec<String> = self.dims.iter().map(|d| d.to_string()).collect();
        format!("{}[{}]", self.dtype, dims.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xla_codes_round_trip() {
        for code in 0..40 {
            assert_eq!(DType::from_xla(code).to_xla(), code);
        }
        assert_eq!(DType::parse("bfloat16"), Some(DType::BF16));
        assert_eq!(DType::F8E4M3FN.size_bytes(), Some(1));
        assert_eq!(DType::Other(17).size_bytes(), None);
    }
}
