//! Element types shared by the GPU kernels and the host's CPU implementation.
//!
//! `f32` and core's `f16` are native. bf16 and the two fp8 formats have no core type, so they are
//! `#[repr(transparent)]` wrappers over their bits: widening is exact bit manipulation on both
//! targets; narrowing to bf16 rounds to nearest even (`cvt.rn.bf16.f32` on the GPU, the same
//! rounding in software on the host).

/// An element a kernel reads and (for float outputs) writes, computed through `f32`.
pub trait Element: Copy + 'static {
    /// Widens to f32 (exact for every type here).
    fn to_f32(self) -> f32;
    /// Narrows from f32, rounding to nearest even.
    fn from_f32(v: f32) -> Self;
}

impl Element for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Element for f16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self as f32
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v as f16
    }
}

/// bfloat16 as its bits.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Bf16(pub u16);

impl Element for Bf16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        #[cfg(target_arch = "nvptx64")]
        {
            let bits: u16;
            // SAFETY: pure conversion instruction (sm_80+).
            unsafe {
                core::arch::asm!("cvt.rn.bf16.f32 {}, {};", out(reg16) bits, in(reg32) v, options(pure, nomem, nostack))
            };
            Bf16(bits)
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            Bf16(bf16_bits_from_f32(v))
        }
    }
}

/// Round-to-nearest-even f32 → bf16 bits, NaN kept quiet (what `cvt.rn.bf16.f32` does).
#[inline(always)]
pub fn bf16_bits_from_f32(v: f32) -> u16 {
    let x = v.to_bits();
    if v.is_nan() {
        return ((x >> 16) | 0x0040) as u16;
    }
    let round = 0x7fff + ((x >> 16) & 1);
    (x.wrapping_add(round) >> 16) as u16
}

/// OCP fp8 E4M3FN (bias 7, no infinities, S.1111.111 is NaN) as its bits.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct F8E4M3(pub u8);

/// OCP fp8 E5M2 (bias 15, the top byte of an IEEE f16) as its bits.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct F8E5M2(pub u8);

impl F8E4M3 {
    /// Exact widening. E4M3's exponent and mantissa fields placed in an f16 give the same value
    /// times 2^-8 (normals and subnormals alike), so the conversion is one shift and one multiply.
    #[inline(always)]
    pub fn to_f32(self) -> f32 {
        let b = self.0 as u16;
        let h = f16::from_bits(((b & 0x80) << 8) | ((b & 0x7f) << 7));
        let v = (h as f32) * 256.0;
        // S.1111.111 is NaN (a select, not a branch: keeps unrolled callers straight-line).
        if b & 0x7f == 0x7f {
            f32::NAN
        } else {
            v
        }
    }
}

impl F8E5M2 {
    /// Exact widening: an E5M2 byte is the high byte of the same f16.
    #[inline(always)]
    pub fn to_f32(self) -> f32 {
        f16::from_bits((self.0 as u16) << 8) as f32
    }
}

/// A key/value cache element: anything that widens to f32. fp8 caches are read-only here.
pub trait KvElement: Copy + 'static {
    /// Widens to f32 exactly.
    fn widen(self) -> f32;
}

impl<T: Element> KvElement for T {
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }
}
impl KvElement for F8E4M3 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }
}
impl KvElement for F8E5M2 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16_bits_from_f32(1.0), 0x3f80);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to even (1.0).
        assert_eq!(bf16_bits_from_f32(1.0 + 1.0 / 256.0), 0x3f80);
        assert_eq!(bf16_bits_from_f32(1.0 + 3.0 / 256.0), 0x3f82);
        assert!(Bf16(bf16_bits_from_f32(f32::NAN)).to_f32().is_nan());
        assert_eq!(bf16_bits_from_f32(f32::INFINITY), 0x7f80);
    }

    #[test]
    fn fp8_widening_matches_the_formats() {
        // E4M3: 0x38 = 1.0, 0x7e = 448 (max), 0x01 = 2^-9 (min subnormal), 0xb8 = -1.0.
        assert_eq!(F8E4M3(0x38).to_f32(), 1.0);
        assert_eq!(F8E4M3(0x7e).to_f32(), 448.0);
        assert_eq!(F8E4M3(0x01).to_f32(), 2f32.powi(-9));
        assert_eq!(F8E4M3(0xb8).to_f32(), -1.0);
        assert!(F8E4M3(0x7f).to_f32().is_nan() && F8E4M3(0xff).to_f32().is_nan());
        // E5M2: 0x3c = 1.0, 0x7b = 57344 (max), 0x01 = 2^-16, 0x7c = inf.
        assert_eq!(F8E5M2(0x3c).to_f32(), 1.0);
        assert_eq!(F8E5M2(0x7b).to_f32(), 57344.0);
        assert_eq!(F8E5M2(0x01).to_f32(), 2f32.powi(-16));
        assert_eq!(F8E5M2(0x7c).to_f32(), f32::INFINITY);
    }
}
