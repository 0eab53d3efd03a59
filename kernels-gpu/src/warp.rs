//! Warp-level primitives (cuda_std's `warp` module), through inline PTX since
//! `core::arch::nvptx` has no shuffles.

/// Lanes in a warp.
pub const WARP_SIZE: u32 = 32;
/// Mask of all 32 lanes.
pub const FULL_MASK: u32 = 0xffff_ffff;

/// This thread's lane in its warp (`%laneid`).
#[inline(always)]
pub fn lane_id() -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let lane: u32;
        // SAFETY: reads a special register.
        unsafe { core::arch::asm!("mov.u32 {}, %laneid;", out(reg32) lane, options(pure, nomem, nostack)) };
        lane
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::gpu_only!("lane_id")
}

/// `__shfl_xor_sync(mask, value, lane_mask, width)` for `f32`: returns the value held by lane
/// `lane_id() ^ lane_mask` within segments of `width` lanes, and whether that lane was valid.
///
/// Every lane named in `mask` must execute the same call.
#[inline(always)]
pub fn warp_shuffle_xor_f32(mask: u32, value: f32, lane_mask: u32, width: u32) -> (f32, bool) {
    #[cfg(target_arch = "nvptx64")]
    {
        let out: f32;
        let valid: u32;
        // c operand packs the segment mask (32 - width) << 8 | 0x1f, as CUDA's __shfl_xor_sync.
        let c = ((WARP_SIZE - width) << 8) | 0x1f;
        // SAFETY: shfl.sync is defined for any operands when all lanes in `mask` participate.
        unsafe {
            core::arch::asm!(
                "{{ .reg .pred p; shfl.sync.bfly.b32 {out}|p, {v}, {lm}, {c}, {m}; selp.u32 {ok}, 1, 0, p; }}",
                out = out(reg32) out, ok = out(reg32) valid,
                v = in(reg32) value, lm = in(reg32) lane_mask, c = in(reg32) c, m = in(reg32) mask,
                // Not `pure`: a warp-collective must not be speculated or merged.
                options(nomem, nostack),
            )
        };
        (out, valid != 0)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (mask, value, lane_mask, width);
        crate::gpu_only!("warp_shuffle_xor_f32")
    }
}

/// Maximum of `value` over the lanes whose ids differ from this lane's only in the bits of
/// `lane_masks` (one XOR shuffle per mask, in order; masks of distinct single bits: `[1, 2]` is a
/// quad, `[4, 8, 16]` the eight lanes `l % 4` has in common). Every lane of the full warp must
/// make the same call.
#[inline(always)]
pub fn butterfly_max_f32<const N: usize>(mut value: f32, lane_masks: [u32; N]) -> f32 {
    let mut i = 0;
    while i < N {
        value = crate::math::max_f32(value, warp_shuffle_xor_f32(FULL_MASK, value, lane_masks[i], WARP_SIZE).0);
        i += 1;
    }
    value
}

/// Sum of `value` over the lanes [`butterfly_max_f32`] takes the maximum of.
#[inline(always)]
pub fn butterfly_sum_f32<const N: usize>(mut value: f32, lane_masks: [u32; N]) -> f32 {
    let mut i = 0;
    while i < N {
        value += warp_shuffle_xor_f32(FULL_MASK, value, lane_masks[i], WARP_SIZE).0;
        i += 1;
    }
    value
}

/// Sum of `value` over the 32 lanes of a full warp; every lane gets the result.
#[inline(always)]
pub fn warp_sum_f32(value: f32) -> f32 {
    butterfly_sum_f32(value, [16, 8, 4, 2, 1])
}

/// Maximum of `value` over the 32 lanes of a full warp; every lane gets the result.
#[inline(always)]
pub fn warp_max_f32(value: f32) -> f32 {
    butterfly_max_f32(value, [16, 8, 4, 2, 1])
}

/// `__ballot_sync(FULL_MASK, predicate)`: bit `l` is set when lane `l`'s predicate is true.
///
/// Every lane of the warp must execute the same call.
#[inline(always)]
pub fn warp_ballot(predicate: bool) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let bits: u32;
        let p = predicate as u32;
        // SAFETY: vote.sync over the full warp, which the caller's contract guarantees.
        unsafe {
            core::arch::asm!(
                "{{ .reg .pred p; setp.ne.u32 p, {p}, 0; vote.sync.ballot.b32 {bits}, p, 0xffffffff; }}",
                bits = out(reg32) bits, p = in(reg32) p,
                // Not `pure`: a warp-collective must not be speculated or merged.
                options(nomem, nostack),
            )
        };
        bits
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = predicate;
        crate::gpu_only!("warp_ballot")
    }
}

/// `__syncwarp()`: orders the shared-memory accesses of the warp's lanes before the call against
/// those after it (lanes exchanging data through shared memory).
///
/// Every lane of the warp must execute the same call.
#[inline(always)]
pub fn sync_warp() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: bar.warp.sync with the full mask, which the caller's contract guarantees.
    unsafe {
        core::arch::asm!("bar.warp.sync 0xffffffff;", options(nostack))
    };
    #[cfg(not(target_arch = "nvptx64"))]
    crate::gpu_only!("sync_warp")
}

/// `__any_sync(FULL_MASK, predicate)`: whether any lane's predicate is true.
///
/// Every lane of the warp must execute the same call.
#[inline(always)]
pub fn warp_any(predicate: bool) -> bool {
    warp_ballot(predicate) != 0
}

/// `__shfl_sync(0xffffffff, value, src_lane)` for `u32`: lane `src_lane`'s `value` (`src_lane`
/// below 32).
///
/// Every lane of the warp must execute the same call.
#[inline(always)]
pub fn warp_shuffle_idx_u32(value: u32, src_lane: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let out: u32;
        // SAFETY: shfl.sync over the full warp, which the caller's contract guarantees.
        unsafe {
            core::arch::asm!(
                "shfl.sync.idx.b32 {out}, {v}, {src}, 0x1f, 0xffffffff;",
                out = out(reg32) out, v = in(reg32) value, src = in(reg32) src_lane,
                // Not `pure`: a warp-collective must not be speculated or merged.
                options(nomem, nostack),
            )
        };
        out
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (value, src_lane);
        crate::gpu_only!("warp_shuffle_idx_u32")
    }
}

/// The inclusive prefix sum of `value` over the warp's lanes: lane `l` gets the sum of lanes
/// `0..=l` (five `shfl.sync.up` steps, Hillis-Steele within the warp; wrapping).
///
/// Every lane of the warp must execute the same call.
#[inline(always)]
pub fn warp_inclusive_sum_u32(value: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let mut sum = value;
        let mut delta = 1u32;
        while delta < WARP_SIZE {
            let up: u32;
            // SAFETY: shfl.sync over the full warp, which the caller's contract guarantees; the
            // predicate is false on lanes below `delta` (their own value comes back, not added).
            unsafe {
                core::arch::asm!(
                    "{{ .reg .pred p; shfl.sync.up.b32 {up}|p, {v}, {d}, 0, 0xffffffff; selp.u32 {up}, {up}, 0, p; }}",
                    up = out(reg32) up, v = in(reg32) sum, d = in(reg32) delta,
                    // Not `pure`: a warp-collective must not be speculated or merged.
                    options(nomem, nostack),
                )
            };
            sum = sum.wrapping_add(up);
            delta *= 2;
        }
        sum
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = value;
        crate::gpu_only!("warp_inclusive_sum_u32")
    }
}
