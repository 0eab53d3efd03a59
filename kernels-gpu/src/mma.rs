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
    /// bf16 (else f16): selects the packed instructions of this type.
    const IS_BF16: bool;
    /// Packs two values, rounded to this type: `lo` in the low 16 bits.
    fn pack2(lo: f32, hi: f32) -> u32;
    /// `d = a * b + c` on a 16x16 by 16x8 tile.
    fn mma(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4];
}

macro_rules! mma_impl {
    ($ty:ty, $bf16:literal, $cvt:literal, $mma:literal) => {
        impl MmaElement for $ty {
            const IS_BF16: bool = $bf16;
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

mma_impl!(Bf16, true, "cvt.rn.bf16x2.f32", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32");
mma_impl!(f16, false, "cvt.rn.f16x2.f32", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32");

/// `ldmatrix.sync.aligned.m8n8.x4.shared.b16`: loads four 8x8 matrices of 16-bit elements from
/// shared memory. Lanes `8i..8i+8` give the addresses of matrix `i`'s eight 16-byte rows; lane `l`
/// receives, in register `i`, elements `(row l/4, cols 2(l%4), 2(l%4)+1)` of matrix `i`: an mma
/// A or B fragment when the rows are the fragment's rows (A) or columns (B).
///
/// # Safety
/// Every lane of the warp must execute it, each with a 16-byte aligned shared-memory address
/// (see [`crate::shared::shared_address`]) of 16 readable bytes written before (and made visible
/// by a barrier where other threads wrote them).
#[inline(always)]
pub unsafe fn ldmatrix_x4(addr: u32) -> [u32; 4] {
    ldmatrix_x4_impl::<false>(addr)
}

/// [`ldmatrix_x4`] with `.trans`: lane `l` receives elements `(rows 2(l%4), 2(l%4)+1; col l/4)` of
/// each matrix, i.e. the B fragment of a matrix stored row-major as `[k][n]` (V stored
/// `[key][dim]` for `O = P V`).
///
/// # Safety
/// As [`ldmatrix_x4`].
#[inline(always)]
pub unsafe fn ldmatrix_x4_trans(addr: u32) -> [u32; 4] {
    ldmatrix_x4_impl::<true>(addr)
}

/// [`ldmatrix_x4`] (`TRANS` false) and [`ldmatrix_x4_trans`] (true).
///
/// # Safety
/// As [`ldmatrix_x4`].
#[inline(always)]
unsafe fn ldmatrix_x4_impl<const TRANS: bool>(addr: u32) -> [u32; 4] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (r0, r1, r2, r3): (u32, u32, u32, u32);
        // Reads shared memory written by cp.async behind the compiler's back: `readonly`, not
        // `nomem`, so it stays after the waits and barriers that publish that memory.
        if TRANS {
            core::arch::asm!(
                "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{}, {}, {}, {}}}, [{}];",
                out(reg32) r0, out(reg32) r1, out(reg32) r2, out(reg32) r3, in(reg32) addr,
                options(readonly, nostack),
            );
        } else {
            core::arch::asm!(
                "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{}, {}, {}, {}}}, [{}];",
                out(reg32) r0, out(reg32) r1, out(reg32) r2, out(reg32) r3, in(reg32) addr,
                options(readonly, nostack),
            );
        }
        [r0, r1, r2, r3]
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = addr;
        crate::gpu_only!("ldmatrix_x4")
    }
}

/// `stmatrix.sync.aligned.m8n8.x4.shared.b16` (sm_90): the inverse of [`ldmatrix_x4`]. Stores
/// four 8x8 matrices of 16-bit elements to shared memory: lanes `8i..8i+8` give the addresses of
/// matrix `i`'s eight 16-byte rows; lane `l` supplies, in register `i`, elements `(row l/4, cols
/// 2(l%4), 2(l%4)+1)` of matrix `i`: an mma accumulator half (rows `g` or `g + 8` of an 8-column
/// n-tile) packed to pairs.
///
/// # Safety
/// Every lane of the warp must execute it, each with a 16-byte aligned shared-memory address of
/// 16 writable bytes that no other thread reads or writes concurrently.
#[inline(always)]
pub unsafe fn stmatrix_x4(addr: u32, x: [u32; 4]) {
    #[cfg(target_arch = "nvptx64")]
    {
        core::arch::asm!(
            "stmatrix.sync.aligned.m8n8.x4.shared.b16 [{}], {{{}, {}, {}, {}}};",
            in(reg32) addr, in(reg32) x[0], in(reg32) x[1], in(reg32) x[2], in(reg32) x[3],
            options(nostack),
        );
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (addr, x);
        crate::gpu_only!("stmatrix_x4")
    }
}

/// `movmatrix.sync.aligned.m8n8.trans.b16` (sm_75+, PTX 7.8): transposes an 8x8 matrix of 16-bit
/// elements held as in an mma accumulator half (lane `l` holds row `l/4`, cols `2(l%4)`,
/// `2(l%4)+1`): lane `l` receives row `l/4`, cols `2(l%4)`, `2(l%4)+1` of the transpose. A C
/// fragment's rows `g` (or `g + 8`) packed to pairs become, transposed, a B fragment register
/// whose k runs over the C fragment's rows.
///
/// Every lane of the warp must execute it (a warp-collective; no memory is touched).
#[inline(always)]
pub fn movmatrix_trans(x: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let r: u32;
        // SAFETY: register-only; not `pure`: a warp-collective must not be speculated or merged.
        unsafe {
            core::arch::asm!(
                "movmatrix.sync.aligned.m8n8.trans.b16 {}, {};",
                out(reg32) r, in(reg32) x,
                options(nomem, nostack),
            )
        };
        r
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = x;
        crate::gpu_only!("movmatrix_trans")
    }
}
