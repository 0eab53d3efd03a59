//! Warp-level tensor-core matrix multiply (`mma.sync.aligned.m16n8k16`, sm_80+), through inline
//! PTX. Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"), with `g = lane / 4` and
//! `c = lane % 4`:
//! - A (16x16, row-major), 4 registers of 2 halves: (row g, cols 2c..2c+1), (row g+8, same cols),
//!   (row g, cols 8+2c..), (row g+8, cols 8+2c..); the lower half holds the lower column.
//! - B (16x8, "col"), 2 registers: (rows 2c..2c+1, col g), (rows 8+2c.., col g).
//! - C/D (16x8, f32), 4 registers: (row g, cols 2c, 2c+1), (row g+8, cols 2c, 2c+1).

use crate::num::{Bf16, Element};

/// A half-precision type the tensor cores multiply (f16 or bf16), accumulating in f32.
pub trait MmaElement: Element {
    /// Packs two values, rounded to this type: `lo` in the low 16 bits.
    fn pack2(lo: f32, hi: f32) -> u32;
    /// `d = a * b + c` on a 16x16 by 16x8 tile.
    fn mma(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4];
}

macro_rules! mma_impl {
    ($ty:ty, $cvt:literal, $mma:literal) => {
        impl MmaElement for $ty {
            #[inline(always)]
            fn pack2(lo: f32, hi: f32) -> u32 {
                #[cfg(target_arch = "nvptx64")]
                {
                    let r: u32;
                    // SAFETY: pure conversion; the first source goes to the upper half.
                    unsafe { core::arch::asm!(concat!($cvt, " {}, {}, {};"), out(reg32) r, in(reg32) hi, in(reg32) lo, options(pure, nomem, nostack)) };
                    r
                }
                #[cfg(not(target_arch = "nvptx64"))]
                {
                    let _ = (lo, hi);
                    crate::gpu_only!("pack2")
                }
            }

            #[inline(always)]
            fn mma(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
                #[cfg(target_arch = "nvptx64")]
                {
                    let d: [f32; 4];
                    let (d0, d1, d2, d3): (f32, f32, f32, f32);
                    // SAFETY: every lane of the warp executes this together (caller's contract).
                    unsafe {
                        core::arch::asm!(
                            concat!($mma, " {{{}, {}, {}, {}}}, {{{}, {}, {}, {}}}, {{{}, {}}}, {{{}, {}, {}, {}}};"),
                            out(reg32) d0, out(reg32) d1, out(reg32) d2, out(reg32) d3,
                            in(reg32) a[0], in(reg32) a[1], in(reg32) a[2], in(reg32) a[3],
                            in(reg32) b[0], in(reg32) b[1],
                            in(reg32) c[0], in(reg32) c[1], in(reg32) c[2], in(reg32) c[3],
                            // No memory access, so loads may be scheduled across it; not `pure`:
                            // a warp-collective must not be speculated or merged.
                            options(nomem, nostack),
                        )
                    };
                    d = [d0, d1, d2, d3];
                    d
                }
                #[cfg(not(target_arch = "nvptx64"))]
                {
                    let _ = (a, b, c);
                    crate::gpu_only!("mma")
                }
            }
        }
    };
}

mma_impl!(Bf16, "cvt.rn.bf16x2.f32", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32");
mma_impl!(f16, "cvt.rn.f16x2.f32", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32");
