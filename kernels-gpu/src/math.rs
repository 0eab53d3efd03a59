//! Fast math for kernels. `core::intrinsics::expf32` and friends crash `llc` on nvptx ("no
//! libcall available"), so exponentials go through `ex2.approx` with log2(e) folded in.

/// log2(e): multiply a natural-log exponent by this before `exp2_approx`.
pub const LOG2_E: f32 = core::f32::consts::LOG2_E;

/// `max.f32` (NaN-ignoring, like `fmaxf`).
#[inline(always)]
pub fn max_f32(a: f32, b: f32) -> f32 {
    a.max(b)
}

/// `min.f32` (NaN-ignoring, like `fminf`).
#[inline(always)]
pub fn min_f32(a: f32, b: f32) -> f32 {
    a.min(b)
}

/// 2^x by `ex2.approx.ftz.f32` (max relative error about 2^-22; `exp2(-inf) = 0`).
#[inline(always)]
pub fn exp2_approx(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let y: f32;
        // SAFETY: pure arithmetic instruction.
        unsafe {
            core::arch::asm!("ex2.approx.ftz.f32 {}, {};", out(reg32) y, in(reg32) x, options(pure, nomem, nostack))
        };
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = x;
        crate::gpu_only!("exp2_approx")
    }
}

/// `a * b + c` rounded once (`fma.rn.f32`): one instruction where the separate multiply and add
/// are two (Rust does not contract them on its own).
#[inline(always)]
pub fn fma_f32(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: `llvm.fma.f32`, a native instruction on nvptx (no libcall).
        unsafe { core::intrinsics::fmaf32(a, b, c) }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        a * b + c
    }
}

/// e^x through `exp2_approx`.
#[inline(always)]
pub fn exp_approx(x: f32) -> f32 {
    exp2_approx(x * LOG2_E)
}

/// natural log by `lg2.approx.f32` (`ln(0) = -inf`).
#[inline(always)]
pub fn ln_approx(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let y: f32;
        // SAFETY: pure arithmetic instruction.
        unsafe { core::arch::asm!("lg2.approx.f32 {}, {};", out(reg32) y, in(reg32) x, options(pure, nomem, nostack)) };
        y * core::f32::consts::LN_2
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = x;
        crate::gpu_only!("ln_approx")
    }
}

/// tanh(x) = sign(x) * (1 - 2 / (e^{2|x|} + 1)); absolute error about 1e-7, saturating to ±1
/// (`tanh.approx.f32` would only give about 2^-11).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let e = exp2_approx(2.0 * LOG2_E * x.abs());
    let t = 1.0 - 2.0 / (e + 1.0);
    t.copysign(x)
}

/// `x`, through an instruction the compiler cannot see into: it cannot replace the value by
/// what it knows of its uses (see `LogitScale::for_decode`).
#[inline(always)]
pub fn opaque_f32(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let y: f32;
        // SAFETY: a register move.
        unsafe { core::arch::asm!("mov.b32 {}, {};", out(reg32) y, in(reg32) x, options(pure, nomem, nostack)) };
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        x
    }
}

/// `x`, hidden from the optimizer (a register move it cannot see through): keeps a loop bound
/// from being folded into a constant trip count, so that the loop stays a loop.
#[inline(always)]
pub fn opaque_u32(x: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let y: u32;
        // SAFETY: a register move.
        unsafe { core::arch::asm!("mov.b32 {}, {};", out(reg32) y, in(reg32) x, options(pure, nomem, nostack)) };
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        x
    }
}

/// 1/x of a softmax row's denominator, or 0 where it is not positive (a row that saw no key:
/// its output is zeros, not a division by zero).
#[inline(always)]
pub fn inverse_or_zero(sum: f32) -> f32 {
    if sum > 0.0 {
        1.0 / sum
    } else {
        0.0
    }
}

/// 1/x by `rcp.approx.ftz.f32` (max error about 1 ulp; no division slow path).
#[inline(always)]
pub fn rcp_approx(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let y: f32;
        // SAFETY: pure arithmetic instruction.
        unsafe {
            core::arch::asm!("rcp.approx.ftz.f32 {}, {};", out(reg32) y, in(reg32) x, options(pure, nomem, nostack))
        };
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = x;
        crate::gpu_only!("rcp_approx")
    }
}

/// [`tanh`] with the reciprocal approximated (`rcp.approx`): absolute error about 2e-7, and no
/// IEEE division, whose slow path costs a call per site in code size (the tiled kernel has 32).
#[inline(always)]
pub fn tanh_fast(x: f32) -> f32 {
    let e = exp2_approx(2.0 * LOG2_E * x.abs());
    let t = 1.0 - 2.0 * rcp_approx(e + 1.0);
    t.copysign(x)
}

/// Unsigned division of numerators below 2^31 by a divisor fixed for a kernel's run (a page
/// size), as a multiply-high, an add and a shift instead of a division or a branch on the divisor
/// being a power of two (Granlund and Montgomery, "Division by invariant integers using
/// multiplication", 1994, figure 4.1, with its two shifts merged: `t + n` cannot overflow when
/// `n < 2^31`).
#[derive(Clone, Copy, Debug)]
pub struct FastDiv {
    divisor: u32,
    magic: u32,
    shift: u32,
}

impl FastDiv {
    /// A divider by `divisor` (0 is treated as 1).
    #[inline(always)]
    pub fn new(divisor: u32) -> Self {
        let divisor = divisor.max(1);
        // l = ceil(log2(d)); m = floor(2^32 (2^l - d) / d) + 1, which fits in 32 bits.
        let shift = 32 - (divisor - 1).leading_zeros();
        let magic = (((1u64 << 32) * ((1u64 << shift) - divisor as u64)) / divisor as u64 + 1) as u32;
        FastDiv { divisor, magic, shift }
    }

    /// `n / divisor` for `n < 2^31`.
    #[inline(always)]
    pub fn div(&self, n: u32) -> u32 {
        let t = ((n as u64 * self.magic as u64) >> 32) as u32;
        (t + n) >> self.shift
    }

    /// `(n / divisor, n % divisor)` for `n < 2^31`.
    #[inline(always)]
    pub fn div_rem(&self, n: u32) -> (u32, u32) {
        let q = self.div(n);
        (q, n - q * self.divisor)
    }
}

#[cfg(test)]
mod tests {
    use super::FastDiv;

    #[test]
    fn fast_div_matches_division_below_2_pow_31() {
        let numerators = |d: u32| {
            let mut v: [u32; 12] =
                [0, 1, d - 1, d, d + 1, 2 * d - 1, 12345, 1 << 20, (1 << 31) - 1, (1 << 31) - d, 0, 0];
            v[10] = ((1u32 << 31) - 1) / d * d;
            v[11] = v[10].saturating_sub(1);
            v
        };
        for d in (1..=300).chain([511, 512, 513, 1000, 4096, 65535, 65536, 1 << 20, (1 << 31) - 1]) {
            let f = FastDiv::new(d);
            for n in numerators(d).into_iter().chain((0..2000).map(|i| i * 7919 % (1 << 31))) {
                assert_eq!(f.div_rem(n), (n / d, n % d), "{n} / {d}");
            }
        }
    }
}
