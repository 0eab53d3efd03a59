//! `out = a + b`, elementwise, for f32, f16 and bf16.
//!
//! Bandwidth-bound: each thread moves 16 bytes per operand per vector (4 f32 or 8 half values),
//! one vector per step (`simple_add_<dtype>_x1`, the host's default) or four (`simple_add_<dtype>`;
//! a block's span is contiguous either way), when the host says all three pointers are 16-byte
//! aligned, in a grid-stride loop over spans (the host launches a block per span); the tail (and
//! misaligned buffers) go element by element. Halves are added in f32 and rounded once,
//! which equals the correctly rounded half-precision sum.

use super::{load_vec, store_vec, unroll};
use crate::kernel;
use crate::num::{Bf16, Element};
use crate::thread::{block_dim_x, block_idx_x, grid_size_1d, index_1d, thread_idx_x};

/// `out = a + b` over `n` elements (see the module docs): `V` elements a vector, `UNROLL`
/// vectors a step.
///
/// # Safety
/// As the `simple_add_*` kernels say: `a`, `b` and `out` device pointers valid for `n` elements, and
/// 16-byte aligned when `vector_ok != 0`.
#[inline(always)]
unsafe fn simple_add<T: Element, const V: usize, const UNROLL: usize>(
    a: *const T,
    b: *const T,
    out: *mut T,
    n: u64,
    vector_ok: u32,
) {
    let stride = grid_size_1d();
    let mut done = 0u64;
    if vector_ok != 0 {
        // Each step a block moves one contiguous span of UNROLL * blockDim vectors, its threads'
        // UNROLL loads blockDim vectors apart and all issued before the first add: more bytes in
        // flight per thread than one vector at a time, and each warp's loads within a few KiB
        // (loads `stride` vectors apart, the grid-stride layout, read 2790 GB/s at 64 Mi f32
        // against XLA's 2975: benchmarks/NOTES.md "simple_add").
        let vectors = n / V as u64;
        let block = block_dim_x() as u64;
        let span = UNROLL as u64 * block;
        let mut base = block_idx_x() as u64 * span + thread_idx_x() as u64;
        let step = UNROLL as u64 * stride;
        while base < vectors {
            let mut x = [[T::from_f32(0.0); V]; UNROLL];
            let mut y = x;
            unroll::<UNROLL>(|u| {
                let j = base + u as u64 * block;
                if j < vectors {
                    let off = (j * V as u64) as usize;
                    x[u] = load_vec(a.add(off));
                    y[u] = load_vec(b.add(off));
                }
            });
            unroll::<UNROLL>(|u| {
                let j = base + u as u64 * block;
                if j < vectors {
                    let mut z = x[u];
                    for k in 0..V {
                        z[k] = T::from_f32(x[u][k].to_f32() + y[u][k].to_f32());
                    }
                    store_vec(out.add((j * V as u64) as usize), z);
                }
            });
            base += step;
        }
        done = vectors * V as u64;
    }
    let mut i = done + index_1d();
    while i < n {
        let off = i as usize;
        *out.add(off) = T::from_f32((*a.add(off)).to_f32() + (*b.add(off)).to_f32());
        i += stride;
    }
}

/// Vectors per thread and step of the vector path of the `simple_add_<dtype>` kernels (a
/// block's span is `SIMPLE_ADD_UNROLL * blockDim` vectors); the `simple_add_<dtype>_x1` kernels
/// take one.
pub const SIMPLE_ADD_UNROLL: usize = 4;

/// Elements per thread and step for a 16-byte vector of `T`.
pub const fn vector_width(elem_bytes: usize) -> usize {
    16 / elem_bytes
}

/// `out = a + b` over `n` elements, launched with a 1-D grid of any size (grid-stride loop).
///
/// # Safety
/// `a`, `b` and `out` must be device pointers valid for `n` elements, and 16-byte aligned when
/// `vector_ok != 0`.
#[kernel]
pub unsafe fn simple_add_f32(a: *const f32, b: *const f32, out: *mut f32, n: u64, vector_ok: u32) {
    simple_add::<f32, 4, SIMPLE_ADD_UNROLL>(a, b, out, n, vector_ok)
}

/// `out = a + b` over `n` elements, launched with a 1-D grid of any size (grid-stride loop).
///
/// # Safety
/// `a`, `b` and `out` must be device pointers valid for `n` elements, and 16-byte aligned when
/// `vector_ok != 0`.
#[kernel]
pub unsafe fn simple_add_f16(a: *const f16, b: *const f16, out: *mut f16, n: u64, vector_ok: u32) {
    simple_add::<f16, 8, SIMPLE_ADD_UNROLL>(a, b, out, n, vector_ok)
}

/// `out = a + b` over `n` elements, launched with a 1-D grid of any size (grid-stride loop).
///
/// # Safety
/// `a`, `b` and `out` must be device pointers valid for `n` elements, and 16-byte aligned when
/// `vector_ok != 0`.
#[kernel]
pub unsafe fn simple_add_bf16(a: *const Bf16, b: *const Bf16, out: *mut Bf16, n: u64, vector_ok: u32) {
    simple_add::<Bf16, 8, SIMPLE_ADD_UNROLL>(a, b, out, n, vector_ok)
}

/// [`simple_add_f32`] with one vector per thread and step (XLA's own elementwise kernels take
/// one: small blocks and few registers, many resident). The host's default.
///
/// # Safety
/// As [`simple_add_f32`].
#[kernel]
pub unsafe fn simple_add_f32_x1(a: *const f32, b: *const f32, out: *mut f32, n: u64, vector_ok: u32) {
    simple_add::<f32, 4, 1>(a, b, out, n, vector_ok)
}

/// [`simple_add_f16`] with one vector per thread and step.
///
/// # Safety
/// As [`simple_add_f16`].
#[kernel]
pub unsafe fn simple_add_f16_x1(a: *const f16, b: *const f16, out: *mut f16, n: u64, vector_ok: u32) {
    simple_add::<f16, 8, 1>(a, b, out, n, vector_ok)
}

/// [`simple_add_bf16`] with one vector per thread and step.
///
/// # Safety
/// As [`simple_add_bf16`].
#[kernel]
pub unsafe fn simple_add_bf16_x1(a: *const Bf16, b: *const Bf16, out: *mut Bf16, n: u64, vector_ok: u32) {
    simple_add::<Bf16, 8, 1>(a, b, out, n, vector_ok)
}
