//! fp8 (E4M3FN, E5M2) bytes to packed pairs of 16-bit floats (the tensor cores' operands), a few
//! integer and packed-float instructions per pair through inline PTX.
//!
//! Every finite fp8 value is exact in f16 and in bf16. The fast conversions place an fp8 byte's
//! exponent and mantissa fields into the 16-bit format's fields and multiply by the power of two
//! that corrects the exponent bias (normals and subnormals alike); they do not produce NaN or
//! infinity, so callers check a word for those bytes first ([`Fp8::has_special`]) and take the
//! exact per-element widening ([`crate::num::KvElement::widen`]) when one is present.
//!
//! To f16 there are cheaper exact paths: on sm_89+ (the sm_90a image) `cvt.rn.f16x2.e4m3x2` and
//! `.e5m2x2` widen a pair in one instruction, NaN included; elsewhere an E5M2 byte is the high
//! byte of the same f16, one byte permute a pair ([`Fp8::pair_to_f16`], [`Fp8::F16_EXACT`]).

use crate::mma::MmaElement;
use crate::num::{KvElement, F8E4M3, F8E5M2};

/// An fp8 format with packed conversions to q's 16-bit type.
pub trait Fp8: KvElement {
    /// Whether any of the four bytes of `word` is NaN or infinite in this format.
    fn has_special(word: u32) -> bool;
    /// Bytes `2 * pair` and `2 * pair + 1` of `word` as a packed pair of `Q` (low byte → low half),
    /// exact, for finite bytes.
    fn pair_to<Q: MmaElement>(word: u32, pair: usize) -> u32;
    /// Whether [`Fp8::pair_to_f16`] is exact for every byte, NaN and infinity included (callers
    /// then skip [`Fp8::has_special`]).
    const F16_EXACT: bool;
    /// Bytes `2 * pair` and `2 * pair + 1` of `word` as a packed f16 pair (low byte → low half):
    /// exact for finite bytes, and for every byte where [`Fp8::F16_EXACT`].
    fn pair_to_f16(word: u32, pair: usize) -> u32;
}

/// `cvt.rn.f16x2.<fmt>x2` of the 16-bit half `pair` of `word`, as function `$name` (sm_89+; the
/// sm_90a image).
macro_rules! fp8x2_to_f16x2 {
    ($name:ident, $fmt:literal) => {
        #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
        #[inline(always)]
        fn $name(word: u32, pair: usize) -> u32 {
            let d: u32;
            // SAFETY: pure conversion instructions, available on the image's architecture.
            unsafe {
                if pair == 0 {
                    core::arch::asm!(concat!("{{ .reg .b16 l, h; mov.b32 {{l, h}}, {w}; cvt.rn.f16x2.", $fmt, "x2 {d}, l; }}"),
                        d = out(reg32) d, w = in(reg32) word, options(pure, nomem, nostack));
                } else {
                    core::arch::asm!(concat!("{{ .reg .b16 l, h; mov.b32 {{l, h}}, {w}; cvt.rn.f16x2.", $fmt, "x2 {d}, h; }}"),
                        d = out(reg32) d, w = in(reg32) word, options(pure, nomem, nostack));
                }
            }
            d
        }
    };
}
fp8x2_to_f16x2!(e4m3x2_to_f16x2, "e4m3");
fp8x2_to_f16x2!(e5m2x2_to_f16x2, "e5m2");

/// `prmt.b32 d, a, 0, selector`: byte `i` of `d` is byte `selector[4i..4i+4]` of `(0 : a)`.
#[inline(always)]
fn permute_bytes(a: u32, selector: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let d: u32;
        // SAFETY: pure integer instruction.
        unsafe {
            core::arch::asm!("prmt.b32 {}, {}, 0, {};", out(reg32) d, in(reg32) a, in(reg32) selector,
                options(pure, nomem, nostack))
        };
        d
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (a, selector);
        crate::gpu_only!("permute_bytes")
    }
}

/// Bytes 0, 2, 1, 3 of `word`: the two bytes of each 16-bit half go to different halves, so pair
/// 0 of the result is the low bytes of the halves and pair 1 their high bytes (a transposed
/// `ldmatrix` of 1-byte rows gives each lane two keys' two adjacent dims; this makes pairs of one
/// dim).
#[inline(always)]
pub fn transpose_byte_pairs(word: u32) -> u32 {
    permute_bytes(word, 0x3120)
}

/// Bytes `2 * pair` and `2 * pair + 1` of `word` as a packed f16 pair, exact for every byte
/// (NaN and infinity too): [`Fp8::pair_to_f16`], or the per-element widening where that is not
/// exact for the word's bytes.
#[inline(always)]
pub fn pair_to_f16_exact<KV: Fp8>(word: u32, pair: usize) -> u32 {
    if !KV::F16_EXACT && KV::has_special(word) {
        let bits = word >> (16 * pair);
        // SAFETY: KV is a 1-byte transparent wrapper over its bits.
        let lo: KV = unsafe { core::mem::transmute_copy(&(bits as u8)) };
        let hi: KV = unsafe { core::mem::transmute_copy(&((bits >> 8) as u8)) };
        f16::pack2(lo.widen(), hi.widen())
    } else {
        KV::pair_to_f16(word, pair)
    }
}

/// Bytes `2 * pair`, `2 * pair + 1` of `word` in the low bytes of the two 16-bit halves.
#[inline(always)]
fn spread_pair(word: u32, pair: usize) -> u32 {
    permute_bytes(word, if pair == 0 { 0x4140 } else { 0x4342 })
}

/// Multiplies both halves of a packed pair by a power of two held in `factor` (same packing):
/// `mul.rn.f16x2` or `fma.rn.bf16x2` with -0 (exact here: the products are representable).
#[inline(always)]
fn scale_pair<Q: MmaElement>(pair: u32, factor: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let d: u32;
        // SAFETY: pure arithmetic instructions (sm_80+).
        unsafe {
            if Q::IS_BF16 {
                core::arch::asm!("fma.rn.bf16x2 {}, {}, {}, {};", out(reg32) d, in(reg32) pair, in(reg32) factor,
                    in(reg32) 0x8000_8000u32, options(pure, nomem, nostack));
            } else {
                core::arch::asm!("mul.rn.f16x2 {}, {}, {};", out(reg32) d, in(reg32) pair, in(reg32) factor,
                    options(pure, nomem, nostack));
            }
        }
        d
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (pair, factor, Q::IS_BF16);
        crate::gpu_only!("scale_pair")
    }
}

/// Places sign, and the 7 exponent-and-mantissa bits shifted left by `shift`, of each spread byte.
#[inline(always)]
fn place_fields(spread: u32, shift: u32) -> u32 {
    ((spread & 0x0080_0080) << 8) | ((spread & 0x007f_007f) << shift)
}

/// Whether a byte of `word` has all the bits of `mask` set (`mask`'s lowest set bit is `low`).
#[inline(always)]
fn any_byte_has(word: u32, mask: u32, low: u32) -> bool {
    // Bytes of `word & mask` are at most `mask`; adding `low` carries into bit 7 only for `mask`.
    ((word & (mask * 0x0101_0101)).wrapping_add(low * 0x0101_0101) & 0x8080_8080) != 0
}

impl Fp8 for F8E4M3 {
    #[inline(always)]
    fn has_special(word: u32) -> bool {
        any_byte_has(word, 0x7f, 1) // S.1111.111 is NaN; no infinities
    }

    #[inline(always)]
    fn pair_to<Q: MmaElement>(word: u32, pair: usize) -> u32 {
        let spread = spread_pair(word, pair);
        if Q::IS_BF16 {
            // bias 7 -> 127: times 2^120 (bf16 0x7b80)
            scale_pair::<Q>(place_fields(spread, 4), 0x7b80_7b80)
        } else {
            // bias 7 -> 15: times 2^8 (f16 0x5c00)
            scale_pair::<Q>(place_fields(spread, 7), 0x5c00_5c00)
        }
    }

    const F16_EXACT: bool = cfg!(xgk_sm90);

    #[inline(always)]
    fn pair_to_f16(word: u32, pair: usize) -> u32 {
        #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
        {
            e4m3x2_to_f16x2(word, pair)
        }
        #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
        {
            Self::pair_to::<f16>(word, pair)
        }
    }
}

impl Fp8 for F8E5M2 {
    #[inline(always)]
    fn has_special(word: u32) -> bool {
        any_byte_has(word, 0x7c, 4) // exponent 11111: infinity or NaN
    }

    #[inline(always)]
    fn pair_to<Q: MmaElement>(word: u32, pair: usize) -> u32 {
        if Q::IS_BF16 {
            // bias 15 -> 127: times 2^112 (bf16 0x7780)
            scale_pair::<Q>(place_fields(spread_pair(word, pair), 5), 0x7780_7780)
        } else {
            Self::pair_to_f16(word, pair)
        }
    }

    const F16_EXACT: bool = true;

    #[inline(always)]
    fn pair_to_f16(word: u32, pair: usize) -> u32 {
        // On sm_90 the conversion pipe's `cvt.rn.f16x2.e5m2x2`, as E4M3's: a byte permute (exact
        // too, below) runs on the ALU pipe, which the warp-specialized prefill's consumers share
        // with its converters (their max trees and masks), and made e5m2 prefill 5 % slower than
        // e4m3 on the same instructions (benchmarks/NOTES.md "v43").
        #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
        {
            e5m2x2_to_f16x2(word, pair)
        }
        // An E5M2 byte is the high byte of the same f16 (infinities and NaNs included).
        #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
        {
            permute_bytes(word, if pair == 0 { 0x1404 } else { 0x3424 })
        }
    }
}
